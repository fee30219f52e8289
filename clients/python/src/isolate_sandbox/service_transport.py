"""The service's HTTP/JSON API over its unix socket (``isolate serve``; docs/API.md).

``POST /v1/exec`` takes ``{"lang", "source", "stdin": {"text"}, "args", "env", limits}`` and
answers the exec report (``{"status", "compile", "run"}``); ``POST /v1/run`` takes
``{"commands": [COMMAND]}`` and answers ``{"results": [RESULT]}``. Limits carry their units in
their names (``cpu_time_ms``, ``memory_bytes``, ...). With ``Accept: application/x-ndjson`` the
answer is one JSON object per line: output chunks ``{"cmd", "stream", "data"}`` as they happen,
``{"cmd", "result"}`` when a command ends, then ``{"done": true, ...}`` (``/v1/exec`` puts its
report there as ``exec``) or ``{"error"}``. Errors are ``{"error", "field"}`` with an HTTP status.
"""

import base64
import http.client
import json
import os
import shlex
import socket
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .errors import SandboxError, SandboxUnavailableError, ServiceError
from .languages import SOURCE_NAMES
from .transport import (MAX_COPY_OUT_BYTES, ExecRequest, Limits, OutputCallback, RunOutcome,
                        RunRequest)

NDJSON = "application/x-ndjson"

# Bounds on what the client copies into a request from a project directory.
MAX_COPY_IN_FILES = 10000
MAX_COPY_IN_BYTES = 256 << 20

# How long past the box's own wall limit the client waits for the answer: compiling has limits
# of its own, and the request may wait in the service's queue.
GRACE_SECONDS = 120.0

# Directories every box has; a copy_in file elsewhere needs unpacked_in_box.
BOX_TOP = ("/box", "/tmp")
SETUP_SCRIPT = "/box/.isolate-setup.sh"


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


def service_answers(path: str, timeout: float = 1.0) -> bool:
    """True when an HTTP server answers ``GET /v1/health`` on the socket (any status: a
    draining or unready service answers 503, and requests then get its reason)."""
    if not os.path.exists(path):
        return False
    conn = UnixHTTPConnection(path, timeout=timeout)
    try:
        conn.request("GET", "/v1/health")
        conn.getresponse().read()
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


class ServiceTransport:
    """Sends requests to ``isolate serve``; usable by any user the socket's group admits."""

    name = "service"

    def __init__(self, socket_path: str) -> None:
        if not service_answers(socket_path):
            raise SandboxUnavailableError(
                f"no isolate service answers on {socket_path}: start it with `isolate serve` "
                "(or `systemctl start isolate`)")
        self.socket_path = socket_path

    def exec(self, request: ExecRequest, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None) -> Dict[str, Any]:
        """``POST /v1/exec``: the exec report."""
        body: Dict[str, Any] = {"lang": request.language, "source": request.source,
                                "args": list(request.args), "env": env_list(request.env)}
        if request.stdin:
            body["stdin"] = {"text": request.stdin}
        body.update(limit_fields(request.limits))
        answer = self._post("/v1/exec", body, request.limits, on_stdout, on_stderr)
        report: Dict[str, Any] = answer["exec"] if "exec" in answer else answer
        return report

    def run(self, request: RunRequest, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None) -> RunOutcome:
        """``POST /v1/run`` with one command; copy-in files travel inline (base64)."""
        args, cwd = list(request.command), request.cwd
        copy_in = inline_files(request.copy_in)
        if any(os.path.dirname(e["path"]) not in BOX_TOP for e in copy_in):
            args, cwd, copy_in = unpacked_in_box(args, cwd, copy_in)
        command: Dict[str, Any] = {
            "args": args, "cwd": cwd, "env": env_list(request.env), "copy_in": copy_in,
            "copy_out": [{"path": p, "inline_max_bytes": MAX_COPY_OUT_BYTES}
                         for p in request.copy_out],
        }
        if request.image in SOURCE_NAMES:
            command["lang"] = request.image
        elif request.image != "host":
            command["image"] = request.image
        command.update(limit_fields(request.limits))
        answer = self._post("/v1/run", {"commands": [command]}, request.limits,
                            on_stdout, on_stderr)
        results = answer.get("results") or []
        if len(results) != 1:
            raise SandboxError(f"isolate service: expected one result, got {len(results)}")
        report: Dict[str, Any] = results[0]
        return RunOutcome(report=report, files=copied_out(report.pop("copy_out", None) or []))

    def _post(self, path: str, body: Dict[str, Any], limits: Limits,
              on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]
              ) -> Dict[str, Any]:
        """Send one request; the answer as one object (a streamed one reassembled)."""
        streaming = on_stdout is not None or on_stderr is not None
        conn = UnixHTTPConnection(self.socket_path, timeout=2 * limits.timeout + GRACE_SECONDS)
        try:
            headers = {"Content-Type": "application/json",
                       "Accept": NDJSON if streaming else "application/json"}
            conn.request("POST", path, json.dumps(body), headers)
            resp = conn.getresponse()
            if resp.status != 200:
                raise error_of(resp.status, resp.reason, resp.read(65536))
            if not streaming:
                answer: Dict[str, Any] = json.loads(resp.read())
                return answer
            return reassemble(ndjson_lines(resp), on_stdout, on_stderr)
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise SandboxError(f"isolate service on {self.socket_path}: {e}") from None
        finally:
            conn.close()


def reassemble(events: Iterator[Dict[str, Any]], on_stdout: Optional[OutputCallback],
               on_stderr: Optional[OutputCallback]) -> Dict[str, Any]:
    """Hand output events to the callbacks in their order; return what the unstreamed answer
    would have been (``{"results": [...]}``, or ``{"exec": ...}`` for /v1/exec)."""
    results: Dict[int, Any] = {}
    for event in events:
        if "stream" in event:
            callback = on_stdout if event["stream"] == "stdout" else on_stderr
            if callback is not None and event.get("data"):
                callback(event["data"])
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


def error_of(status: int, reason: str, body: bytes) -> ServiceError:
    """The service's ``{"error", "field"}`` answer as an exception."""
    text = body.decode("utf-8", "replace").strip()
    field = None
    try:
        parsed = json.loads(text)
        text, field = str(parsed["error"]), parsed.get("field")
    except (ValueError, KeyError, TypeError):
        pass
    return ServiceError(f"isolate service: {status} {reason}: {text or 'no details'}",
                        status=status, field=field)


def ndjson_lines(resp: http.client.HTTPResponse) -> Iterator[Dict[str, Any]]:
    """One JSON object per line, as the lines arrive."""
    for line in iter(resp.readline, b""):
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
    return fields


def copied_out(items: List[Dict[str, Any]]) -> Dict[str, bytes]:
    """A result's ``copy_out`` entries as box path -> content; an entry the service could not
    return whole is an error, as a file over the bound is for the CLI transport."""
    files: Dict[str, bytes] = {}
    for item in items:
        if item.get("error") or item.get("truncated"):
            raise SandboxError(f"isolate service: {item['path']} was not copied out whole: "
                               f"{item.get('error') or f'over {MAX_COPY_OUT_BYTES} bytes'}")
        if "text" in item:
            files[item["path"]] = item["text"].encode("utf-8")
        elif "base64" in item:
            files[item["path"]] = base64.b64decode(item["base64"])
    return files


def unpacked_in_box(args: List[str], cwd: str, copy_in: List[Dict[str, Any]]
                    ) -> Tuple[List[str], str, List[Dict[str, Any]]]:
    """The service puts each copy_in file into a directory that must exist; a tree's files
    therefore go in flat, and a setup script (run by the box's /bin/sh, as the box user)
    makes the directories, moves the files into place, removes itself and execs the command.
    The script travels as a file, not an argument: a large tree exceeds an argument's bound."""
    flat, lines = [], ["set -e", 'rm -f -- "$0"']
    dirs = sorted({os.path.dirname(e["path"]) for e in copy_in} | {cwd})
    lines.append("mkdir -p -- " + " ".join(shlex.quote(d) for d in dirs))
    for i, entry in enumerate(copy_in):
        staged = f"/box/.isolate-in-{i}"
        lines.append(f"mv -f -- {staged} {shlex.quote(entry['path'])}")
        flat.append(dict(entry, path=staged))
    lines += [f"cd -- {shlex.quote(cwd)}", 'exec "$@"', ""]
    script = "\n".join(lines).encode()
    flat.append({"path": SETUP_SCRIPT, "base64": base64.b64encode(script).decode(),
                 "mode": 0o600})
    return ["/bin/sh", SETUP_SCRIPT] + args, "/box", flat


def inline_files(copy_in: Any) -> List[Dict[str, Any]]:
    """Host files and directory trees as inline entries (symlinks are not followed), bounded."""
    entries: List[Dict[str, Any]] = []
    total = 0
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
                fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError as e:
                if os.path.islink(src):
                    continue
                raise SandboxError(f"cannot copy {src} into the box: {e}") from None
            with os.fdopen(fd, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode & 0o777
                data = f.read(MAX_COPY_IN_BYTES + 1)
            total += len(data)
            if total > MAX_COPY_IN_BYTES or len(entries) >= MAX_COPY_IN_FILES:
                raise SandboxError(f"the files to copy in exceed {MAX_COPY_IN_BYTES} bytes "
                                   f"or {MAX_COPY_IN_FILES} files")
            entries.append({"path": dst, "base64": base64.b64encode(data).decode(),
                            "mode": mode})
    return entries
