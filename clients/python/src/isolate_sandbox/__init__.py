"""isolate_sandbox: run untrusted code in the isolate Linux sandbox from Python.

The sandbox (namespaces, cgroups, seccomp, a read-only root file system) is the security
boundary. The import policy of :func:`analyze_code` is policy on top of it, not protection.

Backends: ``service`` (``isolate serve``'s unix socket; any user its group admits), ``cli``
(the ``isolate`` binary, as root or as the caller's own user), ``local`` (a plain subprocess; NO
isolation). ``auto`` picks the service when it answers, else the binary. ``queue`` sends each
request as a job to the workers of a Redis queue (``isolate-serve --queue-url``; needs
python3-redis).

:class:`Session` keeps one box alive on the service across calls: its files, the processes left
running in it, and Python interpreters that keep their state (``run_code``).
"""

from .artifacts import store_execution
from .config import DEFAULT_BLOCKED_IMPORTS, SandboxConfig
from .errors import SandboxError, SandboxUnavailableError, ServiceError
from .executor import SandboxExecutor
from .llm import run_python_code
from .result import ExecutionResult, ResultMeta
from .runner import SandboxRunner
from .collect import CollectLimits
from .errors import CallTimeoutError, RefusedError
from .result import ExceptionInfo
from .sandbox import Sandbox, execute_code, execute_file, get_sandbox, run_code
from .transport import Mount
from .security import SecurityReport, analyze_code
from .queue_transport import JobDeadError, QueueClient, ResultTimeoutError
from .session import (CodeContext, CommandHandle, CommandResult, Execution, FileEntry,
                      FilesystemEvent, Result, Session, SessionInfo, WatchHandle)

__all__ = [
    "DEFAULT_BLOCKED_IMPORTS", "ExecutionResult", "ResultMeta", "Sandbox", "SandboxConfig",
    "SandboxError", "SandboxExecutor", "SandboxRunner", "SandboxUnavailableError", "ServiceError",
    "SecurityReport", "analyze_code", "execute_code", "execute_file",
    "get_sandbox", "run_python_code", "store_execution", "run_code", "Mount", "CollectLimits",
    "CallTimeoutError", "RefusedError", "ExceptionInfo", "QueueClient", "JobDeadError",
    "ResultTimeoutError", "Session", "Execution", "CommandResult", "CommandHandle",
    "CodeContext", "FileEntry", "SessionInfo", "Result", "FilesystemEvent", "WatchHandle",
]
__version__ = "0.1.0"
