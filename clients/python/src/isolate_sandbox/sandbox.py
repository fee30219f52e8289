"""Sandbox: configuration + a transport; execute_code and execute_file."""

import os
import time
from typing import Any, Dict, List, Optional, Sequence

from .artifacts import maybe_store, utc_now
from .cli_transport import CLITransport, find_binary
from .config import SandboxConfig
from .errors import SandboxError, SandboxUnavailableError
from .languages import canonical_language, language_of_file
from .local_transport import LocalTransport
from .result import ExecutionResult, ResultMeta, from_report
from .security import SecurityReport, analyze_code
from .service_transport import ServiceTransport, service_answers
from .transport import ExecRequest, Limits, OutputCallback, Transport


def select_transport(config: SandboxConfig) -> Transport:
    """The backend ``config.backend`` names; ``auto`` takes the service when its socket
    answers, else the binary when this process is root, else raises one error saying what
    to start."""
    if config.backend == "service":
        return ServiceTransport(config.socket_path)
    if config.backend == "cli":
        return CLITransport(config.isolate_bin)
    if config.backend == "local":
        return LocalTransport()
    if service_answers(config.socket_path):
        return ServiceTransport(config.socket_path)
    if os.geteuid() == 0:
        try:
            find_binary(config.isolate_bin)
        except SandboxUnavailableError as e:
            raise SandboxUnavailableError(
                f"no isolate service answers on {config.socket_path}, and {e}") from None
        return CLITransport(config.isolate_bin)
    raise SandboxUnavailableError(
        f"no isolate service answers on {config.socket_path} and this process is not root: "
        "start the service (sudo isolate serve, or systemctl start isolate) and make sure "
        "your user may use its socket, or run as root with the isolate binary; "
        "SANDBOX_TYPE=local runs code WITHOUT isolation")


class Sandbox:
    """Runs code with one configuration and one transport (see :func:`get_sandbox`)."""

    def __init__(self, config: SandboxConfig, transport: Optional[Transport] = None) -> None:
        self.config = config
        self.transport = transport if transport is not None else select_transport(config)

    @property
    def runtime(self) -> str:
        """The backend's name: ``service``, ``cli`` or ``local``."""
        return self.transport.name

    def limits(self, timeout: Optional[float] = None, memory_mb: Optional[int] = None,
               max_output_kb: Optional[int] = None) -> Limits:
        """This sandbox's limits, with the arguments given overriding them."""
        cfg = self.config
        seconds = cfg.timeout if timeout is None else float(timeout)
        if not seconds > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        kb = cfg.max_output_kb if max_output_kb is None else int(max_output_kb)
        mb = cfg.memory_mb if memory_mb is None else int(memory_mb)
        if kb <= 0 or mb <= 0:
            raise ValueError("max_output_kb and memory_mb must be positive")
        return Limits(timeout=seconds, memory_mb=mb, max_output_bytes=kb * 1024)

    def analyze(self, code: str, bypass: bool = False) -> SecurityReport:
        """The import policy's verdict on Python code under this sandbox's configuration."""
        return analyze_code(code, self.config.blocked_imports, self.config.import_mode, bypass)

    def execute_code(self, code: str, language: str = "python", *, stdin: str = "",
                     args: Sequence[str] = (), env: Optional[Dict[str, str]] = None,
                     timeout: Optional[float] = None, memory_mb: Optional[int] = None,
                     max_output_kb: Optional[int] = None, bypass_security: bool = False,
                     on_stdout: Optional[OutputCallback] = None,
                     on_stderr: Optional[OutputCallback] = None) -> ExecutionResult:
        """Compile (if needed) and run ``code``; never raises for what the program does.

        Python code is checked against the import policy first: in ``block`` mode a blocked
        import returns a result with status ``BLOCKED`` without running anything. ``on_stdout``
        and ``on_stderr`` receive output as it happens.
        """
        lang = canonical_language(language)
        limits = self.limits(timeout, memory_mb, max_output_kb)
        started = utc_now()
        blocked: List[str] = []
        if lang == "python":
            verdict = self.analyze(code, bypass_security)
            blocked = verdict.blocked
            if not verdict.allowed:
                result = blocked_result(verdict, self.runtime, limits)
                self._store(code, lang, limits, result, started)
                return result
        request = ExecRequest(language=lang, source=code, limits=limits, stdin=stdin,
                              args=tuple(args), env=dict(env or {}))
        clock = time.monotonic()
        report = self.transport.exec(request, on_stdout, on_stderr)
        result = from_report(report, self.runtime, limits.timeout, limits.memory_mb,
                             limits.max_output_bytes // 1024, blocked)
        result.duration = time.monotonic() - clock
        self._store(code, lang, limits, result, started)
        return result

    def execute_file(self, path: str, **kwargs: Any) -> ExecutionResult:
        """Run a source file; its language comes from its extension."""
        lang = kwargs.pop("language", None) or language_of_file(path)
        with open(path, encoding="utf-8") as f:
            code = f.read()
        return self.execute_code(code, lang, **kwargs)

    def _store(self, code: str, lang: str, limits: Limits, result: ExecutionResult,
               started: Any) -> None:
        path = maybe_store(self.config.store_code, self.config.artifacts_dir, code, lang,
                           result.meta.resource_limits, result, started)
        result.meta.artifact = path


def blocked_result(verdict: SecurityReport, runtime: str, limits: Limits) -> ExecutionResult:
    """The result of code the import policy refused to run."""
    return ExecutionResult(
        stdout="", stderr="", exit_code=None, duration=0.0, status="BLOCKED", timed_out=False,
        truncated=False, error="Security policy blocked import: " + ", ".join(verdict.blocked),
        meta=ResultMeta(runtime=runtime, blocked_imports=list(verdict.blocked),
                        resource_limits={"timeout": limits.timeout,
                                         "memory_mb": limits.memory_mb,
                                         "max_output_kb": limits.max_output_bytes // 1024}))


def get_sandbox(kind: Optional[str] = None, **overrides: Any) -> Sandbox:
    """A Sandbox configured from ``SANDBOX_*`` with ``overrides`` winning; ``kind`` names the
    backend (``auto``, ``service``, ``cli``, ``local``; an unknown one is a ValueError)."""
    if kind is not None:
        overrides["backend"] = kind.strip().lower()
    return Sandbox(SandboxConfig.from_env(**overrides))


def execute_code(code: str, language: str = "python", **kwargs: Any) -> ExecutionResult:
    """Run ``code`` in a sandbox from :func:`get_sandbox` (see :meth:`Sandbox.execute_code`)."""
    return get_sandbox().execute_code(code, language, **kwargs)


def execute_file(path: str, **kwargs: Any) -> ExecutionResult:
    """Run a source file in a sandbox from :func:`get_sandbox`."""
    return get_sandbox().execute_file(path, **kwargs)


__all__ = ["Sandbox", "get_sandbox", "execute_code", "execute_file", "select_transport",
           "SandboxError"]
