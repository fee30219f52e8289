"""What a backend must do, the requests it receives, and pipe reading shared by backends.

A transport turns a request into isolate's report: ``exec`` gives the ``isolate exec`` report
(``{"status", "compile", "run"}``), ``run`` the ``isolate run`` report plus the files copied out.
Three implement it: the service's unix socket, the ``isolate`` binary, and a plain local
subprocess.
"""

import codecs
import dataclasses
import os
import selectors
import subprocess
import time
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

try:
    from typing import Protocol
except ImportError:  # pragma: no cover - Python < 3.8
    Protocol = object  # type: ignore

OutputCallback = Callable[[str], None]

# Bytes of a file copied out of a box that the client accepts.
MAX_COPY_OUT_BYTES = 64 << 20


@dataclasses.dataclass
class Limits:
    """Limits of one box: ``timeout`` is seconds of CPU and wall time, ``max_output_bytes`` the
    output kept per stream; ``pids`` None keeps isolate's default."""

    timeout: float
    memory_mb: int
    max_output_bytes: int
    pids: Optional[int] = None


@dataclasses.dataclass
class ExecRequest:
    """Compile (if needed) and run one source file in the language's image."""

    language: str
    source: str
    limits: Limits
    stdin: str = ""
    args: Sequence[str] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RunRequest:
    """Run one command in a fresh box.

    ``image`` is ``host`` or a language's name (its image and environment); ``copy_in`` pairs a
    host path with a box path; ``copy_out`` lists box files to return.
    """

    command: Sequence[str]
    limits: Limits
    image: str = "host"
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    copy_in: Sequence[Tuple[str, str]] = ()
    copy_out: Sequence[str] = ()
    cwd: str = "/box"


@dataclasses.dataclass
class RunOutcome:
    """The run report and the files copied out (box path -> content; missing files absent)."""

    report: Dict[str, Any]
    files: Dict[str, bytes] = dataclasses.field(default_factory=dict)


class Transport(Protocol):
    """A way to reach a sandbox."""

    name: str

    def exec(self, request: ExecRequest, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None) -> Dict[str, Any]:
        """Compile and run ``request.source``; return the exec report."""
        ...  # pragma: no cover

    def run(self, request: RunRequest, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None) -> RunOutcome:
        """Run ``request.command`` in a fresh box; return its report and copied-out files."""
        ...  # pragma: no cover


class TextSink:
    """Decodes a byte stream as UTF-8 as it arrives, hands text to a callback and keeps the first
    ``limit`` bytes."""

    def __init__(self, callback: Optional[OutputCallback], limit: int) -> None:
        self.callback = callback
        self.limit = limit
        self.kept = bytearray()
        self.total = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes) -> None:
        """Take the next chunk."""
        self.total += len(data)
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += data[:room]
        self.emit(self.decoder.decode(data))

    def close(self) -> None:
        """End of stream: flush what the decoder holds."""
        self.emit(self.decoder.decode(b"", final=True))

    def emit(self, text: str) -> None:
        """Give text to the callback, if any."""
        if text and self.callback is not None:
            self.callback(text)

    @property
    def text(self) -> str:
        """The kept bytes as text."""
        return self.kept.decode("utf-8", "replace")

    @property
    def truncated(self) -> bool:
        """More arrived than was kept."""
        return self.total > self.limit


def pump(proc: "subprocess.Popen[bytes]", sinks: List[Tuple[IO[bytes], TextSink]],
         deadline: float) -> bool:
    """Read the pipes into their sinks until all close or ``deadline`` (monotonic) passes.

    Returns False when the deadline passed first (the caller kills). The pipes are closed on
    return, whatever happens, also when a callback raises.
    """
    sel = selectors.DefaultSelector()
    try:
        for pipe, sink in sinks:
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, sink)
        open_pipes = len(sinks)
        while open_pipes:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for key, _ in sel.select(timeout=left):
                data = os.read(key.fd, 65536)
                if data:
                    key.data.feed(data)
                    continue
                sel.unregister(key.fileobj)
                key.data.close()
                open_pipes -= 1
        return True
    finally:
        sel.close()
        for pipe, _ in sinks:
            pipe.close()


def kill_and_reap(proc: "subprocess.Popen[bytes]", group: bool = False) -> None:
    """Kill our child (its process group if it leads one) and wait for it."""
    if proc.poll() is None:
        try:
            if group:
                os.killpg(proc.pid, 9)
            else:
                proc.kill()
        except ProcessLookupError:  # pragma: no cover - exited in between
            pass
    proc.wait()
