"""The ``isolate`` binary as a subprocess (``isolate exec`` / ``isolate run``), as root or as
the caller's own user (isolate's runs without root: limits through a delegated cgroup v2
subtree, or rlimits alone where the caller allows them)."""

import json
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .errors import (CallTimeoutError, RefusedError, SandboxError, SandboxUnavailableError,
                     ServiceError)
from .languages import SOURCE_NAMES
from .transport import (MAX_COPY_OUT_BYTES, SETUP_SCRIPT, BusyRetry, ExecRequest, Limits, Mount,
                        OutputCallback, RunOutcome, RunRequest, TextSink, kill_and_reap,
                        network_flags, pump, setup_script)

# isolate's own summary line starts with this; with --stream it ends isolate's stderr.
SUMMARY_PREFIX = "isolate: "

# How long isolate may take to end its run after SIGTERM, before SIGKILL.
TERM_GRACE_SECONDS = 10.0

# Only these of the caller's variables reach the isolate process: the ISOLATE_ variables the
# binary itself reads (its configuration, and whether and where it hands its runs to a service),
# and where a caller who is not root keeps isolate's files (its box ids, locks and staging
# mount; $HOME/.cache/isolate when another user made $TMPDIR/isolate-UID). The client's own
# (ISOLATE_BIN, ISOLATE_SOCKET, ISOLATE_URL, ISOLATE_TOKEN, ...) stay
# here: the binary keeps a run in-process when it sees an ISOLATE_ variable it does not know
# the service to honour. The box itself starts from an empty environment whatever isolate's is
# (CONTRACT.md).
ISOLATE_ENV_NAMES = ("ISOLATE_CONFIG", "ISOLATE_CGROUP_ROOT", "ISOLATE_IMAGES_DIR",
                     "ISOLATE_LANGS_DIR", "ISOLATE_CACHE_DIR", "ISOLATE_NO_SERVICE",
                     "ISOLATE_SERVICE_SOCKET", "TMPDIR", "XDG_RUNTIME_DIR", "HOME")

# What isolate says when the service it handed the run to has no room for it (every run slot
# taken, its queue full).
BUSY = "the service is busy"
# What it says when the caller's budget or quota in the service is spent for now: a 429 too.
BUSY_LINES = (BUSY, "over quota:", "over budget:")

# What isolate says when the caller policy of the service it handed the run to refuses a flag
# ("isolate: --net host: this service allows it to root only, ..."), or a host path the caller
# may not open itself ("isolate: --bind /srv: permission denied (as uid 1000)").
REFUSED_LINE = re.compile(r"^isolate: --([a-z][a-z-]*)\b")
REFUSED_RULES = ("this service allows it", "needs root", "permission denied (as uid")

# The API's name of a flag whose name is not its field's.
FLAG_FIELDS = {"bind": "binds", "box-id": "box_id", "copy-in": "copy_in"}

# isolate's flags for the choices of a caller who is not root; a usage error (status 2, no
# report) that names one is isolate refusing to run here without root, not bad input.
ROOTLESS_FLAGS = ("--allow-rlimit-only", "--cgroup-root")


def find_binary(explicit: Optional[str] = None) -> str:
    """The isolate binary: ``explicit``, else ``$ISOLATE_BIN``, else ``isolate`` on PATH."""
    candidate = explicit or os.environ.get("ISOLATE_BIN") or shutil.which("isolate")
    if not candidate:
        raise SandboxUnavailableError(
            "the isolate binary was not found: set ISOLATE_BIN or put isolate on PATH "
            "(make build gives bin/isolate)")
    if not os.access(candidate, os.X_OK):
        raise SandboxUnavailableError(f"{candidate} is not an executable isolate binary")
    return candidate


class StderrSink(TextSink):
    """isolate's stderr with --stream: the program's stderr, then isolate's summary line.

    The summary always comes last, so a trailing line that starts like it is held back until
    more arrives; at the end of the stream what is held is isolate's, not the program's.
    """

    def __init__(self, callback: Optional[OutputCallback], limit: int, keep: str) -> None:
        super().__init__(callback, limit, keep)
        self.held = ""
        self.raw: List[str] = []

    def emit(self, text: str) -> None:
        """Pass on and keep everything but a possible summary line at the end."""
        if not text:
            return
        if sum(map(len, self.raw)) < 65536:
            self.raw.append(text)
        else:
            self.raw = self.raw[-8:]  # the end holds isolate's own message
        pending = self.held + text
        body = pending[:-1] if pending.endswith("\n") else pending
        start = body.rfind("\n") + 1
        tail = pending[start:]
        if SUMMARY_PREFIX.startswith(tail[:len(SUMMARY_PREFIX)]):
            self.held, out = tail, pending[:start]
        else:
            self.held, out = "", pending
        if out:
            self.keep(out.encode("utf-8"))
            if self.callback is not None:
                self.callback(out)

    def close(self) -> None:
        """End of stream: drop the held summary."""
        text = self.decoder.decode(b"", final=True)
        if text:
            self.emit(text)


class CLITransport:
    """Runs requests with ``isolate exec --lang L`` and ``isolate run``, with this process's
    rights. Without root, isolate makes the boxes under ``cgroup_root`` (a delegated cgroup v2
    directory; None: its own cgroup, when delegated), or with rlimits alone when a request's
    ``limits.allow_rlimit_only`` says so; where it can do neither, the call raises
    SandboxUnavailableError with isolate's own line saying how to get one."""

    name = "cli"

    def __init__(self, binary: Optional[str] = None, cgroup_root: Optional[str] = None,
                 busy_wait: Optional[float] = None) -> None:
        self.binary = find_binary(binary)
        self.cgroup_root = cgroup_root
        self.busy_wait = busy_wait

    def exec(self, request: ExecRequest, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None) -> Dict[str, Any]:
        """``isolate exec``: the source is written to a private temporary directory first."""
        with tempfile.TemporaryDirectory(prefix="isolate-client-") as tmp:
            source = os.path.join(tmp, SOURCE_NAMES[request.language])
            with open(source, "w", encoding="utf-8") as f:
                f.write(request.source)
            argv = [self.binary, "exec", "--lang", request.language]
            if request.image:
                argv += ["--image", request.image]
            argv += limit_flags(request.limits) + mount_flags(request.mounts)
            argv += env_flags(request.env)
            argv += stdin_flags(tmp, request.stdin)
            tail = [source] + (["--"] + list(request.args) if request.args else [])
            return self._invoke(argv, tail, request.env, request.limits, tmp,
                                on_stdout, on_stderr)

    def run(self, request: RunRequest, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None) -> RunOutcome:
        """``isolate run``; files to copy out land in a private temporary directory."""
        with tempfile.TemporaryDirectory(prefix="isolate-client-") as tmp:
            argv = [self.binary, "run"]
            if request.image in SOURCE_NAMES:
                argv += ["--lang", request.image]
            elif request.image != "host":
                argv += ["--image", request.image]
            argv += limit_flags(request.limits) + mount_flags(request.mounts)
            argv += env_flags(request.env)
            command, cwd = list(request.command), request.cwd
            if request.links:
                # isolate copies no symlinks in: the setup script makes those the caller keeps.
                script = os.path.join(tmp, "setup.sh")
                with open(script, "wb") as f:
                    f.write(setup_script(cwd, sorted({os.path.dirname(p)
                                                      for p, _ in request.links}),
                                         links=request.links))
                os.chmod(tmp, 0o755)  # isolate copies it in as the box user
                os.chmod(script, 0o644)
                argv += ["--copy-in", f"{script}:{SETUP_SCRIPT}"]
                command, cwd = ["/bin/sh", SETUP_SCRIPT] + command, "/box"
            argv += ["--chdir", cwd]
            argv += stdin_flags(tmp, request.stdin)
            for host, box in request.copy_in:
                argv += ["--copy-in", f"{host}:{box}"]
            outputs = {}
            for i, box in enumerate(request.copy_out):
                outputs[box] = os.path.join(tmp, f"out{i}")
                argv += ["--copy-out", f"{box}:{outputs[box]}"]
            tail = ["--"] + command
            report = self._invoke(argv, tail, request.env, request.limits, tmp,
                                  on_stdout, on_stderr)
            files, errors = {}, {}
            for box, path in outputs.items():
                try:
                    data = read_bounded(path)
                except SandboxError:
                    errors[box] = f"over {MAX_COPY_OUT_BYTES} bytes"
                    continue
                if data is not None:
                    files[box] = data
            return RunOutcome(report=report, files=files, errors=errors)

    def _invoke(self, argv: List[str], tail: List[str], env: Mapping[str, str],
                limits: Limits, tmp: str, on_stdout: Optional[OutputCallback],
                on_stderr: Optional[OutputCallback]) -> Dict[str, Any]:
        """Start isolate, read its pipes (output live with --stream, kept as ``limits.keep``
        says), return the report with the kept output. Past ``limits.call_timeout`` isolate
        is stopped (SIGTERM: it tears its box down) and CallTimeoutError raised. A service
        the binary hands its run to that is busy is tried again, as the service transport
        does, within the call's bound (``busy_wait``)."""
        retry = BusyRetry(limits.call_timeout, self.busy_wait)
        while True:
            try:
                return self._invoke_once(argv, tail, env, limits, tmp, on_stdout, on_stderr,
                                         retry.deadline)
            except ServiceError as e:
                if e.status != 429:
                    raise
                retry.wait(e)

    def _invoke_once(self, argv: List[str], tail: List[str], env: Mapping[str, str],
                     limits: Limits, tmp: str, on_stdout: Optional[OutputCallback],
                     on_stderr: Optional[OutputCallback], deadline: float) -> Dict[str, Any]:
        """One try of :meth:`_invoke`, ending by ``deadline`` (monotonic)."""
        report_path = os.path.join(tmp, "report.json")
        try:
            os.unlink(report_path)
        except FileNotFoundError:
            pass
        if self.cgroup_root is not None:
            argv = argv + ["--cgroup-root", self.cgroup_root]
        argv = argv + ["--stream", "--report", report_path] + tail
        child_env = {k: v for k, v in os.environ.items() if k in ISOLATE_ENV_NAMES}
        if "GOCOVERDIR" in os.environ:
            # A coverage-instrumented isolate (the test command's) writes its counters there,
            # and warns on stderr without it.
            child_env["GOCOVERDIR"] = os.environ["GOCOVERDIR"]
        child_env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
        child_env.update(env)
        out = TextSink(on_stdout, limits.max_output_bytes, limits.keep)
        err = StderrSink(on_stderr, limits.max_output_bytes, limits.keep)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=child_env, close_fds=True)
        try:
            assert proc.stdout is not None and proc.stderr is not None
            finished = pump(proc, [(proc.stdout, out), (proc.stderr, err)], deadline)
            if not finished:
                proc.terminate()
                try:
                    proc.wait(TERM_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    pass
                raise CallTimeoutError(limits.call_timeout)
            code = proc.wait()
        finally:
            kill_and_reap(proc)
        text = "".join(err.raw).strip()
        try:
            with open(report_path, encoding="utf-8") as f:
                report: Dict[str, Any] = json.load(f)
        except (OSError, ValueError):
            raise no_report_error(code, text) from None
        phase = report.get("run") if "run" in report or "compile" in report else report
        if phase:
            phase.update(stdout=out.text, stdout_truncated=out.truncated,
                         stderr=err.text, stderr_truncated=err.truncated)
        return report


def no_report_error(code: int, text: str) -> SandboxError:
    """Why isolate wrote no report, as the client's exception: a service the run was handed
    to that is busy (a ServiceError of status 429, which the caller retries) or whose caller
    policy refused a field (RefusedError naming it, as the service transport's 403), isolate
    unable to run here without root as configured (SandboxUnavailableError), or isolate's
    own message."""
    last = text.splitlines()[-1] if text else ""
    if code == 2 and any(last.startswith(SUMMARY_PREFIX + b) for b in BUSY_LINES):
        return ServiceError(f"isolate: {last[len(SUMMARY_PREFIX):]}", status=429)
    refused = REFUSED_LINE.match(last) if code == 2 else None
    if refused is not None and any(r in last for r in REFUSED_RULES):
        flag = refused.group(1)
        return RefusedError(f"isolate: {last[len(SUMMARY_PREFIX):]}", status=403,
                            field=FLAG_FIELDS.get(flag, flag.replace("-", "_")))
    if code == 2 and os.geteuid() != 0 and any(f in text for f in ROOTLESS_FLAGS):
        return SandboxUnavailableError(
            f"the isolate binary cannot run here without root as configured: {text}. "
            "In this client: allow_rlimit_only=True (SANDBOX_ALLOW_RLIMIT_ONLY=1) "
            "enforces the limits with rlimits alone; cgroup_root= "
            "(SANDBOX_CGROUP_ROOT) names a delegated cgroup v2 directory")
    return SandboxError(f"isolate exited with status {code}: {text or 'no report'}")


def limit_flags(limits: Limits) -> List[str]:
    """isolate's flags for the limits."""
    # Fixed-point: isolate reads "1.5" or "90", not the exponent form ("1e+03") of %g.
    seconds = f"{limits.timeout:.3f}".rstrip("0").rstrip(".")
    flags = ["--time", seconds, "--wall-time", seconds, "--mem", f"{limits.memory_mb}M",
             "--output-limit", str(limits.max_output_bytes)]
    if limits.pids is not None:
        flags += ["--pids", str(limits.pids)]
    if limits.disk_mb is not None:
        flags += ["--tmp-size", f"{limits.disk_mb}M", "--fsize", f"{limits.disk_mb}M"]
    flags += network_flags(limits.network)
    if limits.allow_rlimit_only:
        flags += ["--allow-rlimit-only"]
    return flags


def mount_flags(mounts: Sequence[Mount]) -> List[str]:
    """``--bind HOST:BOX:ro|rw`` per mount."""
    flags: List[str] = []
    for m in mounts:
        flags += ["--bind", str(m)]
    return flags


def env_flags(env: Mapping[str, str]) -> List[str]:
    """``-E NAME`` per variable: values travel in isolate's environment, not on its command line
    (where any local user could read them in /proc)."""
    flags: List[str] = []
    for name in env:
        if not name or "=" in name:
            raise ValueError(f"bad environment variable name {name!r}")
        flags += ["-E", name]
    return flags


def stdin_flags(tmp: str, text: str) -> List[str]:
    """``--stdin`` of a file in ``tmp`` that holds ``text``; none for no text."""
    if not text:
        return []
    path = os.path.join(tmp, "stdin")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return ["--stdin", path]


def read_bounded(path: str) -> Optional[bytes]:
    """A copied-out file's content, None when the box did not produce it; refuses symlinks and
    files over MAX_COPY_OUT_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_COPY_OUT_BYTES + 1)
    if len(data) > MAX_COPY_OUT_BYTES:
        raise SandboxError(f"a file copied out of the box exceeds {MAX_COPY_OUT_BYTES} bytes")
    return data
