"""The service's HTTP/JSON API over its unix socket (``isolate serve``, issue 15).

Written against the API as issue 15 specifies it: ``POST /v1/exec`` (language + source + stdin
+ args + limits -> the exec report), ``POST /v1/run`` (``{"commands": [...]}`` ->
``{"results": [...]}``), and with ``Accept: application/x-ndjson`` one JSON object per line:
``{"cmd": 0, "stream": "stdout", "data": "..."}`` as output happens, then the report(s).
Limits carry their units in their names (``cpu_time_ms``, ``memory_bytes``, ...).
"""

import base64
import http.client
import json
import os
import socket
from typing import Any, Dict, Iterator, List, Optional

from .errors import SandboxError, SandboxUnavailableError
from .transport import (MAX_COPY_OUT_BYTES, ExecRequest, Limits, OutputCallback, RunOutcome,
                        RunRequest)

NDJSON = "application/x-ndjson"

# Bounds on what the client copies into a request from a project directory.
MAX_COPY_IN_FILES = 10000
MAX_COPY_IN_BYTES = 256 << 20


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
    """True when an HTTP server answers ``GET /v1/health`` on the socket (any status)."""
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
        """``POST /v1/exec``."""
        body: Dict[str, Any] = {"language": request.language, "source": request.source,
                                "stdin": request.stdin, "args": list(request.args),
                                "env": [f"{k}={v}" for k, v in request.env.items()]}
        body.update(limit_fields(request.limits))
        return self._post("/v1/exec", body, request.limits, on_stdout, on_stderr)

    def run(self, request: RunRequest, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None) -> RunOutcome:
        """``POST /v1/run`` with one command; copy-in files travel inline (base64)."""
        command: Dict[str, Any] = {
            "args": list(request.command), "cwd": request.cwd, "image": request.image,
            "env": [f"{k}={v}" for k, v in request.env.items()],
            "copy_in": inline_files(request.copy_in),
            "copy_out": [{"path": p, "max_bytes": MAX_COPY_OUT_BYTES} for p in request.copy_out],
        }
        command.update(limit_fields(request.limits))
        answer = self._post("/v1/run", {"commands": [command]}, request.limits,
                            on_stdout, on_stderr)
        report = answer["results"][0] if "results" in answer else answer
        files = {}
        for item in report.get("copy_out") or []:
            if "content_base64" in item:
                files[item["path"]] = base64.b64decode(item["content_base64"])
        return RunOutcome(report=report, files=files)

    def _post(self, path: str, body: Dict[str, Any], limits: Limits,
              on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]
              ) -> Dict[str, Any]:
        streaming = on_stdout is not None or on_stderr is not None
        conn = UnixHTTPConnection(self.socket_path, timeout=2 * limits.timeout + 120)
        try:
            headers = {"Content-Type": "application/json",
                       "Accept": NDJSON if streaming else "application/json"}
            conn.request("POST", path, json.dumps(body), headers)
            resp = conn.getresponse()
            if resp.status != 200:
                raise SandboxError(f"isolate service: {resp.status} {resp.reason}: "
                                   f"{resp.read(65536).decode('utf-8', 'replace').strip()}")
            if not streaming:
                answer: Dict[str, Any] = json.loads(resp.read())
                return answer
            reports: List[Dict[str, Any]] = []
            for event in ndjson_lines(resp):
                if "stream" in event:
                    callback = on_stdout if event["stream"] == "stdout" else on_stderr
                    if callback is not None:
                        callback(event.get("data", ""))
                elif "results" in event:
                    return dict(event)
                else:
                    reports.append(event.get("report", event))
            if not reports:
                raise SandboxError("isolate service: the stream ended without a report")
            return reports[-1] if len(reports) == 1 else {"results": reports}
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise SandboxError(f"isolate service on {self.socket_path}: {e}") from None
        finally:
            conn.close()


def ndjson_lines(resp: http.client.HTTPResponse) -> Iterator[Dict[str, Any]]:
    """One JSON object per line, as the lines arrive."""
    for line in iter(resp.readline, b""):
        if line.strip():
            yield json.loads(line)


def limit_fields(limits: Limits) -> Dict[str, Any]:
    """The API's limit fields, units in their names."""
    ms = int(limits.timeout * 1000)
    fields: Dict[str, Any] = {"cpu_time_ms": ms, "wall_time_ms": ms,
                              "memory_bytes": limits.memory_mb << 20,
                              "output_limit_bytes": limits.max_output_bytes}
    if limits.pids is not None:
        fields["pids"] = limits.pids
    return fields


def inline_files(copy_in: Any) -> List[Dict[str, Any]]:
    """Host files and directory trees as inline entries (symlinks are not followed), bounded."""
    entries: List[Dict[str, Any]] = []
    total = 0
    for host, box in copy_in:
        pairs = [(host, box)]
        if os.path.isdir(host):
            pairs = []
            for root, dirs, names in os.walk(host):
                for name in names:
                    full = os.path.join(root, name)
                    pairs.append((full, os.path.join(box, os.path.relpath(full, host))))
        for src, dst in pairs:
            if os.path.islink(src):
                continue
            with open(src, "rb") as f:
                data = f.read(MAX_COPY_IN_BYTES + 1)
            total += len(data)
            if total > MAX_COPY_IN_BYTES or len(entries) >= MAX_COPY_IN_FILES:
                raise SandboxError(f"the files to copy in exceed {MAX_COPY_IN_BYTES} bytes "
                                   f"or {MAX_COPY_IN_FILES} files")
            entries.append({"path": dst, "content_base64": base64.b64encode(data).decode(),
                            "mode": os.stat(src).st_mode & 0o777})
    return entries
