"""ExecutionResult: what one execution gave, mapped from isolate's report."""

import dataclasses
from typing import Any, Dict, List, Optional

STATUSES = ("OK", "RE", "SG", "TO", "ML", "XX", "CE")


@dataclasses.dataclass
class ResultMeta:
    """How the result came about.

    ``runtime`` names the backend (``service``, ``cli``, ``local``); ``resource_limits`` holds
    ``timeout`` (s), ``memory_mb`` and ``max_output_kb``; ``report`` is isolate's full report
    (for ``exec``: ``{"status", "compile", "run"}``) with CPU time, peak memory, blocked syscalls;
    ``artifact`` the file the execution was stored in, if it was.
    """

    runtime: str
    blocked_imports: List[str] = dataclasses.field(default_factory=list)
    truncated: bool = False
    resource_limits: Dict[str, Any] = dataclasses.field(default_factory=dict)
    report: Dict[str, Any] = dataclasses.field(default_factory=dict)
    artifact: Optional[str] = None


@dataclasses.dataclass
class ExecutionResult:
    """The outcome of one execution.

    ``status`` is the report's (OK RE SG TO ML XX CE, or ``BLOCKED`` when the import policy
    stopped the code before it ran); ``duration`` is the wall time in seconds; ``error`` is a
    clear message or None when the program exited 0 within its limits.
    """

    stdout: str
    stderr: str
    exit_code: Optional[int]
    duration: float
    status: str
    timed_out: bool
    truncated: bool
    error: Optional[str]
    meta: ResultMeta

    @property
    def success(self) -> bool:
        """True when the program exited 0 within all limits."""
        return self.status == "OK"

    def to_dict(self) -> Dict[str, Any]:
        """The result as plain JSON-serialisable data."""
        return dataclasses.asdict(self)


def run_report_of(report: Dict[str, Any]) -> Dict[str, Any]:
    """The report of the phase that counts: an exec report's run, else its compile, else itself."""
    if "compile" in report or "run" in report:
        phase = report.get("run") or report.get("compile") or {}
        return dict(phase)
    return report


def from_report(report: Dict[str, Any], runtime: str, timeout: float, memory_mb: int,
                max_output_kb: int, blocked_imports: Optional[List[str]] = None
                ) -> ExecutionResult:
    """Map a run or exec report to an ExecutionResult."""
    status = str(report.get("status", "XX"))
    phase = run_report_of(report)
    compile_failed = status == "CE"
    if compile_failed:
        compile_report = report.get("compile") or report.get("run") or {}
        stdout = ""
        stderr = str(compile_report.get("message") or compile_report.get("stderr") or "")
    else:
        stdout = str(phase.get("stdout", ""))
        stderr = str(phase.get("stderr", ""))
    truncated = bool(phase.get("stdout_truncated") or phase.get("stderr_truncated"))
    exit_code = phase.get("exit_code") if phase else None
    timed_out = status == "TO"
    limits = {"timeout": timeout, "memory_mb": memory_mb, "max_output_kb": max_output_kb}
    return ExecutionResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        duration=float(phase.get("wall_time", 0.0) or 0.0),
        status=status,
        timed_out=timed_out,
        truncated=truncated,
        error=error_message(status, phase, stderr, timeout, memory_mb),
        meta=ResultMeta(runtime=runtime, blocked_imports=list(blocked_imports or []),
                        truncated=truncated, resource_limits=limits, report=report),
    )


def error_message(status: str, phase: Dict[str, Any], stderr: str, timeout: float,
                  memory_mb: int) -> Optional[str]:
    """One clear sentence for a status that is not OK."""
    if status == "OK":
        return None
    if status == "TO":
        return f"Code execution timed out after {format_seconds(timeout)}s"
    if status == "ML":
        return f"Memory limit exceeded ({memory_mb} MiB)"
    if status == "CE":
        return f"Compilation failed: {stderr.strip()}"
    if status == "SG":
        return f"Killed by signal {phase.get('signal', 0)}"
    if status == "RE":
        return f"Exited with status {phase.get('exit_code')}"
    return f"Sandbox failure: {phase.get('message') or 'unknown'}"


def format_seconds(seconds: float) -> str:
    """``10`` for 10.0, ``1.5`` for 1.5: how a timeout reads in a message."""
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)
