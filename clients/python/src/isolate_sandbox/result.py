"""ExecutionResult: what one execution gave, mapped from isolate's report."""

import dataclasses
import re
from typing import Any, Dict, List, Optional

from .transport import Limits

STATUSES = ("OK", "RE", "SG", "TO", "ML", "XX", "CE")


@dataclasses.dataclass
class ResultMeta:
    """How the result came about.

    ``runtime`` names the backend (``service``, ``cli``, ``local``); ``resource_limits`` holds
    ``timeout`` (s), ``memory_mb``, ``max_output_kb``, ``disk_mb`` (None: isolate's default),
    ``network`` and ``mounts``; ``notes`` says what the client did that the caller should
    know (a symlink left out of a project, collected files cut); ``report`` is isolate's full report
    (for ``exec``: ``{"status", "compile", "run"}``) with CPU time, peak memory, blocked syscalls;
    ``artifact`` the file the execution was stored in, if it was; ``enforcement`` how each
    limit was enforced when the binary ran without root (``{"memory": "rlimit",
    "memory_rlimit": "address-space", "pids": "rlimit", "cpu": "rlimit", "cpus": "none", "wall":
    "supervisor"}``: ``cgroup`` under a delegated subtree, ``rlimit`` without one, ``none`` for a
    limit not asked; ``memory_rlimit`` the language's rule, ``address-space``, ``data`` or
    ``none``), empty where root's cgroups enforced them all.
    """

    runtime: str
    blocked_imports: List[str] = dataclasses.field(default_factory=list)
    truncated: bool = False
    resource_limits: Dict[str, Any] = dataclasses.field(default_factory=dict)
    report: Dict[str, Any] = dataclasses.field(default_factory=dict)
    artifact: Optional[str] = None
    notes: List[str] = dataclasses.field(default_factory=list)
    enforcement: Dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ExceptionInfo:
    """An uncaught Python exception, as E2B's ``error.name``/``value``/``traceback``:
    ``name`` ``ZeroDivisionError``, ``value`` ``division by zero``, ``traceback`` the whole
    text. Read from the program's stderr, which the program controls: information, not proof.
    """

    name: str
    value: str
    traceback: str


@dataclasses.dataclass
class ExecutionResult:
    """The outcome of one execution.

    ``status`` is the report's (OK RE SG TO ML XX CE, or ``BLOCKED`` when the import policy
    stopped the code before it ran); ``duration`` is the wall time in seconds; ``error`` is a
    clear message or None when the program exited 0 within its limits; ``exception`` the
    uncaught Python exception, if the program died of one; ``files`` what ``collect`` brought
    back (box path -> bytes).
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
    exception: Optional[ExceptionInfo] = None
    files: Dict[str, bytes] = dataclasses.field(default_factory=dict)

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


def limits_of(limits: Limits) -> Dict[str, Any]:
    """``meta.resource_limits`` of a call."""
    return {"timeout": limits.timeout, "memory_mb": limits.memory_mb,
            "max_output_kb": limits.max_output_bytes // 1024, "disk_mb": limits.disk_mb,
            "network": limits.network, "output_keep": limits.keep}


def from_report(report: Dict[str, Any], runtime: str, limits: Limits,
                blocked_imports: Optional[List[str]] = None) -> ExecutionResult:
    """Map a run or exec report to an ExecutionResult."""
    report = program_exit_is_not_a_syntax_error(report)
    status = str(report.get("status", "XX"))
    phase = run_report_of(report)
    compile_failed = status == "CE"
    if compile_failed:
        compile_report = report.get("compile") or report.get("run") or {}
        stdout = ""
        stderr = str(compile_report.get("message") or compile_report.get("stderr") or "")
        if compile_report.get("stderr") and compile_report.get("message"):
            stderr = str(compile_report["stderr"]).strip() or stderr
    else:
        stdout = str(phase.get("stdout", ""))
        stderr = str(phase.get("stderr", ""))
    truncated = bool(phase.get("stdout_truncated") or phase.get("stderr_truncated"))
    exit_code = phase.get("exit_code") if phase else None
    timed_out = status == "TO"
    exception = exception_of(stderr) if status == "RE" else None
    if compile_failed:
        exception = syntax_error_of(stderr)
    elif status == "RE" and exception is None and exit_code == 1 and \
            SYNTAX_ERROR_LINE.match(stderr.rstrip("\n").rsplit("\n", 1)[-1]):
        # An image with no compile step (host): Python reports the syntax error as it runs.
        exception = syntax_error_of(stderr)
    error = error_message(status, phase, stderr, limits.timeout, limits.memory_mb,
                          limits.disk_mb)
    if status == "RE" and exception is not None and not disk_full(phase, stderr):
        error = f"{exception.name}: {exception.value}" if exception.value else exception.name
    return ExecutionResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        duration=float(phase.get("wall_time", 0.0) or 0.0),
        status=status,
        timed_out=timed_out,
        truncated=truncated,
        error=error,
        meta=ResultMeta(runtime=runtime, blocked_imports=list(blocked_imports or []),
                        truncated=truncated, resource_limits=limits_of(limits), report=report,
                        enforcement=enforcement_of(phase)),
        exception=exception,
    )


def enforcement_of(phase: Dict[str, Any]) -> Dict[str, str]:
    """The report's ``sandbox.limits``: how each limit was enforced (runs without root only)."""
    sandbox = phase.get("sandbox")
    limits = sandbox.get("limits") if isinstance(sandbox, dict) else None
    if not isinstance(limits, dict):
        return {}
    return {str(name): str(how) for name, how in limits.items()}


# The last "Name: value" line of a Python traceback (dotted names for exceptions of modules).
EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?:: (.*))?$")


def exception_of(stderr: str) -> Optional[ExceptionInfo]:
    """The last uncaught Python exception in ``stderr``: its traceback from the last
    ``Traceback (most recent call last):`` to the ``Name: value`` line ending it."""
    start = stderr.rfind("Traceback (most recent call last):")
    if start < 0:
        return None
    lines = stderr[start:].rstrip("\n").splitlines()
    for i in range(len(lines) - 1, 0, -1):
        if lines[i] and not lines[i].startswith((" ", "\t")):
            m = EXCEPTION_LINE.match(lines[i])
            if m is None:
                return None
            return ExceptionInfo(name=m.group(1), value=m.group(2) or "",
                                 traceback="\n".join(lines[:i + 1]) + "\n")
    return None


# The line that ends Python's report of code it could not compile.
SYNTAX_ERROR_LINE = re.compile(r"^(SyntaxError|IndentationError|TabError)(?:: (.*))?$")


def syntax_error_of(stderr: str) -> Optional[ExceptionInfo]:
    """Python's SyntaxError (or IndentationError, TabError) in what compiling printed, as a
    Session's ``run_code`` names it: its last line's name and value, and everything from the
    ``File`` line on as the traceback."""
    lines = stderr.rstrip("\n").splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = SYNTAX_ERROR_LINE.match(lines[i])
        if m is None:
            continue
        start = i
        while start > 0 and not lines[start].lstrip().startswith("File "):
            start -= 1
        return ExceptionInfo(name=m.group(1), value=m.group(2) or "",
                             traceback="\n".join(lines[start:i + 1]) + "\n")
    return None


def program_exit_is_not_a_syntax_error(report: Dict[str, Any]) -> Dict[str, Any]:
    """isolate reports Python's exit status 93 as CE: its interpreter hook exits 93 after
    printing a SyntaxError. A program that calls ``sys.exit(93)`` itself prints no such line:
    its report is turned back into the run's RE."""
    phase = report.get("compile")
    if report.get("status") != "CE" or report.get("run") is not None or not phase:
        return report
    said = str(phase.get("stderr", ""))
    if phase.get("exit_code") != 93 or re.search(r"^\w*Error: ", said, re.M):
        return report
    if "python" not in str((phase.get("sandbox") or {}).get("image", "")):
        return report
    run = dict(phase, status="RE", message=f"exited with status {phase.get('exit_code')}")
    return dict(report, status="RE", compile=None, run=run)


def error_message(status: str, phase: Dict[str, Any], stderr: str, timeout: float,
                  memory_mb: int, disk_mb: Optional[int] = None) -> Optional[str]:
    """One clear sentence for a status that is not OK."""
    if status == "OK":
        return None
    if status == "TO" and phase.get("limit") == "call":
        return f"Code execution timed out: {phase.get('message')}"
    if status == "TO":
        return f"Code execution timed out after {format_seconds(timeout)}s"
    if status in ("RE", "SG") and disk_full(phase, stderr):
        return (f"Disk limit exceeded ({disk_mb or 64} MiB: the box's writable space and its "
                "largest file)")
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


def disk_full(phase: Dict[str, Any], stderr: str) -> bool:
    """The program stopped on the disk limit: a file past the largest size (SIGXFSZ), or no
    space left in the box (ENOSPC, as the program reports it)."""
    return phase.get("signal") == 25 or "No space left on device" in stderr \
        or "File too large" in stderr
