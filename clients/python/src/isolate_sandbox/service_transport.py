"""The service's HTTP/JSON API (``isolate serve``; docs/API.md), on its unix socket or on TCP
with a token.

``POST /v1/exec`` takes ``{"lang", "source", "stdin": {"text"}, "args", "env", limits}`` and
answers the exec report (``{"status", "compile", "run"}``); ``POST /v1/run`` takes
``{"commands": [COMMAND]}`` and answers ``{"results": [RESULT]}``. Limits carry their units in
their names (``cpu_time_ms``, ``memory_bytes``, ...). The client always asks for
``application/x-ndjson``: one JSON object per line, output chunks ``{"cmd", "stream", "data"}``
as they happen (so it keeps the head and the tail of long output itself), ``{"cmd", "result"}``
when a command ends, then ``{"done": true, ...}`` (``/v1/exec`` puts its report there as
``exec``) or ``{"error"}``. Errors are ``{"error", "field"}`` with an HTTP status; ``429`` (the
queue is full) is retried, honouring ``Retry-After``, within the call's own bound.
"""

import base64
import grp
import http.client
import json
import os
import socket
import stat
import struct
import tarfile
import tempfile
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from .errors import (CallTimeoutError, RefusedError, SandboxError, SandboxUnavailableError,
                     ServiceError)
from .languages import SOURCE_NAMES
from .transport import (MAX_COPY_OUT_BYTES, SETUP_SCRIPT, BusyRetry, ExecRequest, Limits,
                        Mount, OutputCallback, RunOutcome, RunRequest, TextSink, network_fields,
                        setup_script)

NDJSON = "application/x-ndjson"

# Bounds on what the client copies into a request from a project directory.
MAX_COPY_IN_FILES = 10000
MAX_COPY_IN_BYTES = 256 << 20

# Directories every box has; a copy_in file elsewhere needs the setup script.
BOX_TOP = ("/box", "/tmp")

# Files to copy in beyond these travel as one archive through the file store instead of in the
# request's body (the service's --max-body is 4 MiB by default, and base64 adds a third; a
# command's copy_in holds at most 256 entries).
MAX_INLINE_BYTES = 2 << 20
MAX_INLINE_FILES = 250

# Where that archive lands in the box (the setup script unpacks it and removes it).
ARCHIVE = "/box/.isolate-in.tar"

# Seconds a request to the file store may take.
STORE_TIMEOUT = 300.0


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over AF_UNIX."""

    def __init__(self, path: str, timeout: Optional[float] = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        """Connect to the unix socket instead of a TCP address."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.timeout is not None:
                sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def connection(endpoint: str, timeout: Optional[float]) -> http.client.HTTPConnection:
    """A connection to ``endpoint``: a unix socket's path, or ``http://HOST:PORT``."""
    if endpoint.startswith("http://"):
        url = urllib.parse.urlsplit(endpoint)
        if not url.hostname:
            raise ValueError(f"ISOLATE_URL {endpoint!r} names no host")
        return http.client.HTTPConnection(url.hostname, url.port or 80, timeout=timeout)
    if "://" in endpoint:
        raise ValueError(f"isolate service address {endpoint!r}: use http://HOST:PORT "
                         "(the service's --listen) or a unix socket's path")
    return UnixHTTPConnection(endpoint, timeout=timeout)


# Endpoints (with their token) where a service answered GET /v1/health in this process: each is
# probed once, not once per call or per session. A unix socket's path is still checked to exist
# each time (a stat, no request), so that a service that went away is noticed; a request that
# cannot connect forgets its endpoint (forget).
_ANSWERED: Set[Tuple[str, Optional[str]]] = set()
_ANSWERED_LOCK = threading.Lock()


def probe(endpoint: str, token: Optional[str] = None, timeout: float = 1.0) -> Optional[str]:
    """None when an HTTP server answers ``GET /v1/health`` at ``endpoint`` (any status: a
    draining or unready service answers 503, and requests then get its reason); otherwise why
    not, in words that say what to do. An endpoint that answered once in this process is not
    asked again (see forget)."""
    if not endpoint.startswith("http://"):
        try:
            os.stat(endpoint)
        except PermissionError:
            return (f"no isolate service answers on {endpoint} for this user (permission "
                    "denied on a directory above it)")
        except OSError:
            forget(endpoint)
            return f"no isolate service answers on {endpoint}"
    with _ANSWERED_LOCK:
        if (endpoint, token) in _ANSWERED:
            return None
    conn = connection(endpoint, timeout)
    try:
        conn.request("GET", "/v1/health", headers=auth_headers(token))
        conn.getresponse().read()
    except PermissionError:
        return permission_advice(endpoint)
    except (OSError, http.client.HTTPException) as e:
        return f"no isolate service answers on {endpoint} ({e})"
    finally:
        conn.close()
    with _ANSWERED_LOCK:
        _ANSWERED.add((endpoint, token))
    return None


def forget(endpoint: str) -> None:
    """Probe ``endpoint`` again next time: a request to it could not connect."""
    with _ANSWERED_LOCK:
        for key in [k for k in _ANSWERED if k[0] == endpoint]:
            _ANSWERED.discard(key)


def service_answers(endpoint: str, timeout: float = 1.0) -> bool:
    """True when an HTTP server answers ``GET /v1/health`` at ``endpoint``."""
    return probe(endpoint, None, timeout) is None


def own_service_socket(environ: Optional[Dict[str, str]] = None) -> Optional[str]:
    """The API socket of a service this user, who is not root, runs for itself (``isolate
    serve`` as the user), where isolate keeps it: ``$XDG_RUNTIME_DIR/isolate`` if that
    directory is the user's alone (mode 0700), else ``$TMPDIR/isolate-UID``, or, when another
    user made that one, ``$HOME/.cache/isolate``. None for root."""
    uid = os.geteuid()
    if uid == 0:
        return None
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(xdg):
        try:
            st = os.lstat(xdg)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and st.st_mode & 0o077 == 0:
                return os.path.join(xdg, "isolate", "api.sock")
        except OSError:
            pass
    tmp = os.path.join(env.get("TMPDIR") or "/tmp", f"isolate-{uid}")
    try:
        st = os.lstat(tmp)
        squatted = not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077 != 0
    except OSError:
        squatted = False  # missing: made by the service that starts first
    home = env.get("HOME", "")
    if squatted and os.path.isabs(home):
        return os.path.join(home, ".cache", "isolate", "api.sock")
    return os.path.join(tmp, "api.sock")


def listener_is_ours(path: str, timeout: float = 1.0) -> bool:
    """True when the process listening on the unix socket ``path`` is root's or this user's
    (``SO_PEERCRED``): requests, their code and files, go to nobody else."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                        struct.calcsize("3i")))
        return uid in (0, os.geteuid())
    except OSError:
        return False
    finally:
        sock.close()


def default_socket(default: str) -> str:
    """``default`` (root's service), unless there is no socket there and a service this user
    runs for itself answers: then that one's socket."""
    if os.path.lexists(default):
        return default
    own = own_service_socket()
    if own and listener_is_ours(own) and service_answers(own):
        return own
    return default


def permission_advice(path: str) -> str:
    """What to say when this process may not connect to the socket: the group that may."""
    try:
        st = os.stat(path)
        group = grp.getgrgid(st.st_gid).gr_name
    except (OSError, KeyError):
        return f"permission denied on the isolate service's socket {path}"
    return (f"permission denied on the isolate service's socket {path}: it admits root and "
            f"the group {group!r} (mode {stat.S_IMODE(st.st_mode):o}); add this user to "
            f"{group!r} (then log in again), or have the service started with "
            "--socket-group naming one of your groups")


def auth_headers(token: Optional[str]) -> Dict[str, str]:
    """The token's header for the TCP transport."""
    return {"Authorization": f"Bearer {token}"} if token else {}


class ServiceTransport:
    """Sends requests to ``isolate serve``; usable by any user the socket's group admits, or
    over TCP by anyone holding the token.

    ``busy_wait``: seconds a call may spend retrying answers of ``429`` (the service's queue is
    full), None for as long as the call's own bound allows, 0 for no retry.
    """

    name = "service"
    # Whether files to copy in beyond a request body's bound go through the file store.
    stores_files = True

    def __init__(self, endpoint: str, token: Optional[str] = None,
                 busy_wait: Optional[float] = None) -> None:
        why = probe(endpoint, token)
        if why is not None:
            if why.startswith("permission denied"):
                raise SandboxUnavailableError(why)
            raise SandboxUnavailableError(
                f"{why}: start it with `isolate serve` (or `systemctl start isolate`)")
        self.endpoint = endpoint
        self.socket_path = endpoint
        self.token = token
        self.busy_wait = busy_wait

    def exec(self, request: ExecRequest, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None) -> Dict[str, Any]:
        """``POST /v1/exec``: the exec report."""
        body: Dict[str, Any] = {"lang": request.language, "source": request.source,
                                "args": list(request.args), "env": env_list(request.env)}
        if request.stdin:
            body["stdin"] = {"text": request.stdin}
        if request.image:
            body["image"] = request.image
        body.update(limit_fields(request.limits))
        body.update(bind_fields(request.mounts))
        answer, sinks = self._post("/v1/exec", body, request.limits, on_stdout, on_stderr,
                                   request.mounts)
        report: Dict[str, Any] = answer["exec"] if "exec" in answer else answer
        if report.get("run"):
            with_kept_output(report["run"], sinks)
        return report

    def run(self, request: RunRequest, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None) -> RunOutcome:
        """``POST /v1/run`` with one command; copy-in files travel inline (base64)."""
        args, cwd = list(request.command), request.cwd
        stored = None
        if self.stores_files and over_inline_bounds(request.copy_in):
            # Too big for a request's body (or too many files for its copy_in): one archive,
            # streamed to the file store, that the box unpacks before the command.
            stored = self.store_archive(request.copy_in)
            archive = [{"path": ARCHIVE, "file": stored, "mode": 0o600}]
            args, cwd, copy_in = unpacked_in_box(args, cwd, archive, request.links, ARCHIVE)
        else:
            copy_in = inline_files(request.copy_in)
            if request.links or any(os.path.dirname(e["path"]) not in BOX_TOP for e in copy_in):
                args, cwd, copy_in = unpacked_in_box(args, cwd, copy_in, request.links)
        try:
            return self._run(request, args, cwd, copy_in, on_stdout, on_stderr)
        finally:
            if stored is not None:
                self.delete_stored(stored)

    def _run(self, request: RunRequest, args: List[str], cwd: str,
             copy_in: List[Dict[str, Any]], on_stdout: Optional[OutputCallback],
             on_stderr: Optional[OutputCallback]) -> RunOutcome:
        """``POST /v1/run`` of the command, its files to copy in given."""
        command: Dict[str, Any] = {
            "args": args, "cwd": cwd, "env": env_list(request.env), "copy_in": copy_in,
            "copy_out": [{"path": p, "inline_max_bytes": MAX_COPY_OUT_BYTES}
                         for p in request.copy_out],
        }
        if request.stdin:
            command["stdin"] = {"text": request.stdin}
        if request.image in SOURCE_NAMES:
            command["lang"] = request.image
        elif request.image != "host":
            command["image"] = request.image
        command.update(limit_fields(request.limits))
        command.update(bind_fields(request.mounts))
        answer, sinks = self._post("/v1/run", {"commands": [command]}, request.limits,
                                   on_stdout, on_stderr, request.mounts)
        results = answer.get("results") or []
        if len(results) != 1:
            raise SandboxError(f"isolate service: expected one result, got {len(results)}")
        report: Dict[str, Any] = with_kept_output(results[0], sinks)
        files, errors = copied_out(report.pop("copy_out", None) or [])
        return RunOutcome(report=report, files=files, errors=errors)

    def store_archive(self, copy_in: Any) -> str:
        """A tar archive of the files to copy in (box paths relative to /), streamed from a
        temporary file to the service's file store (``POST /v1/files``); its id."""
        with tempfile.TemporaryFile() as f:
            with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for src, dst, fd in project_files(copy_in):
                    with os.fdopen(fd, "rb") as data:
                        st = os.fstat(data.fileno())
                        info = tarfile.TarInfo(dst.lstrip("/"))
                        info.size, info.mode, info.mtime = (st.st_size,
                                                            stat.S_IMODE(st.st_mode) & 0o777,
                                                            int(st.st_mtime))
                        tar.addfile(info, data)
            size = f.tell()
            f.seek(0)
            headers = {"Content-Type": "application/octet-stream",
                       "Content-Length": str(size)}
            headers.update(auth_headers(self.token))
            conn = connection(self.endpoint, STORE_TIMEOUT)
            try:
                try:
                    conn.request("POST", "/v1/files", f, headers)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # an answer before the body was read (507, 413): read it
                resp = conn.getresponse()
                body = resp.read(65536)
                if resp.status != 201:
                    raise error_of(resp.status, resp.reason, body,
                                   resp.getheader("Retry-After"))
                return str(json.loads(body)["id"])
            except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
                raise SandboxError(f"isolate service on {self.endpoint}: storing the files to "
                                   f"copy in: {e}") from None
            finally:
                conn.close()

    def delete_stored(self, file_id: str) -> None:
        """Remove a stored file (best effort: the store's own lifetime ends it otherwise)."""
        conn = connection(self.endpoint, STORE_TIMEOUT)
        try:
            conn.request("DELETE", "/v1/files/" + urllib.parse.quote(file_id, safe=""),
                         headers=auth_headers(self.token))
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass
        finally:
            conn.close()

    def _post(self, path: str, body: Dict[str, Any], limits: Limits,
              on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback],
              mounts: Sequence[Mount] = ()) -> Tuple[Dict[str, Any], Tuple[TextSink, TextSink]]:
        """Send one request, retrying 429 within the bounds; the answer reassembled from its
        lines, and the sinks that kept its output."""
        data = json.dumps(body)
        retry = BusyRetry(limits.call_timeout, self.busy_wait)
        while True:
            left = retry.left()
            sinks = (TextSink(on_stdout, limits.max_output_bytes, limits.keep),
                     TextSink(on_stderr, limits.max_output_bytes, limits.keep))
            try:
                return self._post_once(path, data, limits, retry.deadline, left, sinks, mounts)
            except ServiceError as e:
                if e.status != 429:
                    raise
                retry.wait(e)

    def _post_once(self, path: str, data: str, limits: Limits, deadline: float, left: float,
                   sinks: Tuple[TextSink, TextSink], mounts: Sequence[Mount]
                   ) -> Tuple[Dict[str, Any], Tuple[TextSink, TextSink]]:
        """One try of the request, ``left`` seconds before its deadline; its output goes to
        ``sinks``."""
        conn = connection(self.endpoint, left)
        try:
            headers = {"Content-Type": "application/json", "Accept": NDJSON}
            headers.update(auth_headers(self.token))
            try:
                conn.request("POST", path, data, headers)
            except (BrokenPipeError, ConnectionResetError):
                # The service may answer before it reads a body (413 for one announced
                # over its bound) and close: its answer says why, read it.
                pass
            resp = conn.getresponse()
            if resp.status != 200:
                raise error_of(resp.status, resp.reason, resp.read(65536),
                               resp.getheader("Retry-After"), mounts)
            answer = reassemble(ndjson_lines(resp, conn, deadline), sinks)
            for sink in sinks:
                sink.close()
            return answer, sinks
        except socket.timeout:
            # Closing the connection cancels the request: the service kills its boxes.
            raise CallTimeoutError(limits.call_timeout) from None
        except (OSError, http.client.HTTPException, ValueError) as e:
            if isinstance(e, (ConnectionRefusedError, FileNotFoundError)):
                forget(self.endpoint)
            raise SandboxError(f"isolate service on {self.endpoint}: {e}") from None
        finally:
            conn.close()


def with_kept_output(report: Dict[str, Any], sinks: Tuple[TextSink, TextSink]
                     ) -> Dict[str, Any]:
    """The report with the output the client kept from the stream (head and tail as asked);
    cut if either the client or the service cut it."""
    out, err = sinks
    report.update(stdout=out.text,
                  stdout_truncated=out.truncated or bool(report.get("stdout_truncated")),
                  stderr=err.text,
                  stderr_truncated=err.truncated or bool(report.get("stderr_truncated")))
    return report


def reassemble(events: Iterator[Dict[str, Any]], sinks: Tuple[TextSink, TextSink]
               ) -> Dict[str, Any]:
    """Feed output events to the sinks in their order; return what the unstreamed answer
    would have been (``{"results": [...]}``, or ``{"exec": ...}`` for /v1/exec)."""
    results: Dict[int, Any] = {}
    for event in events:
        if "stream" in event:
            if event.get("data"):
                sinks[0 if event["stream"] == "stdout" else 1].emit(event["data"])
        elif "result" in event:
            results[int(event.get("cmd", 0))] = event["result"]
        elif "error" in event:
            raise SandboxError(f"isolate service: the request failed: {event['error']}")
        elif event.get("done"):
            answer: Dict[str, Any] = {"results": [results[i] for i in sorted(results)]}
            if "exec" in event:
                answer["exec"] = event["exec"]
            return answer
    raise SandboxError("isolate service: the answer ended before its last line")


def error_of(status: int, reason: str, body: bytes, retry_after: Optional[str] = None,
             mounts: Sequence[Mount] = ()) -> ServiceError:
    """The service's ``{"error", "field"}`` answer as an exception; a refusal by the caller
    policy (403) is a RefusedError, and a field that is a mount names the mount."""
    text = body.decode("utf-8", "replace").strip()
    field = None
    try:
        parsed = json.loads(text)
        text, field = str(parsed["error"]), parsed.get("field")
    except (ValueError, KeyError, TypeError):
        pass
    mount = mount_of_field(field, mounts)
    if mount is not None:
        text = f"mount {mount}: {text}"
    message = f"isolate service: {status} {reason}: {text or 'no details'}"
    kind = RefusedError if status == 403 else ServiceError
    error = kind(message, status=status, field=field)
    if retry_after:
        try:
            error.retry_after = float(retry_after)
        except ValueError:
            pass  # an HTTP date: the client's backoff decides
    return error


def mount_of_field(field: Optional[str], mounts: Sequence[Mount]) -> Optional[Mount]:
    """The mount a field path like ``commands[0].binds[1].host`` (or ``binds[1]``) names."""
    if not field or "binds" not in field:
        return None
    rest = field.split("binds", 1)[1]
    if rest.startswith("[") and "]" in rest:
        index = rest[1:rest.index("]")]
        if index.isdigit() and int(index) < len(mounts):
            return mounts[int(index)]
    return mounts[0] if len(mounts) == 1 else None


def ndjson_lines(resp: http.client.HTTPResponse, conn: http.client.HTTPConnection,
                 deadline: float) -> Iterator[Dict[str, Any]]:
    """One JSON object per line, as the lines arrive; each read waits at most until the
    deadline."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout()
        if conn.sock is not None:
            conn.sock.settimeout(left)
        line = resp.readline()
        if not line:
            return
        if line.strip():
            event: Dict[str, Any] = json.loads(line)
            yield event


def env_list(env: Any) -> List[str]:
    """``NAME=VALUE`` entries; a name with ``=`` in it (or none) is the caller's mistake."""
    out = []
    for name, value in env.items():
        if not name or "=" in name:
            raise ValueError(f"bad environment variable name {name!r}")
        out.append(f"{name}={value}")
    return out


def limit_fields(limits: Limits) -> Dict[str, Any]:
    """The API's limit fields, units in their names."""
    ms = max(1, int(limits.timeout * 1000))
    fields: Dict[str, Any] = {"cpu_time_ms": ms, "wall_time_ms": ms,
                              "memory_bytes": limits.memory_mb << 20,
                              "output_limit_bytes": limits.max_output_bytes}
    if limits.pids is not None:
        fields["pids"] = limits.pids
    if limits.disk_mb is not None:
        fields["tmp_size_bytes"] = fields["file_size_bytes"] = limits.disk_mb << 20
    fields.update(network_fields(limits.network))
    return fields


def bind_fields(mounts: Sequence[Mount]) -> Dict[str, Any]:
    """The API's ``binds``."""
    if not mounts:
        return {}
    return {"binds": [{"host": m.host, "box": m.box, "rw": m.rw} for m in mounts]}


def copied_out(items: List[Dict[str, Any]]) -> Tuple[Dict[str, bytes], Dict[str, str]]:
    """A result's ``copy_out`` entries as box path -> content, and box path -> why it did not
    come back whole."""
    files: Dict[str, bytes] = {}
    errors: Dict[str, str] = {}
    for item in items:
        if item.get("size", 0) > MAX_COPY_OUT_BYTES:
            # Its size alone says it cannot come back whole, whatever else the service says.
            errors[item["path"]] = f"over {MAX_COPY_OUT_BYTES} bytes"
        elif item.get("error") or item.get("truncated"):
            errors[item["path"]] = str(item.get("error") or f"over {MAX_COPY_OUT_BYTES} bytes")
        elif "text" in item:
            files[item["path"]] = item["text"].encode("utf-8")
        elif "base64" in item:
            files[item["path"]] = base64.b64decode(item["base64"])
    return files, errors


def unpacked_in_box(args: List[str], cwd: str, copy_in: List[Dict[str, Any]],
                    links: Sequence[Tuple[str, str]] = (), archive: Optional[str] = None
                    ) -> Tuple[List[str], str, List[Dict[str, Any]]]:
    """The service puts each copy_in file into a directory that must exist; a tree's files
    therefore go in flat, and a setup script (run by the box's /bin/sh, as the box user)
    makes the directories and symlinks, moves the files into place, removes itself and execs
    the command. The script travels as a file, not an argument: a large tree exceeds an
    argument's bound. With ``archive``, ``copy_in`` is that one tar archive, which the script
    unpacks (with the box's tar) instead."""
    flat, moves = [], []
    dirs = sorted({os.path.dirname(p) for p, _ in links} | {cwd})
    if archive is not None:
        flat = list(copy_in)
    else:
        dirs = sorted(set(dirs) | {os.path.dirname(e["path"]) for e in copy_in})
        for i, entry in enumerate(copy_in):
            staged = f"/box/.isolate-in-{i}"
            moves.append((staged, entry["path"]))
            flat.append(dict(entry, path=staged))
    script = setup_script(cwd, dirs, moves, links, archive)
    flat.append({"path": SETUP_SCRIPT, "base64": base64.b64encode(script).decode(),
                 "mode": 0o600})
    return ["/bin/sh", SETUP_SCRIPT] + args, "/box", flat


def over_inline_bounds(copy_in: Any) -> bool:
    """Whether the files to copy in are too many or too big to travel in a request's body
    (sizes as the directory says, without opening anything)."""
    count = total = 0
    for host, _ in copy_in:
        paths = [host]
        if os.path.isdir(host):
            paths = [os.path.join(root, name) for root, _, names in os.walk(host)
                     for name in names]
        for path in paths:
            try:
                total += os.lstat(path).st_size
            except OSError:
                pass  # said when it is opened
            count += 1
            if count > MAX_INLINE_FILES or total > MAX_INLINE_BYTES:
                return True
    return False


def project_files(copy_in: Any) -> Iterator[Tuple[str, str, int]]:
    """Each regular file to copy in: its host path, its box path and a descriptor open for
    reading, which the caller closes. Symlinks are not followed (the caller makes those it
    keeps in the box); a FIFO, socket or device is an error naming it, found without opening
    it for reading (a FIFO would block)."""
    for host, box in copy_in:
        pairs = [(host, box)]
        if os.path.isdir(host):
            pairs = []
            for root, dirs, names in os.walk(host):
                for name in sorted(names):
                    full = os.path.join(root, name)
                    pairs.append((full, os.path.join(box, os.path.relpath(full, host))))
        for src, dst in pairs:
            try:
                fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError as e:
                if os.path.islink(src):
                    continue
                raise SandboxError(f"cannot copy {src} into the box: {e}") from None
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                raise SandboxError(f"cannot copy {src} into the box: "
                                   f"{file_kind(st.st_mode)}, not a regular file")
            yield src, dst, fd


def inline_files(copy_in: Any) -> List[Dict[str, Any]]:
    """Host files and directory trees as inline entries, bounded (project_files says which
    files, and which are refused)."""
    entries: List[Dict[str, Any]] = []
    total = 0
    for src, dst, fd in project_files(copy_in):
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            data = f.read(MAX_COPY_IN_BYTES + 1)
        total += len(data)
        if total > MAX_COPY_IN_BYTES or len(entries) >= MAX_COPY_IN_FILES:
            raise SandboxError(f"the files to copy in exceed {MAX_COPY_IN_BYTES} bytes "
                               f"or {MAX_COPY_IN_FILES} files")
        entries.append({"path": dst, "base64": base64.b64encode(data).decode(),
                        "mode": stat.S_IMODE(mode) & 0o777})
    return entries


def file_kind(mode: int) -> str:
    """``a FIFO``, ``a socket``, ... for a file that is not regular."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "a special file"
