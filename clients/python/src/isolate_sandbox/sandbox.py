"""Sandbox: configuration + a transport; execute_code and execute_file."""

import os
import shlex
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .artifacts import maybe_store, utc_now
from .cli_transport import CLITransport, find_binary
from .collect import CollectLimits, collect_command, unpack
from .config import DEFAULT_SOCKET, SandboxConfig, parse_mounts, positive_seconds
from .errors import CallTimeoutError, SandboxError, SandboxUnavailableError
from .languages import COMPILED, SOURCE_NAMES, canonical_language, language_of_file
from .local_transport import LocalTransport
from .result import ExecutionResult, ResultMeta, format_seconds, from_report, limits_of
from .security import SecurityReport, analyze_code
from .queue_transport import QueueTransport
from .service_transport import ServiceTransport, default_socket, probe
from .transport import (ExecRequest, Limits, Mount, OutputCallback, RunRequest, Transport,
                        network_value)


def select_transport(config: SandboxConfig) -> Transport:
    """The backend ``config.backend`` names; ``auto`` takes the service when its socket
    answers (root's at the default path, else a service this user runs for itself), else the
    binary (as root, or as this user: isolate's runs without root), else raises one error
    saying what to start."""
    endpoint = config.service_url or config.socket_path
    if config.backend in ("auto", "service") and endpoint == DEFAULT_SOCKET:
        # Root's service's socket; a service of the user's own serves where there is none.
        endpoint = default_socket(DEFAULT_SOCKET)
    if config.backend == "service" or (config.backend == "auto" and config.service_url):
        return ServiceTransport(endpoint, config.token, config.busy_wait)
    if config.backend == "cli":
        return CLITransport(config.isolate_bin, config.cgroup_root, config.busy_wait)
    if config.backend == "local":
        return LocalTransport()
    if config.backend == "queue" and config.queue_url:
        return QueueTransport(config.queue_url, config.queue_prefix)
    why = probe(endpoint)
    if why is None:
        return ServiceTransport(endpoint, config.token, config.busy_wait)
    if why.startswith("permission denied"):
        raise SandboxUnavailableError(why)
    try:
        find_binary(config.isolate_bin)
    except SandboxUnavailableError as e:
        raise SandboxUnavailableError(
            f"no isolate service answers on {config.socket_path}, and {e}: start the service "
            "(sudo isolate serve, or systemctl start isolate) and make sure your user may use "
            "its socket, or give the binary; SANDBOX_TYPE=local runs code WITHOUT isolation"
        ) from None
    return CLITransport(config.isolate_bin, config.cgroup_root, config.busy_wait)


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
               max_output_kb: Optional[int] = None, *, disk_mb: Optional[int] = None,
               network: Any = None, compile_timeout: Optional[float] = None,
               allow_rlimit_only: Optional[bool] = None) -> Limits:
        """This sandbox's limits, with the arguments given overriding them. The whole call is
        bounded by ``timeout`` plus ``compile_timeout`` when given (a compiled language) plus
        SETUP_SECONDS."""
        return limits_from(self.config, timeout, memory_mb, max_output_kb, disk_mb, network,
                           compile_timeout, allow_rlimit_only=allow_rlimit_only)

    def analyze(self, code: str, bypass: bool = False) -> SecurityReport:
        """The import policy's verdict on Python code under this sandbox's configuration."""
        return analyze_code(code, self.config.blocked_imports, self.config.import_mode, bypass)

    def execute_code(self, code: str, language: str = "python", *, stdin: str = "",
                     args: Sequence[str] = (), env: Optional[Dict[str, str]] = None,
                     timeout: Optional[float] = None, memory_mb: Optional[int] = None,
                     max_output_kb: Optional[int] = None, disk_mb: Optional[int] = None,
                     compile_timeout: Optional[float] = None, network: Any = None,
                     mounts: Any = None, image: Optional[str] = None,
                     collect: Sequence[str] = (), collect_limits: Optional[CollectLimits] = None,
                     bypass_security: bool = False, allow_rlimit_only: Optional[bool] = None,
                     on_stdout: Optional[OutputCallback] = None,
                     on_stderr: Optional[OutputCallback] = None) -> ExecutionResult:
        """Compile (if needed) and run ``code``; never raises for what the program does.

        Python code is checked against the import policy first: in ``block`` mode a blocked
        import returns a result with status ``BLOCKED`` without running anything. ``on_stdout``
        and ``on_stderr`` receive output as it happens. ``timeout`` bounds the program;
        compiling may add ``compile_timeout``; past both the call stops the box and returns
        ``TO``. ``mounts``: host directories bound into the box (see README); ``image``
        another image than the language's. ``collect``: glob patterns (relative to /box, where
        the program runs) of files to bring back in ``result.files``, bounded by
        ``collect_limits``; Python only (a compiled program's files: SandboxRunner).
        ``allow_rlimit_only`` overrides the configuration's (the binary without root, where no
        cgroup v2 subtree is delegated: rlimits alone; ``result.meta.enforcement`` says how
        each limit was enforced).
        """
        lang = canonical_language(language)
        if collect and lang != "python":
            raise ValueError(f"collect= runs the code as a command: Python only, not {lang} "
                             "(compile and collect with SandboxRunner)")
        limits = self.limits(timeout, memory_mb, max_output_kb, disk_mb=disk_mb,
                             network=network, compile_timeout=(
                                 compile_timeout if compile_timeout is not None
                                 else self.config.compile_timeout) if lang in COMPILED else None,
                             allow_rlimit_only=allow_rlimit_only)
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
                              args=tuple(args), env=dict(env or {}),
                              mounts=self.mounts(mounts), image=image)
        clock = time.monotonic()
        files: Dict[str, bytes] = {}
        notes: List[str] = []
        try:
            if collect:
                bounds = collect_limits or CollectLimits()
                files, notes, report = self._run_collecting(request, collect, bounds,
                                                            on_stdout, on_stderr)
            else:
                report = self.transport.exec(request, on_stdout, on_stderr)
        except CallTimeoutError as e:
            report = call_timeout_report(e, lang in COMPILED)
        result = from_report(report, self.runtime, limits, blocked)
        result.duration = time.monotonic() - clock
        result.files, result.meta.notes = files, notes
        self._store(code, lang, limits, result, started)
        return result

    def _run_collecting(self, request: ExecRequest, patterns: Sequence[str],
                        bounds: CollectLimits, on_stdout: Optional[OutputCallback],
                        on_stderr: Optional[OutputCallback]
                        ) -> Tuple[Dict[str, bytes], List[str], Dict[str, Any]]:
        """Python source run as a command (``python3 main.py ARGS``) in the language's image,
        then the files the patterns match packed and brought back."""
        with tempfile.TemporaryDirectory(prefix="isolate-client-") as tmp:
            os.chmod(tmp, 0o755)  # isolate copies it in as the box user
            source = os.path.join(tmp, SOURCE_NAMES["python"])
            with open(source, "w", encoding="utf-8") as f:
                f.write(request.source)
            os.chmod(source, 0o644)
            command = " ".join(shlex.quote(a) for a in ["python3", SOURCE_NAMES["python"]]
                               + list(request.args))
            argv, copy_out = collect_command(command, patterns, bounds)
            run = RunRequest(command=argv, limits=request.limits,
                             image=request.image or "python", env=request.env,
                             copy_in=[(source, "/box/" + SOURCE_NAMES["python"])],
                             copy_out=copy_out, mounts=request.mounts, stdin=request.stdin)
            outcome = self.transport.run(run, on_stdout, on_stderr)
        files, notes = unpack(outcome.files, outcome.errors, bounds)
        return files, notes, outcome.report

    def mounts(self, mounts: Any) -> Sequence[Mount]:
        """The configuration's mounts, then the call's."""
        return tuple(self.config.mounts) + tuple(parse_mounts(mounts))

    run_code = execute_code

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
                        resource_limits=limits_of(limits)))


def limits_from(config: SandboxConfig, timeout: Optional[float], memory_mb: Optional[int],
                max_output_kb: Optional[int], disk_mb: Optional[int] = None,
                network: Any = None, compile_timeout: Optional[float] = None, *,
                allow_rlimit_only: Optional[bool] = None) -> Limits:
    """A call's limits: the configuration's, with the arguments given overriding them."""
    seconds = config.timeout if timeout is None else float(timeout)
    positive_seconds("timeout", seconds)
    kb = config.max_output_kb if max_output_kb is None else int(max_output_kb)
    mb = config.memory_mb if memory_mb is None else int(memory_mb)
    disk = config.disk_mb if disk_mb is None else int(disk_mb)
    if kb <= 0 or mb <= 0 or (disk is not None and disk <= 0):
        raise ValueError("max_output_kb, memory_mb and disk_mb must be positive")
    extra = 0.0
    if compile_timeout is not None:
        positive_seconds("compile_timeout", compile_timeout)
        extra = float(compile_timeout)
    limits = Limits(timeout=seconds, memory_mb=mb, max_output_bytes=kb * 1024,
                    disk_mb=disk, keep=config.output_keep,
                    network=config.network if network is None else network_value(network),
                    allow_rlimit_only=(config.allow_rlimit_only if allow_rlimit_only is None
                                       else bool(allow_rlimit_only)))
    limits.call_timeout += extra
    return limits


def call_timeout_report(e: CallTimeoutError, compiled: bool) -> Dict[str, Any]:
    """The report of a call stopped at its own bound: a TO saying what the bound covered."""
    what = "compilation, run and setup" if compiled else "run and setup"
    return {"status": "TO", "message": f"the call ({what}) exceeded "
            f"{format_seconds(e.seconds)}s and was stopped", "exit_code": None, "signal": 0,
            "killed": True, "limit": "call", "stdout": "", "stderr": "", "wall_time": e.seconds}


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


run_code = execute_code


__all__ = ["Sandbox", "get_sandbox", "execute_code", "execute_file", "run_code", "select_transport",
           "SandboxError"]
