"""Sessions: one box that lives across calls (``isolate serve``'s ``/v1/sessions``; docs/API.md).

A :class:`Session` owns a box on the service: its files, the processes left running in it, and
its interpreter contexts (the value of the last expression of each ``run_code`` call comes back
as its ``repr``, as a notebook shows it). Leaving its ``with`` block, or :meth:`Session.kill`,
ends it and everything in it; the service also ends it when its lease (``timeout``) or its idle
timeout runs out.
"""

import dataclasses
import http.client
import json
import os
import socket
import time
import urllib.parse
from typing import (Any, Callable, Dict, Iterator, List, Literal, Mapping, Optional, Sequence,
                    Tuple, Union, overload)

from .config import DEFAULT_SOCKET
from .errors import CallTimeoutError, SandboxError, SandboxUnavailableError, ServiceError
from .result import ExceptionInfo
from .service_transport import (NDJSON, auth_headers, connection, default_socket, env_list,
                                error_of, forget, ndjson_lines, probe)
from .transport import BusyRetry, OutputCallback, network_fields, network_value

# Seconds a call may take beyond its own bound: the service's setup, the answer's way back.
CALL_MARGIN = 30.0

# Default seconds of a foreground command (the service's default too).
COMMAND_TIMEOUT = 60.0

# Each wait request for a background command asks for at most this long, so that no
# connection idles for longer than a proxy might allow.
WAIT_SLICE = 30.0

# Bytes of an error answer read.
MAX_ERROR_BYTES = 65536

Signal = Union[str, int]


@dataclasses.dataclass
class Result:
    """An object as a notebook shows it (E2B's ``Result``), in the formats it offers through
    IPython's ``_repr_*_`` methods: ``text`` (its repr), ``html``, ``markdown``, ``svg``,
    ``png`` and ``jpeg`` (base64), ``latex``, ``json`` (the value); ``is_main_result`` for the
    value of the code's last expression (else what ``display()`` showed, or a matplotlib
    figure)."""

    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    latex: Optional[str] = None
    json: Any = None
    is_main_result: bool = False

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Result":
        """The service's result object."""
        return cls(text=doc.get("text"), html=doc.get("html"), markdown=doc.get("markdown"),
                   svg=doc.get("svg"), png=doc.get("png"), jpeg=doc.get("jpeg"),
                   latex=doc.get("latex"), json=doc.get("json"),
                   is_main_result=bool(doc.get("is_main_result")))

    def formats(self) -> List[str]:
        """The formats it has, as E2B names them."""
        return [f for f in ("text", "html", "markdown", "svg", "png", "jpeg", "latex", "json")
                if getattr(self, f) is not None]


ResultCallback = Callable[[Result], None]
ErrorCallback = Callable[[ExceptionInfo], None]


@dataclasses.dataclass
class Execution:
    """What one ``run_code`` call produced: ``result`` is the ``repr`` of the value of the
    code's last expression statement (None when there is none, or it is None; in JavaScript
    the completion value as ``util.inspect`` shows it, none in Bash), ``error`` the
    exception the code raised (``name``, ``value``, ``traceback``; ``ExitStatus`` in Bash
    for a non-zero status; ``ContextDied`` when the interpreter died, and the next call runs
    in a fresh one, ``restarted``). ``truncated``: more output came than the session's
    ``output_limit_bytes``; ``stdout``/``stderr`` keep its first and last half, with
    ``[... N bytes cut ...]`` between (the callbacks got all of it)."""

    result: Optional[str]
    stdout: str
    stderr: str
    error: Optional[ExceptionInfo]
    execution_count: int
    context: Optional[str] = None
    restarted: bool = False
    wall_time: float = 0.0
    results: List[Result] = dataclasses.field(default_factory=list)
    truncated: bool = False

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Execution":
        """The service's execution object."""
        err = doc.get("error")
        return cls(result=doc.get("result"), stdout=doc.get("stdout") or "",
                   stderr=doc.get("stderr") or "",
                   error=ExceptionInfo(name=str(err.get("name", "")),
                                       value=str(err.get("value", "")),
                                       traceback=str(err.get("traceback", "")))
                   if err else None,
                   execution_count=int(doc.get("execution_count") or 0),
                   context=doc.get("context"), restarted=bool(doc.get("restarted")),
                   wall_time=float(doc.get("wall_time") or 0.0),
                   results=[Result.from_json(r) for r in doc.get("results") or []],
                   truncated=bool(doc.get("truncated")))

    @property
    def text(self) -> Optional[str]:
        """The result, as a notebook's ``text/plain``."""
        return self.result


@dataclasses.dataclass
class CommandResult:
    """A command's outcome: ``status`` is the report's (OK RE SG TO ML XX), ``exit_code`` its
    exit code (None when a signal ended it), ``report`` the whole report the service sent.
    ``truncated``: a stream was longer than the command's output limit; it keeps its first and
    last half, with ``[... N bytes cut ...]`` between."""

    stdout: str
    stderr: str
    exit_code: Optional[int]
    status: str
    signal: int = 0
    wall_time: float = 0.0
    cpu_time: float = 0.0
    memory_peak: int = 0
    report: Dict[str, Any] = dataclasses.field(default_factory=dict)
    truncated: bool = False

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> "CommandResult":
        """The service's report of one command."""
        sig = int(report.get("signal") or 0)
        return cls(stdout=report.get("stdout") or "", stderr=report.get("stderr") or "",
                   exit_code=None if sig else int(report.get("exit_code") or 0),
                   status=str(report.get("status", "")), signal=sig,
                   wall_time=float(report.get("wall_time") or 0.0),
                   cpu_time=float(report.get("cpu_time") or 0.0),
                   memory_peak=int(report.get("memory_peak") or 0), report=dict(report),
                   truncated=bool(report.get("stdout_truncated")
                                  or report.get("stderr_truncated")))

    @property
    def ok(self) -> bool:
        """Exited 0 within its limits."""
        return self.status == "OK"


@dataclasses.dataclass
class FileEntry:
    """One file of the session's box."""

    name: str
    path: str
    size: int
    mode: int
    is_dir: bool
    mod_time: str

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "FileEntry":
        """The service's FileInfo."""
        return cls(name=str(doc.get("name", "")), path=str(doc.get("path", "")),
                   size=int(doc.get("size") or 0), mode=int(doc.get("mode") or 0),
                   is_dir=bool(doc.get("is_dir")), mod_time=str(doc.get("mod_time", "")))


@dataclasses.dataclass
class SessionInfo:
    """A session as :meth:`Session.list` finds it: ``Session.connect(info.id)`` takes it
    up."""

    id: str
    metadata: Dict[str, str]
    created_at: str = ""
    expires_at: str = ""
    idle_expires_at: str = ""
    last_used_at: str = ""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "SessionInfo":
        """The service's session object."""
        return cls(id=str(doc.get("id", "")), metadata=dict(doc.get("metadata") or {}),
                   created_at=str(doc.get("created_at", "")),
                   expires_at=str(doc.get("expires_at", "")),
                   idle_expires_at=str(doc.get("idle_expires_at", "")),
                   last_used_at=str(doc.get("last_used_at", "")))


class Session:
    """A box that lives across calls. ``language`` picks the image (its language's) and the
    default interpreter of :meth:`run_code`; ``image`` names another image. ``timeout`` is
    the lease in seconds (renewed by :meth:`set_timeout`), ``idle_timeout`` ends the session
    after that long without a call. Limits bound the session as a whole: ``memory_bytes``,
    ``pids``, ``cpus``; ``tmp_size_bytes`` is the size of its /box and /tmp.

    ``metadata`` (a few short strings) stays with the session: :meth:`list` finds it by them,
    :meth:`connect` takes it up by id, from any process of the same caller. A caller at its cap
    of sessions is tried again with backoff for up to ``busy_wait`` seconds (None: the
    request's bound; 0: never).

    The service: ``url`` (``http://HOST:PORT``, with ``token``), else ``socket_path``, else
    ``ISOLATE_URL`` (with ``ISOLATE_TOKEN``), ``ISOLATE_SOCKET``, ``/run/isolate/api.sock``.
    """

    def __init__(self, language: str = "python", timeout: float = 300, *,
                 image: Optional[str] = None, url: Optional[str] = None,
                 token: Optional[str] = None, socket_path: Optional[str] = None,
                 net: bool = False, network: Any = None,
                 env: Optional[Mapping[str, str]] = None,
                 memory_bytes: Optional[int] = None, pids: Optional[int] = None,
                 cpus: Optional[float] = None, tmp_size_bytes: Optional[int] = None,
                 output_limit_bytes: Optional[int] = None,
                 idle_timeout: Optional[float] = None,
                 metadata: Optional[Mapping[str, str]] = None,
                 busy_wait: Optional[float] = None) -> None:
        self._connect_to(url, token, socket_path, language)
        body: Dict[str, Any] = {"timeout_ms": _ms(timeout, "timeout")}
        if image:
            body["image"] = image
        else:
            body["lang"] = language
        if network is not None:
            body.update(network_fields(network_value(network)))
        elif net:
            body["net"] = "host"
        if env:
            body["env"] = env_list(env)
        if idle_timeout is not None:
            body["idle_timeout_ms"] = _ms(idle_timeout, "idle_timeout")
        for name, value in (("memory_bytes", memory_bytes), ("pids", pids), ("cpus", cpus),
                            ("tmp_size_bytes", tmp_size_bytes),
                            ("output_limit_bytes", output_limit_bytes)):
            if value is not None:
                body[name] = value
        if metadata:
            body["metadata"] = _metadata(metadata)
        # A caller at its cap of sessions (or a full service) is told 429: tried again, with
        # backoff, within the request's bound (busy_wait: at most that long; 0: never).
        retry = BusyRetry(COMMAND_TIMEOUT + CALL_MARGIN, busy_wait)
        while True:
            try:
                answer = self._json("POST", "/v1/sessions", body, retry.left())
                break
            except ServiceError as e:
                if e.status != 429:
                    raise
                retry.wait(e)
        self._take(answer)

    def _connect_to(self, url: Optional[str], token: Optional[str],
                    socket_path: Optional[str], language: str) -> None:
        """The service's endpoint and token (arguments, else the environment), checked to
        answer (once per endpoint in this process)."""
        if url is None and socket_path is None:
            url = os.environ.get("ISOLATE_URL", "").strip() or None
            if url is not None and token is None:
                token = os.environ.get("ISOLATE_TOKEN", "").strip() or None
        self.endpoint = (url or socket_path or os.environ.get("ISOLATE_SOCKET")
                         or default_socket(DEFAULT_SOCKET))
        self.token = token
        self.language = language
        self.id = ""
        self.expires_at = ""
        self.idle_expires_at = ""
        self.metadata: Dict[str, str] = {}
        self.killed = False
        self.commands = Commands(self)
        self.files = Files(self)
        why = probe(self.endpoint, token)
        if why is not None:
            raise SandboxUnavailableError(why)

    def _take(self, answer: Mapping[str, Any]) -> None:
        """The session's id, lease and metadata from the service's answer."""
        self.id = str(answer["id"])
        self.expires_at = str(answer.get("expires_at", ""))
        self.idle_expires_at = str(answer.get("idle_expires_at", ""))
        self.metadata = dict(answer.get("metadata") or {})

    @classmethod
    def connect(cls, session_id: str, *, language: str = "python", url: Optional[str] = None,
                token: Optional[str] = None, socket_path: Optional[str] = None) -> "Session":
        """A Session for the session ``session_id`` that exists on the service, made by this
        caller (in this process or another): its box, interpreters and files as they are.
        ``language`` is the default interpreter of :meth:`run_code`. An unknown session, one
        that ended, or another caller's is a ServiceError of status 404."""
        if not session_id:
            raise ValueError("session_id: empty")
        sb = cls.__new__(cls)
        sb._connect_to(url, token, socket_path, language)
        sb.id = session_id
        sb._take(sb._json("GET", sb._path(), None))
        return sb

    @classmethod
    def list(cls, metadata: Optional[Mapping[str, str]] = None, *, url: Optional[str] = None,
             token: Optional[str] = None, socket_path: Optional[str] = None
             ) -> List["SessionInfo"]:
        """This caller's sessions on the service; with ``metadata``, those whose metadata
        holds every key with its value."""
        sb = cls.__new__(cls)
        sb._connect_to(url, token, socket_path, "python")
        query = urllib.parse.urlencode(sorted((f"metadata.{k}", v)
                                              for k, v in _metadata(metadata or {}).items()))
        answer = sb._json("GET", "/v1/sessions" + ("?" + query if query else ""), None)
        return [SessionInfo.from_json(doc) for doc in answer.get("sessions") or []]

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, expires_at={self.expires_at!r})"

    # --- the session ---------------------------------------------------------------------------

    def kill(self) -> None:
        """End the session: everything in it is killed, its box removed. Ending one that has
        already ended (here, or by its lease) is no error."""
        if self.killed:
            return
        try:
            self._request("DELETE", self._path(), None)
        except ServiceError as e:
            if e.status != 404:
                raise
        self.killed = True

    def set_timeout(self, timeout: float) -> str:
        """Renew the lease: the session ends ``timeout`` seconds from now. Returns the new
        ``expires_at`` (RFC 3339)."""
        answer = self._json("POST", self._path("/timeout"),
                            {"timeout_ms": _ms(timeout, "timeout")})
        self.expires_at = str(answer.get("expires_at", ""))
        return self.expires_at

    def info(self) -> Dict[str, Any]:
        """The service's view of the session: its times, ``metadata``, ``usage`` (cpu_time,
        memory_bytes, memory_peak, pids, pids_peak, oom_kills), ``processes`` (``[]`` when
        none) and ``contexts`` (once there is one)."""
        return self._json("GET", self._path(), None)

    def is_running(self) -> bool:
        """True while the session lives on the service."""
        try:
            self.info()
            return True
        except ServiceError as e:
            if e.status == 404:
                return False
            raise

    # --- code --------------------------------------------------------------------------------

    def run_code(self, code: str, language: Optional[str] = None,
                 context: Optional[Union[str, "CodeContext"]] = None,
                 on_stdout: Optional[OutputCallback] = None,
                 on_stderr: Optional[OutputCallback] = None,
                 timeout: Optional[float] = None, env: Optional[Mapping[str, str]] = None,
                 cwd: Optional[str] = None, on_result: Optional[ResultCallback] = None,
                 on_error: Optional[ErrorCallback] = None) -> Execution:
        """Execute ``code`` in an interpreter of the session that keeps its state between
        calls: ``context`` (from :meth:`create_code_context`), else the session's default one
        of ``language`` (the session's language; ``python``, ``javascript`` or ``bash``, each
        language's default context its own). ``on_stdout``/``on_stderr`` get output as it
        arrives. ``timeout`` (seconds) interrupts the code (``KeyboardInterrupt`` in Python,
        ``Interrupted`` in JavaScript and Bash). ``env``
        (added to ``os.environ``) and ``cwd`` (absolute) hold for this call only.
        ``on_result`` gets each rich result as it comes, ``on_error`` the code's error once
        the call ends."""
        ex = self._run_code(code, language, context, on_stdout, on_stderr, on_result, timeout,
                            env, cwd)
        if ex.error is not None and on_error is not None:
            on_error(ex.error)
        return ex

    def _run_code(self, code: str, language: Optional[str],
                  context: Optional[Union[str, "CodeContext"]],
                  on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback],
                  on_result: Optional[ResultCallback], timeout: Optional[float],
                  env: Optional[Mapping[str, str]], cwd: Optional[str]) -> Execution:
        body: Dict[str, Any] = {"code": code}
        if env:
            body["env"] = env_list(env)
        if cwd is not None:
            body["cwd"] = cwd
        if isinstance(context, CodeContext):
            context = context.id
        if context is not None:
            body["context"] = context
        else:
            body["language"] = language or self.language
        if timeout is not None:
            body["timeout_ms"] = _ms(timeout, "timeout")
        bound = None if timeout is None else timeout + CALL_MARGIN
        if on_stdout is None and on_stderr is None and on_result is None:
            return Execution.from_json(self._json("POST", self._path("/code"), body, bound))
        body["stream"] = True
        for event in self._stream(self._path("/code"), body, bound):
            kind = event.get("type")
            if kind == "stdout":
                if on_stdout is not None and event.get("data"):
                    on_stdout(event["data"])
            elif kind == "stderr":
                if on_stderr is not None and event.get("data"):
                    on_stderr(event["data"])
            elif kind == "result":
                if on_result is not None:
                    on_result(Result.from_json(event))
            elif kind == "execution":
                doc = event.get("execution", event)
                return Execution.from_json(doc)
            elif kind == "error" or (kind is None and "error" in event):
                raise SandboxError(f"isolate service: the request failed: {event['error']}")
        raise SandboxError("isolate service: the answer ended before its execution")

    def create_code_context(self, language: str = "python") -> "CodeContext":
        """A new interpreter, independent of the others (its own process and namespace):
        ``python``, ``javascript`` (Node; needs the javascript image) or ``bash``."""
        answer = self._json("POST", self._path("/contexts"), {"language": language})
        return CodeContext(self, str(answer["id"]), str(answer.get("language", language)))

    def remove_code_context(self, context: Union[str, "CodeContext"]) -> None:
        """End an interpreter."""
        cid = context.id if isinstance(context, CodeContext) else context
        self._request("DELETE", self._path("/contexts/" + _quote(cid)), None)

    # --- HTTP ----------------------------------------------------------------------------------

    def _path(self, rest: str = "") -> str:
        return "/v1/sessions/" + _quote(self.id) + rest

    def _json(self, method: str, path: str, body: Optional[Any],
              bound: Optional[float] = None) -> Dict[str, Any]:
        return self._answer(method, path, body, bound)[1]

    def _answer(self, method: str, path: str, body: Optional[Any],
                bound: Optional[float] = None) -> Tuple[int, Dict[str, Any]]:
        """A JSON request's status and answer."""
        data = None if body is None else json.dumps(body).encode()
        status: List[int] = []
        raw = self._request(method, path, data, bound=bound, status=status.append)
        try:
            answer: Dict[str, Any] = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise SandboxError(f"isolate service: {method} {path}: not JSON: {raw[:200]!r}"
                               ) from None
        return status[0], answer

    def _request(self, method: str, path: str, data: Optional[bytes],
                 content_type: str = "application/json", bound: Optional[float] = None,
                 chunks: Optional[Callable[[bytes], None]] = None,
                 status: Optional[Callable[[int], None]] = None) -> bytes:
        """One request; the answer's body (or, with ``chunks``, the body handed over as it is
        read). A status of 300 or more is a ServiceError."""
        timeout = bound if bound is not None else COMMAND_TIMEOUT + CALL_MARGIN
        conn = connection(self.endpoint, timeout)
        try:
            headers = {"Content-Type": content_type}
            headers.update(auth_headers(self.token))
            try:
                conn.request(method, path, data, headers)
            except (BrokenPipeError, ConnectionResetError):
                pass  # an answer before the body was read (413): read it
            resp = conn.getresponse()
            if resp.status >= 300:
                raise error_of(resp.status, resp.reason, resp.read(MAX_ERROR_BYTES),
                               resp.getheader("Retry-After"))
            if status is not None:
                status(resp.status)
            if chunks is None:
                return resp.read()
            while True:
                chunk = resp.read(65536)
                if not chunk:
                    return b""
                chunks(chunk)
        except socket.timeout:
            raise CallTimeoutError(timeout) from None
        except (OSError, http.client.HTTPException) as e:
            if isinstance(e, (ConnectionRefusedError, FileNotFoundError)):
                forget(self.endpoint)
            raise SandboxError(f"isolate service on {self.endpoint}: {e}") from None
        finally:
            conn.close()

    def _stream(self, path: str, body: Dict[str, Any], bound: Optional[float]
                ) -> Iterator[Dict[str, Any]]:
        """POST ``body`` asking for NDJSON: the answer's objects as they arrive."""
        timeout = bound if bound is not None else COMMAND_TIMEOUT + CALL_MARGIN
        deadline = time.monotonic() + timeout
        conn = connection(self.endpoint, timeout)
        try:
            headers = {"Content-Type": "application/json", "Accept": NDJSON}
            headers.update(auth_headers(self.token))
            try:
                conn.request("POST", path, json.dumps(body).encode(), headers)
            except (BrokenPipeError, ConnectionResetError):
                pass
            resp = conn.getresponse()
            if resp.status >= 300:
                raise error_of(resp.status, resp.reason, resp.read(MAX_ERROR_BYTES),
                               resp.getheader("Retry-After"))
            yield from ndjson_lines(resp, conn, deadline)
        except socket.timeout:
            raise CallTimeoutError(timeout) from None
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise SandboxError(f"isolate service on {self.endpoint}: {e}") from None
        finally:
            conn.close()


class CodeContext:
    """An interpreter of a session, made by :meth:`Session.create_code_context`."""

    def __init__(self, session: Session, cid: str, language: str) -> None:
        self.session = session
        self.id = cid
        self.language = language

    def run_code(self, code: str, on_stdout: Optional[OutputCallback] = None,
                 on_stderr: Optional[OutputCallback] = None,
                 timeout: Optional[float] = None, env: Optional[Mapping[str, str]] = None,
                 cwd: Optional[str] = None, on_result: Optional[ResultCallback] = None,
                 on_error: Optional[ErrorCallback] = None) -> Execution:
        """:meth:`Session.run_code` in this context."""
        return self.session.run_code(code, context=self.id, on_stdout=on_stdout,
                                     on_stderr=on_stderr, timeout=timeout, env=env, cwd=cwd,
                                     on_result=on_result, on_error=on_error)

    def remove(self) -> None:
        """End this interpreter."""
        self.session.remove_code_context(self.id)

    def __repr__(self) -> str:
        return f"CodeContext(id={self.id!r}, language={self.language!r})"


class CommandHandle:
    """A command left running in the session (``commands.run(..., background=True)``)."""

    def __init__(self, session: Session, pid: Union[int, str]) -> None:
        self.session = session
        self.id = pid

    def __repr__(self) -> str:
        return f"CommandHandle(id={self.id!r})"

    def _path(self, rest: str = "") -> str:
        return self.session._path(f"/commands/{_quote(str(self.id))}{rest}")

    def info(self) -> Dict[str, Any]:
        """``{"id", "args", "running", "report" (once ended)}``."""
        return self.session._json("GET", self._path(), None)

    @property
    def running(self) -> bool:
        """True while the command runs."""
        return bool(self.info().get("running"))

    def wait(self, timeout: Optional[float] = None) -> CommandResult:
        """Wait for the command to end (at most ``timeout`` seconds; then CallTimeoutError)
        and return its outcome."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            slice_ = WAIT_SLICE
            if deadline is not None:
                slice_ = min(slice_, max(0.0, deadline - time.monotonic()))
            answer = self.session._json("POST", self._path("/wait"),
                                        {"timeout_ms": max(1, int(slice_ * 1000))},
                                        slice_ + CALL_MARGIN)
            if not answer.get("running"):
                return CommandResult.from_report(answer.get("report", answer))
            if deadline is not None and time.monotonic() >= deadline:
                raise CallTimeoutError(timeout or 0.0)

    def signal(self, sig: Signal) -> None:
        """Send a signal (``"TERM"``, ``"KILL"``, ``"INT"`` or a number) to the command's
        process group."""
        self.session._json("POST", self._path("/signal"), {"signal": sig})

    def kill(self) -> None:
        """SIGKILL the command."""
        self.signal("KILL")

    def send_stdin(self, data: Union[str, bytes]) -> None:
        """Append to the command's standard input."""
        raw = data.encode() if isinstance(data, str) else data
        self.session._request("POST", self._path("/stdin"), raw, "application/octet-stream")

    def close_stdin(self) -> None:
        """Close the command's standard input (it reads end of file)."""
        self.session._request("POST", self._path("/stdin?close=1"), b"",
                              "application/octet-stream")


class Commands:
    """``session.commands``: run commands in the session's box."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @overload
    def run(self, cmd: Union[str, Sequence[str]], background: Literal[False] = False,
            env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
            stdin: Optional[str] = None, timeout: Optional[float] = None,
            on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, stderr_to_stdout: bool = False,
            output_limit_bytes: Optional[int] = None) -> CommandResult: ...

    @overload
    def run(self, cmd: Union[str, Sequence[str]], background: Literal[True],
            env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
            stdin: Optional[str] = None, timeout: Optional[float] = None,
            on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, stderr_to_stdout: bool = False,
            output_limit_bytes: Optional[int] = None) -> CommandHandle: ...

    @overload
    def run(self, cmd: Union[str, Sequence[str]], background: bool,
            env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
            stdin: Optional[str] = None, timeout: Optional[float] = None,
            on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, stderr_to_stdout: bool = False,
            output_limit_bytes: Optional[int] = None
            ) -> Union[CommandResult, CommandHandle]: ...

    def run(self, cmd: Union[str, Sequence[str]], background: bool = False,
            env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
            stdin: Optional[str] = None, timeout: Optional[float] = None,
            on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, stderr_to_stdout: bool = False,
            output_limit_bytes: Optional[int] = None
            ) -> Union[CommandResult, CommandHandle]:
        """Run ``cmd`` (a string runs under ``/bin/sh -c``, a list as is). In the foreground
        (``timeout``: seconds of wall time, default 60) the outcome, whatever its exit code;
        with ``background=True`` a :class:`CommandHandle` at once (no time limit unless
        ``timeout`` is given). ``env`` adds to the session's environment for the command (its
        values win); ``cwd`` defaults to ``/box``."""
        args = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        body: Dict[str, Any] = {"args": args}
        if env is not None:
            body["env"] = env_list(env)
        if cwd is not None:
            body["cwd"] = cwd
        if stdin is not None:
            body["stdin"] = stdin
        if background:
            body["background"] = True
            if timeout is not None:
                body["timeout_ms"] = _ms(timeout, "timeout")
        else:
            timeout = COMMAND_TIMEOUT if timeout is None else timeout
            body["timeout_ms"] = _ms(timeout, "timeout")
        if stderr_to_stdout:
            body["stderr_to_stdout"] = True
        if output_limit_bytes is not None:
            body["output_limit_bytes"] = output_limit_bytes
        path = self.session._path("/commands")
        if background:
            answer = self.session._json("POST", path, body)
            return CommandHandle(self.session, answer["id"])
        bound = (timeout or COMMAND_TIMEOUT) + CALL_MARGIN
        if on_stdout is None and on_stderr is None:
            return CommandResult.from_report(self.session._json("POST", path, body, bound))
        body["stream"] = True
        for event in self.session._stream(path, body, bound):
            stream = event.get("type", event.get("stream"))
            if stream in ("stdout", "stderr") and "data" in event:
                callback = on_stdout if stream == "stdout" else on_stderr
                if callback is not None and event["data"]:
                    callback(event["data"])
            elif "status" in event:
                return CommandResult.from_report(event)
            elif isinstance(event.get("report"), dict):
                return CommandResult.from_report(event["report"])
            elif isinstance(event.get("result"), dict):
                return CommandResult.from_report(event["result"])
            elif "error" in event:
                raise SandboxError(f"isolate service: the request failed: {event['error']}")
        raise SandboxError("isolate service: the answer ended before the command's report")

    def connect(self, pid: Union[int, str]) -> CommandHandle:
        """A handle on a command of the session by its id."""
        return CommandHandle(self.session, pid)


class Files:
    """``session.files``: the files of the session's box. A relative path is relative to
    ``/box``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def _path(self, path: str, query: str = "") -> str:
        if not path:
            raise ValueError("path: empty")
        # The service takes a relative path as relative to /box; an absolute one has its
        # leading slash escaped (a "//" in a URL is not kept as such on every way).
        if path.startswith("/"):
            path = "%2F" + _quote(path.lstrip("/"), safe="/")
        else:
            path = _quote(path, safe="/")
        return self.session._path("/files/" + path) + query

    def write(self, path: str, data: Union[str, bytes], mode: Optional[int] = None
              ) -> Dict[str, Any]:
        """Create or replace ``path`` (making its directories) with ``data``; ``{"path",
        "size"}``."""
        raw = data.encode() if isinstance(data, str) else data
        query = "" if mode is None else f"?mode={mode:04o}"
        answer = self.session._request("PUT", self._path(path, query), raw,
                                       "application/octet-stream")
        doc: Dict[str, Any] = json.loads(answer) if answer.strip() else {}
        return doc

    def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        """The file's content: text (UTF-8, undecodable bytes replaced) or, with
        ``format="bytes"``, bytes."""
        if format not in ("text", "bytes"):
            raise ValueError(f"format: {format!r}, want 'text' or 'bytes'")
        parts: List[bytes] = []
        self.session._request("GET", self._path(path), None, chunks=parts.append)
        raw = b"".join(parts)
        return raw if format == "bytes" else raw.decode("utf-8", "replace")

    def stat(self, path: str) -> FileEntry:
        """What ``path`` is (a symlink itself, not followed)."""
        return FileEntry.from_json(self.session._json("GET", self._path(path, "?stat=1"), None))

    def exists(self, path: str) -> bool:
        """True when ``path`` exists in the box."""
        try:
            self.stat(path)
            return True
        except ServiceError as e:
            if e.status == 404:
                return False
            raise

    def list(self, path: str = "/box") -> List[FileEntry]:
        """The entries of directory ``path``."""
        answer = self.session._json("GET", self._path(path, "?list=1"), None)
        return [FileEntry.from_json(e) for e in answer.get("entries") or []]

    def remove(self, path: str) -> None:
        """Remove ``path`` (a directory with everything in it)."""
        self.session._request("DELETE", self._path(path), None)

    def make_dir(self, path: str) -> bool:
        """Make the directory ``path`` and what is missing above it; False when it was there
        already (anything else there is a ServiceError naming ``path``)."""
        answer = self.session._answer("POST", self._path(path), {"op": "mkdir"})
        return answer[0] == 201

    def rename(self, old: str, new: str) -> FileEntry:
        """Move ``old`` to ``new`` within the box (replacing what ``new`` names, as rename(2)
        does; a symlink moves as itself); what ``new`` is then. Both under /box, or both under
        /tmp: they are two file systems."""
        _, doc = self.session._answer("POST", self._path(old), {"op": "rename", "to": new})
        return FileEntry.from_json(doc)

    def watch_dir(self, path: str = "/box", recursive: bool = False) -> "WatchHandle":
        """Watch directory ``path`` (and its subdirectories, ``recursive``) for files created,
        written, removed or given another mode: ``handle.get_new_events()`` lists what changed
        since the handle was made or last asked (E2B's sync ``watch_dir``). It polls: each call
        lists the directories and compares names, sizes, modification times and modes, so a file
        created and removed between two calls gives no event, and one created then written
        gives ``create`` alone."""
        handle = WatchHandle(self, path, recursive)
        handle.get_new_events()  # the first listing: what is there already is no event
        return handle


@dataclasses.dataclass(frozen=True)
class FilesystemEvent:
    """A change in a watched directory: ``name`` relative to it, ``type`` one of ``create``,
    ``write``, ``remove``, ``chmod`` (E2B's ``FilesystemEventType``, lower case)."""

    name: str
    type: str


class WatchHandle:
    """What :meth:`Files.watch_dir` gives: :meth:`get_new_events` until :meth:`stop`."""

    def __init__(self, files: Files, path: str, recursive: bool) -> None:
        self.files, self.path, self.recursive = files, path.rstrip("/") or "/", recursive
        self.seen: Optional[Dict[str, Tuple[bool, int, str, int]]] = None
        self.stopped = False

    def _snapshot(self) -> Dict[str, Tuple[bool, int, str, int]]:
        """Each entry under the directory: (is_dir, size, mod_time, mode) by relative name."""
        found: Dict[str, Tuple[bool, int, str, int]] = {}
        pending = [""]
        while pending:
            rel = pending.pop()
            where = self.path + "/" + rel if rel else self.path
            try:
                entries = self.files.list(where)
            except ServiceError as e:
                if e.status == 404 and rel:
                    continue  # a subdirectory removed while it was walked
                raise
            for entry in entries:
                name = rel + "/" + entry.name if rel else entry.name
                found[name] = (entry.is_dir, entry.size, entry.mod_time, entry.mode)
                if entry.is_dir and self.recursive:
                    pending.append(name)
        return found

    def get_new_events(self) -> List[FilesystemEvent]:
        """The changes since the last call (creates and writes, then removes, each by name)."""
        if self.stopped:
            raise SandboxError("the watch was stopped")
        now, before = self._snapshot(), self.seen
        self.seen = now
        if before is None:
            return []
        events = []
        for name in sorted(now):
            old = before.get(name)
            if old is None or old[0] != now[name][0]:
                events.append(FilesystemEvent(name, "create"))
            elif old[1:3] != now[name][1:3] and not now[name][0]:
                events.append(FilesystemEvent(name, "write"))
            elif old[3] != now[name][3]:
                events.append(FilesystemEvent(name, "chmod"))
        events += [FilesystemEvent(name, "remove") for name in sorted(before) if name not in now]
        return events

    def stop(self) -> None:
        """No more events."""
        self.stopped = True


# Bounds of a session's metadata (the service's too).
MAX_METADATA_KEYS = 16
MAX_METADATA_KEY_BYTES = 64
MAX_METADATA_VALUE_BYTES = 512


def _metadata(metadata: Mapping[str, str]) -> Dict[str, str]:
    """``metadata`` checked against the service's bounds, so that a mistake is a ValueError
    naming the key before anything is sent."""
    if not isinstance(metadata, Mapping):
        raise ValueError(f"metadata: {metadata!r}, want a mapping of strings to strings")
    if len(metadata) > MAX_METADATA_KEYS:
        raise ValueError(f"metadata: {len(metadata)} keys, at most {MAX_METADATA_KEYS}")
    out = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"metadata: {key!r}: {value!r}, want strings")
        if not key or len(key.encode()) > MAX_METADATA_KEY_BYTES:
            raise ValueError(f"metadata: key {key!r}: 1 to {MAX_METADATA_KEY_BYTES} bytes")
        if len(value.encode()) > MAX_METADATA_VALUE_BYTES:
            raise ValueError(f"metadata.{key}: {len(value.encode())} bytes, at most "
                             f"{MAX_METADATA_VALUE_BYTES}")
        out[key] = value
    return out


def _ms(seconds: float, name: str) -> int:
    """Seconds as the API's milliseconds; a bound must be positive."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds <= 0:
        raise ValueError(f"{name}: {seconds!r}, want a positive number of seconds")
    return max(1, int(seconds * 1000))


def _quote(text: str, safe: str = "") -> str:
    return urllib.parse.quote(text, safe=safe)
