"""What a backend must do, the requests it receives, and pipe reading shared by backends.

A transport turns a request into isolate's report: ``exec`` gives the ``isolate exec`` report
(``{"status", "compile", "run"}``), ``run`` the ``isolate run`` report plus the files copied out.
Three implement it: the service's unix socket, the ``isolate`` binary, and a plain local
subprocess.
"""

import codecs
import dataclasses
import os
import random
import selectors
import shlex
import subprocess
import time
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import CallTimeoutError, ServiceError

try:
    from typing import Protocol
except ImportError:  # pragma: no cover - Python < 3.8
    Protocol = object  # type: ignore

OutputCallback = Callable[[str], None]

# Bytes of a file copied out of a box that the client accepts.
MAX_COPY_OUT_BYTES = 64 << 20


# A box's network: False (loopback only), True (the host's network, where allowed), or an
# allowlist of what it may reach through isolate's proxy: domain names, "*." and a domain,
# addresses and CIDRs, each with an optional ":PORT"; "!ENTRY" denies.
Network = Union[bool, Tuple[str, ...]]


def network_value(value: Any, what: str = "network") -> Network:
    """``value`` as a Network: a bool, or a list of entries (a string: comma-separated)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        value = [e for e in value.split(",") if e.strip()]
    if isinstance(value, (list, tuple)) and value and all(isinstance(e, str) and e.strip()
                                                          for e in value):
        return tuple(e.strip() for e in value)
    raise ValueError(f"{what}: expected True, False or a non-empty list of hosts, addresses "
                     f"and CIDRs, got {value!r}")


def network_flags(network: Network) -> List[str]:
    """isolate's ``--net`` for a box's network."""
    if network is True:
        return ["--net", "host"]
    if network:
        return ["--net", "allow:" + ",".join(network)]
    return []


def network_fields(network: Network) -> Dict[str, Any]:
    """The API's ``net`` and ``network`` for a box's network."""
    if network is True:
        return {"net": "host"}
    if network:
        allow = [e for e in network if not e.startswith("!")]
        deny = [e[1:] for e in network if e.startswith("!")]
        n: Dict[str, Any] = {"allow": allow}
        if deny:
            n["deny"] = deny
        return {"net": "allow", "network": n}
    return {}


# Waits between retries of a busy service (429) when it names none: doubling from the first to
# the last, with jitter so that parallel callers do not come back together.
BACKOFF_FIRST = 0.05
BACKOFF_LAST = 2.0


class BusyRetry:
    """Retries of a busy service within a call's bound: ``bound`` seconds for the whole call,
    of which at most ``busy_wait`` (None: all of it; 0: no retry) in waits for a busy one."""

    def __init__(self, bound: float, busy_wait: Optional[float] = None) -> None:
        self.bound = bound
        self.started = time.monotonic()
        self.deadline = self.started + bound
        self.busy_until = self.deadline
        if busy_wait is not None:
            self.busy_until = min(self.deadline, self.started + busy_wait)
        self.attempt = 0

    def left(self) -> float:
        """Seconds left of the call's bound; CallTimeoutError once none is."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise CallTimeoutError(self.bound)
        return left

    def wait(self, e: ServiceError) -> None:
        """Sleep before the next try after ``e`` (a 429), as long as the service asked or the
        backoff says; raise ``e`` (saying how long it was retried) when that would pass the
        bound."""
        wait = max(e.retry_after or 0.0,
                   min(BACKOFF_LAST, BACKOFF_FIRST * 2 ** self.attempt) * random.uniform(1, 2))
        if time.monotonic() + wait > self.busy_until:
            waited = time.monotonic() - self.started
            error = type(e)(f"{e} (retried for {waited:.1f}s, within the call's bound)",
                            status=e.status, field=e.field)
            raise error from None
        self.attempt += 1
        time.sleep(wait)


# What a call may take beyond the box's own limits: queueing in the service, building the box,
# copying files in and out, tearing down.
SETUP_SECONDS = 30.0

# How a stream longer than its limit is cut: its first and last bytes (marked where cut), only
# the first, or only the last.
KEEP_MODES = ("head_tail", "head", "tail")


@dataclasses.dataclass
class Limits:
    """Limits of one box: ``timeout`` is seconds of CPU and wall time, ``max_output_bytes`` the
    output kept per stream (cut as ``keep`` says); ``call_timeout`` bounds the whole call
    (compiling, queueing and setup included; default ``timeout`` + SETUP_SECONDS); ``pids``
    None keeps isolate's default; ``disk_mb`` the box's writable space (/box and /tmp) and its
    largest file, None keeps isolate's default; ``network`` gives the box the host's network
    (True, where allowed) or what an allowlist names (a tuple of entries);
    ``allow_rlimit_only`` lets the binary run without root where no cgroup v2 subtree is
    delegated, enforcing the limits with rlimits alone (root and the service ignore it)."""

    timeout: float
    memory_mb: int
    max_output_bytes: int
    pids: Optional[int] = None
    disk_mb: Optional[int] = None
    keep: str = "head_tail"
    network: Network = False
    call_timeout: float = 0.0
    allow_rlimit_only: bool = False

    def __post_init__(self) -> None:
        if not self.call_timeout:
            self.call_timeout = self.timeout + SETUP_SECONDS


@dataclasses.dataclass(frozen=True)
class Mount:
    """A host directory (or file) bound into the box at ``box``; writable when ``rw``."""

    host: str
    box: str
    rw: bool = False

    def __str__(self) -> str:
        return f"{self.host}:{self.box}:{'rw' if self.rw else 'ro'}"


@dataclasses.dataclass
class ExecRequest:
    """Compile (if needed) and run one source file in the language's image (or ``image``)."""

    language: str
    source: str
    limits: Limits
    stdin: str = ""
    args: Sequence[str] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    mounts: Sequence[Mount] = ()
    image: Optional[str] = None


@dataclasses.dataclass
class RunRequest:
    """Run one command in a fresh box.

    ``image`` is ``host`` or a language's name (its image and environment); ``copy_in`` pairs a
    host path with a box path; ``copy_out`` lists box files to return; ``links`` are symlinks
    (box path, target) made in the box before the command.
    """

    command: Sequence[str]
    limits: Limits
    image: str = "host"
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    copy_in: Sequence[Tuple[str, str]] = ()
    copy_out: Sequence[str] = ()
    cwd: str = "/box"
    mounts: Sequence[Mount] = ()
    links: Sequence[Tuple[str, str]] = ()
    stdin: str = ""


@dataclasses.dataclass
class RunOutcome:
    """The run report and the files copied out (box path -> content; missing files absent)."""

    report: Dict[str, Any]
    files: Dict[str, bytes] = dataclasses.field(default_factory=dict)
    # Box path -> why it did not come back whole (over the bound, the store's quota).
    errors: Dict[str, str] = dataclasses.field(default_factory=dict)


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
    """Decodes a byte stream as UTF-8 as it arrives, hands text to a callback and keeps at most
    ``limit`` bytes of it: the first and the last half (``head_tail``, the cut marked), the
    first (``head``) or the last (``tail``)."""

    def __init__(self, callback: Optional[OutputCallback], limit: int,
                 keep: str = "head_tail") -> None:
        if keep not in KEEP_MODES:
            raise ValueError(f"unknown output keep mode {keep!r}; valid: {', '.join(KEEP_MODES)}")
        self.callback = callback
        self.limit = limit
        self.head_limit = {"head_tail": limit - limit // 2, "head": limit, "tail": 0}[keep]
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes) -> None:
        """Take the next chunk."""
        self.emit(self.decoder.decode(data))

    def close(self) -> None:
        """End of stream: flush what the decoder holds."""
        self.emit(self.decoder.decode(b"", final=True))

    def emit(self, text: str) -> None:
        """Keep text and give it to the callback, if any."""
        if not text:
            return
        self.keep(text.encode("utf-8"))
        if self.callback is not None:
            self.callback(text)

    def keep(self, data: bytes) -> None:
        """Keep what the mode keeps of the next bytes; memory stays within twice the limit."""
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if self.tail_limit and data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_limit:
                del self.tail[:-self.tail_limit]

    @property
    def cut(self) -> int:
        """Bytes dropped between the kept head and tail."""
        return self.total - len(self.head) - min(len(self.tail), self.tail_limit)

    @property
    def text(self) -> str:
        """The kept bytes as text, with a marker where bytes were cut."""
        tail = bytes(self.tail[-self.tail_limit:]) if self.tail_limit else b""
        if self.cut <= 0:
            return (bytes(self.head) + tail).decode("utf-8", "replace")
        return (self.head.decode("utf-8", "replace") + cut_marker(self.cut)
                + tail.decode("utf-8", "replace"))

    @property
    def truncated(self) -> bool:
        """More arrived than was kept."""
        return self.total > self.limit


def cut_marker(count: int) -> str:
    """What stands where output was cut."""
    return f"\n[... {count} bytes cut ...]\n"


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


SETUP_SCRIPT = "/box/.isolate-setup.sh"


def setup_script(cwd: str, dirs: Sequence[str] = (), moves: Sequence[Tuple[str, str]] = (),
                 links: Sequence[Tuple[str, str]] = (), archive: Optional[str] = None) -> bytes:
    """A script the box's /bin/sh runs as the box user before the command: it removes itself,
    unpacks ``archive`` (a tar of box paths relative to /, then removed), makes ``dirs``,
    moves staged files into place, makes symlinks (box path, target), enters ``cwd`` and
    execs the command (its arguments)."""
    q = shlex.quote
    lines = ["set -e", 'rm -f -- "$0"']
    if archive is not None:
        lines += [f"tar -xpf {q(archive)} -C /", f"rm -f -- {q(archive)}"]
    if dirs:
        lines.append("mkdir -p -- " + " ".join(q(d) for d in dirs))
    lines += [f"mv -f -- {q(src)} {q(dst)}" for src, dst in moves]
    lines += [f"ln -s -- {q(target)} {q(path)}" for path, target in links]
    lines += [f"cd -- {q(cwd)}", 'exec "$@"', ""]
    return "\n".join(lines).encode()
