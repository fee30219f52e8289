"""The ``isolate`` binary as a subprocess (``isolate exec`` / ``isolate run``); needs root."""

import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional

from .errors import SandboxError, SandboxUnavailableError
from .languages import SOURCE_NAMES
from .transport import (MAX_COPY_OUT_BYTES, ExecRequest, Limits, OutputCallback, RunOutcome,
                        RunRequest, TextSink, kill_and_reap, pump)

# isolate's own summary line starts with this; with --stream it ends isolate's stderr.
SUMMARY_PREFIX = "isolate: "

# How long past the box's own wall limit the client waits for isolate before killing it:
# compiling has limits of its own (docs/LANGUAGES.md), and tearing down takes a moment.
GRACE_SECONDS = 120.0

# Only these of the caller's variables reach the isolate process (its own configuration).
# The box itself starts from an empty environment whatever isolate's is (CONTRACT.md).
ISOLATE_ENV_PREFIX = "ISOLATE_"


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

    def __init__(self, callback: Optional[OutputCallback], limit: int) -> None:
        super().__init__(callback, limit)
        self.held = ""
        self.raw: List[str] = []

    def emit(self, text: str) -> None:
        """Pass on everything but a possible summary line at the end."""
        if not text:
            return
        if sum(map(len, self.raw)) < 65536:
            self.raw.append(text)
        pending = self.held + text
        body = pending[:-1] if pending.endswith("\n") else pending
        start = body.rfind("\n") + 1
        tail = pending[start:]
        if SUMMARY_PREFIX.startswith(tail[:len(SUMMARY_PREFIX)]):
            self.held, out = tail, pending[:start]
        else:
            self.held, out = "", pending
        if out and self.callback is not None:
            self.callback(out)

    def close(self) -> None:
        """End of stream: drop the held summary."""
        text = self.decoder.decode(b"", final=True)
        if text:
            self.emit(text)


class CLITransport:
    """Runs requests with ``isolate exec --lang L`` and ``isolate run`` as root."""

    name = "cli"

    def __init__(self, binary: Optional[str] = None) -> None:
        if os.geteuid() != 0:
            raise SandboxUnavailableError(
                "the isolate binary needs root: run as root, or start the service "
                "(isolate serve) and use its socket")
        self.binary = find_binary(binary)

    def exec(self, request: ExecRequest, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None) -> Dict[str, Any]:
        """``isolate exec``: the source is written to a private temporary directory first."""
        with tempfile.TemporaryDirectory(prefix="isolate-client-") as tmp:
            source = os.path.join(tmp, SOURCE_NAMES[request.language])
            with open(source, "w", encoding="utf-8") as f:
                f.write(request.source)
            argv = [self.binary, "exec", "--lang", request.language]
            argv += limit_flags(request.limits)
            argv += env_flags(request.env)
            if request.stdin:
                stdin = os.path.join(tmp, "stdin")
                with open(stdin, "w", encoding="utf-8") as f:
                    f.write(request.stdin)
                argv += ["--stdin", stdin]
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
            argv += limit_flags(request.limits)
            argv += env_flags(request.env)
            argv += ["--chdir", request.cwd]
            for host, box in request.copy_in:
                argv += ["--copy-in", f"{host}:{box}"]
            outputs = {}
            for i, box in enumerate(request.copy_out):
                outputs[box] = os.path.join(tmp, f"out{i}")
                argv += ["--copy-out", f"{box}:{outputs[box]}"]
            tail = ["--"] + list(request.command)
            report = self._invoke(argv, tail, request.env, request.limits, tmp,
                                  on_stdout, on_stderr)
            files = {box: data for box, path in outputs.items()
                     if (data := read_bounded(path)) is not None}
            return RunOutcome(report=report, files=files)

    def _invoke(self, argv: List[str], tail: List[str], env: Mapping[str, str],
                limits: Limits, tmp: str, on_stdout: Optional[OutputCallback],
                on_stderr: Optional[OutputCallback]) -> Dict[str, Any]:
        """Start isolate, read its pipes (live with --stream), return the parsed report."""
        report_path = os.path.join(tmp, "report.json")
        streaming = on_stdout is not None or on_stderr is not None
        argv = argv + (["--stream", "--report", report_path] if streaming else ["--json"]) + tail
        child_env = {k: v for k, v in os.environ.items() if k.startswith(ISOLATE_ENV_PREFIX)}
        if "GOCOVERDIR" in os.environ:
            # A coverage-instrumented isolate (the test command's) writes its counters there,
            # and warns on stderr without it.
            child_env["GOCOVERDIR"] = os.environ["GOCOVERDIR"]
        child_env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
        child_env.update(env)
        out = TextSink(on_stdout if streaming else None, 64 << 20)
        err = StderrSink(on_stderr, 1 << 20)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=child_env, close_fds=True)
        try:
            assert proc.stdout is not None and proc.stderr is not None
            finished = pump(proc, [(proc.stdout, out), (proc.stderr, err)],
                            time.monotonic() + 2 * limits.timeout + GRACE_SECONDS)
            if not finished:
                raise SandboxError(
                    f"isolate did not finish {2 * limits.timeout + GRACE_SECONDS:.0f}s "
                    "after it started; killed")
            code = proc.wait()
        finally:
            kill_and_reap(proc)
        text = "".join(err.raw).strip()
        try:
            if streaming:
                with open(report_path, encoding="utf-8") as f:
                    report: Dict[str, Any] = json.load(f)
            else:
                report = json.loads(out.kept.decode("utf-8"))
        except (OSError, ValueError):
            raise SandboxError(f"isolate exited with status {code}: {text or 'no report'}") \
                from None
        return report


def limit_flags(limits: Limits) -> List[str]:
    """isolate's flags for the limits."""
    # Fixed-point: isolate reads "1.5" or "90", not the exponent form ("1e+03") of %g.
    seconds = f"{limits.timeout:.3f}".rstrip("0").rstrip(".")
    flags = ["--time", seconds, "--wall-time", seconds, "--mem", f"{limits.memory_mb}M",
             "--output-limit", str(limits.max_output_bytes)]
    if limits.pids is not None:
        flags += ["--pids", str(limits.pids)]
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
