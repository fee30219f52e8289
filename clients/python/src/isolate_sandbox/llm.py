"""run_python_code: compact text for an LLM tool call."""

import re

from .result import format_seconds
from .sandbox import get_sandbox


def run_python_code(code: str, timeout: int = 10) -> str:
    """Run Python code in the sandbox and describe the outcome in a few lines of text.

    Success gives the program's output; otherwise one of: ``Code execution timed out after
    {N}s``, ``Python syntax error: {details}``, ``Security policy blocked import: {module}``,
    ``Execution failed: {stderr}``.
    """
    result = get_sandbox().execute_code(code, "python", timeout=timeout)
    if result.status == "BLOCKED":
        return result.error or "Security policy blocked import"
    if result.timed_out:
        return f"Code execution timed out after {format_seconds(timeout)}s"
    if result.status == "CE":
        return f"Python syntax error: {syntax_details(result.stderr)}"
    if not result.success:
        return f"Execution failed: {(result.stderr or result.error or '').strip()}"
    text = result.stdout
    if result.stderr:
        text += ("\n" if text and not text.endswith("\n") else "") + "[stderr]\n" + result.stderr
    if result.truncated:
        text += f"\n[output truncated to {result.meta.resource_limits['max_output_kb']} KB]"
    return text if text else "(no output)"


def syntax_details(message: str) -> str:
    """``invalid syntax (line 1)`` from the interpreter's SyntaxError text."""
    lines = [line for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return "unknown"
    last = lines[-1].strip()
    last = re.sub(r"^SyntaxError:\s*", "", last)
    m = re.search(r"line (\d+)", message)
    if m and "line" not in last:
        last += f" (line {m.group(1)})"
    return last
