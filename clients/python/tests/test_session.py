"""Session: a box that lives across calls, against a real `isolate serve` (as root, on a private
socket), and the client's side of the wire against a small HTTP server of the test's own (no root:
the token, the streamed shapes, the answers the real service gives only in rare cases)."""

import base64
import http.server
import json
import socket
import socketserver
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from conftest import open_fds
from isolate_sandbox import (CallTimeoutError, CommandHandle, CommandResult, SandboxError,
                             SandboxUnavailableError, ServiceError, Session)
from isolate_sandbox import ExceptionInfo, FilesystemEvent, Result
from isolate_sandbox.session import Execution
from test_service import needs_service, running_service


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    """A service of this module's own."""
    with running_service("--parallel", "4") as (path, _):
        yield path


@pytest.fixture
def sb(service: str) -> Iterator[Session]:
    """A session, deleted at the end of the test."""
    with Session(socket_path=service, timeout=120) as s:
        yield s


# --- through the real service -----------------------------------------------------------------

@needs_service
def test_code_keeps_state(sb: Session) -> None:
    assert sb.run_code("x = 1").result is None
    ex = sb.run_code("x + 1")
    assert (ex.result, ex.error, ex.execution_count, ex.restarted) == ("2", None, 2, False)
    assert sb.run_code('"a"').result == "'a'"
    assert sb.run_code("None").result is None
    ex = sb.run_code("print('out')\nimport os\nos.system('echo child')\n6 * 7")
    assert (ex.stdout, ex.result) == ("out\nchild\n", "42")
    assert ex.context and ex.wall_time > 0


@needs_service
def test_code_streams_and_errors(sb: Session) -> None:
    out: List[str] = []
    err: List[str] = []
    ex = sb.run_code("import sys\nprint('a', flush=True)\nprint('b', file=sys.stderr)\n1/0",
                     on_stdout=out.append, on_stderr=err.append)
    assert ("".join(out), "".join(err)) == ("a\n", "b\n") == (ex.stdout, ex.stderr)
    assert ex.error is not None and (ex.error.name, ex.error.value) == \
        ("ZeroDivisionError", "division by zero")
    assert ex.error.traceback.startswith("Traceback (most recent call last):")
    assert "<string>" not in ex.error.traceback


@needs_service
def test_code_timeout_and_death(sb: Session) -> None:
    sb.run_code("import time, os\nkept = 1")
    ex = sb.run_code("time.sleep(60)", timeout=0.5)
    assert ex.error is not None and ex.error.name == "KeyboardInterrupt"
    assert sb.run_code("kept").result == "1"
    ex = sb.run_code("os._exit(4)")
    assert ex.error is not None and (ex.error.name, ex.error.value) == \
        ("ContextDied", "exited with code 4")
    ex = sb.run_code("'kept' in dir()")
    assert (ex.result, ex.restarted, ex.execution_count) == ("False", True, 1)


@needs_service
def test_code_killed_at_the_sessions_memory_limit(service: str) -> None:
    with Session(socket_path=service, memory_bytes=64 << 20) as sb:
        sb.run_code("kept = 1")
        ex = sb.run_code("x = bytearray(200 << 20)\nx[::4096] = b'x' * len(x[::4096])")
        assert ex.error is not None and (ex.error.name, ex.error.value) == \
            ("ContextDied", "killed by signal 9 (out of memory)")
        ex = sb.run_code("'kept' in dir()")
        assert (ex.result, ex.restarted) == ("False", True)
        assert sb.info()["usage"]["oom_kills"] >= 1


@needs_service
def test_code_contexts_are_independent(sb: Session) -> None:
    a, b = sb.create_code_context(), sb.create_code_context("python")
    assert a.id != b.id and a.language == "python"
    a.run_code("v = 'a'")
    sb.run_code("v = 'b'", context=b)
    assert (a.run_code("v").result, b.run_code("v").result) == ("'a'", "'b'")
    assert {c["id"] for c in sb.info()["contexts"]} >= {a.id, b.id}
    a.remove()
    with pytest.raises(ServiceError) as e:
        a.run_code("v")
    assert e.value.status == 404


@needs_service
def test_code_in_javascript_and_bash(service: str) -> None:
    with Session("javascript", socket_path=service, timeout=120) as sb:
        assert sb.run_code("let n = 6").result is None
        ex = sb.run_code("console.log('hi'); [n * 7, 'x']")
        assert (ex.result, ex.stdout, ex.error, ex.execution_count) == ("[ 42, 'x' ]", "hi\n",
                                                                        None, 2)
        ex = sb.run_code("const page = await new Promise(r => setTimeout(() => r('ok'), 5)); page")
        assert (ex.result, ex.error) == ("'ok'", None)
        assert sb.run_code("page.length").result == "2"
        ex = sb.run_code("null.x")
        assert ex.error is not None and ex.error.name == "TypeError"
        ex = sb.run_code("for (;;) {}", timeout=0.5)
        assert ex.error is not None and ex.error.name == "Interrupted"
        assert sb.run_code("n").result == "6"
        sb.run_code("V=1; cd /tmp", language="bash")
        ex = sb.run_code("echo $V; pwd; false", language="bash")
        assert ex.stdout == "1\n/tmp\n" and ex.error is not None and \
            (ex.error.name, ex.error.value) == ("ExitStatus", "exit status 1")
        # Streamed as the code writes it, interrupted at the call's bound all the same.
        seen: List[str] = []
        ex = sb.run_code("echo one; echo two >&2; sleep 30; echo never", language="bash",
                         on_stdout=seen.append, on_stderr=seen.append, timeout=1)
        assert (ex.stdout, ex.stderr, sorted(seen)) == ("one\n", "two\n", ["one\n", "two\n"])
        assert ex.error is not None and ex.error.name == "Interrupted"
        assert sb.run_code("echo $V", language="bash", on_stdout=seen.append).stdout == "1\n"
        ctx = sb.create_code_context("bash")
        assert ctx.language == "bash" and ctx.run_code("echo ${V-none}").stdout == "none\n"
        with pytest.raises(ServiceError) as e:
            sb.create_code_context("cobol")
        assert (e.value.status, e.value.field) == (400, "language")


@needs_service
def test_code_rich_results(sb: Session) -> None:
    sb.run_code("class Pic:\n"
                "    def __repr__(self): return 'Pic()'\n"
                "    def _repr_html_(self): return '<i>pic</i>'\n"
                "    def _repr_png_(self): return b'\\x89PNG'\n")
    got: List[Result] = []
    errors: List[ExceptionInfo] = []
    ex = sb.run_code("display('shown')\nPic()", on_result=got.append, on_error=errors.append)
    assert ex.result == "Pic()" and got == ex.results and not errors
    assert [(r.text, r.is_main_result) for r in ex.results] == [("'shown'", False), ("Pic()", True)]
    main = ex.results[1]
    assert (main.html, main.png) == ("<i>pic</i>", "iVBORw==")
    assert main.formats() == ["text", "html", "png"]
    assert sb.run_code("x = Pic()").results == []
    ex = sb.run_code("1/0", on_error=errors.append)
    assert [e.name for e in errors] == ["ZeroDivisionError"] and ex.error == errors[0]


@needs_service
def test_code_chart_in_python_data(service: str) -> None:
    got: List[Result] = []
    with Session("python-data", socket_path=service, timeout=120) as sb:
        ex = sb.run_code("import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])",
                         on_result=got.append)
    assert ex.error is None and got == ex.results
    charts = [r for r in ex.results if r.png]
    assert len(charts) == 1 and not charts[0].is_main_result
    assert base64.b64decode(charts[0].png or "").startswith(b"\x89PNG\r\n\x1a\n")


@needs_service
def test_commands(sb: Session) -> None:
    r = sb.commands.run("echo $GREETING; pwd; echo err >&2; exit 3", env={"GREETING": "hi"},
                        cwd="/tmp")
    assert isinstance(r, CommandResult)
    assert (r.stdout, r.stderr, r.exit_code, r.status, r.ok) == ("hi\n/tmp\n", "err\n", 3, "RE",
                                                                 False)
    r = sb.commands.run(["python3", "-c", "import sys; print(sys.stdin.read()[::-1])"],
                        stdin="abc")
    assert (r.stdout, r.exit_code, r.status, r.ok) == ("cba\n", 0, "OK", True)
    out: List[str] = []
    r = sb.commands.run("echo one; echo two >&2", on_stdout=out.append, on_stderr=out.append)
    assert sorted(out) == ["one\n", "two\n"] and (r.stdout, r.stderr) == ("one\n", "two\n")
    r = sb.commands.run("sleep 30", timeout=0.3)
    assert r.status == "TO" and r.exit_code is None and r.signal == 9


@needs_service
def test_background_commands(sb: Session) -> None:
    h = sb.commands.run("read line; echo got $line; read rest; echo then $rest",
                        background=True)
    assert isinstance(h, CommandHandle) and h.running
    h.send_stdin("one\n")
    h.send_stdin(b"two")
    h.close_stdin()
    r = h.wait(timeout=30)
    assert (r.stdout, r.status) == ("got one\nthen two\n", "OK")
    assert not h.running and h.info()["report"]["status"] == "OK"
    # A server left running is reached by a later command; killing it ends it.
    server = sb.commands.run("python3 -m http.server 8000 --bind 127.0.0.1", background=True)
    assert isinstance(server, CommandHandle)
    sb.files.write("page.txt", "served")
    r = sb.commands.run("for i in $(seq 100); do python3 -c 'import urllib.request as u; "
                        "print(u.urlopen(\"http://127.0.0.1:8000/page.txt\").read().decode())' "
                        "2>/dev/null && exit; sleep 0.1; done; exit 1")
    assert r.stdout == "served\n"
    with pytest.raises(CallTimeoutError):
        server.wait(timeout=0.2)
    server.kill()
    assert server.wait().signal == 9
    term = sb.commands.connect(sb.commands.run("sleep 100", background=True).id)
    term.signal("TERM")
    assert term.wait().signal == 15


@needs_service
def test_long_output_keeps_head_and_tail(service: str) -> None:
    """Output past the session's limit keeps its first and last half, the cut marked, in code
    of each language and in commands, foreground and background."""
    lines = "".join(f"{i}\n" for i in range(3000))
    want = lines[:500] + f"\n[... {len(lines) - 1000} bytes cut ...]\n" + lines[-500:]
    with Session(socket_path=service, timeout=120, output_limit_bytes=1000) as sb:
        streamed: List[str] = []
        ex = sb.run_code("for i in range(3000): print(i)", on_stdout=streamed.append)
        assert (ex.stdout, ex.truncated, ex.error) == (want, True, None)
        assert "".join(streamed) == lines
        ex = sb.run_code("seq 0 2999", language="bash")
        assert (ex.stdout, ex.truncated, ex.error) == (want, True, None)
        assert sb.run_code("print('short')").truncated is False
        r = sb.commands.run("seq 0 2999; seq 0 2999 >&2")
        assert (r.stdout, r.stderr, r.truncated, r.ok) == (want, want, True, True)
        h = sb.commands.run("seq 0 2999", background=True)
        assert isinstance(h, CommandHandle)
        r = h.wait(timeout=30)
        assert (r.stdout, r.truncated) == (want, True)
        assert sb.commands.run("echo short").truncated is False
    with Session("javascript", socket_path=service, timeout=120, output_limit_bytes=1000) as sb:
        ex = sb.run_code("for (let i = 0; i < 3000; i++) console.log(i)")
        assert (ex.stdout, ex.truncated, ex.error) == (want, True, None)


@needs_service
def test_files(sb: Session) -> None:
    assert sb.files.write("a.txt", "hi") == {"path": "a.txt", "size": 2}
    assert sb.files.read("a.txt") == "hi" == sb.files.read("/box/a.txt")
    sb.files.write("/tmp/deep/b.bin", b"\xff\x00", mode=0o600)
    assert sb.files.read("/tmp/deep/b.bin", format="bytes") == b"\xff\x00"
    info = sb.files.stat("/tmp/deep/b.bin")
    assert (info.name, info.path, info.size, info.mode & 0o777, info.is_dir) == \
        ("b.bin", "/tmp/deep/b.bin", 2, 0o600, False)
    assert sb.commands.run("cat /box/a.txt").stdout == "hi"
    sb.run_code("open('/box/by-code.txt', 'w').write('from code')")
    assert sb.files.read("by-code.txt") == "from code"
    names = {e.name: e for e in sb.files.list("/box")}
    assert {"a.txt", "by-code.txt"} <= set(names) and not names["a.txt"].is_dir
    assert [e.name for e in sb.files.list("/tmp")] == ["deep"]
    sb.files.remove("/tmp/deep")
    assert not sb.files.exists("/tmp/deep") and sb.files.exists("a.txt")
    with pytest.raises(ServiceError) as e:
        sb.files.read("missing.txt")
    assert e.value.status == 404
    with pytest.raises(ValueError, match="format"):
        sb.files.read("a.txt", format="json")
    with pytest.raises(ValueError, match="path"):
        sb.files.read("")


@needs_service
def test_watch_dir(sb: Session) -> None:
    """Files created, written, given another mode and removed, by the session's commands and
    through the API, each an event once; a subdirectory's only when recursive."""
    sb.files.write("w/old.txt", "old")
    sb.files.write("w/gone.txt", "bye")
    watch = sb.files.watch_dir("w")
    deep = sb.files.watch_dir("/box/w", recursive=True)
    assert watch.get_new_events() == []
    sb.commands.run("cd w && echo new > new.txt && echo more >> old.txt && rm gone.txt && "
                    "mkdir sub && echo x > sub/inner.txt")
    sb.files.write("w/api.txt", "through the API")
    want = [FilesystemEvent("api.txt", "create"), FilesystemEvent("new.txt", "create"),
            FilesystemEvent("old.txt", "write"), FilesystemEvent("sub", "create"),
            FilesystemEvent("gone.txt", "remove")]
    assert watch.get_new_events() == want
    assert watch.get_new_events() == []
    inner = FilesystemEvent("sub/inner.txt", "create")
    assert deep.get_new_events() == want[:4] + [inner, want[4]]
    sb.commands.run("chmod 600 w/new.txt; rm -r w/sub")
    assert deep.get_new_events() == [FilesystemEvent("new.txt", "chmod"),
                                     FilesystemEvent("sub", "remove"),
                                     FilesystemEvent("sub/inner.txt", "remove")]
    watch.stop()
    with pytest.raises(SandboxError, match="stopped"):
        watch.get_new_events()
    with pytest.raises(ServiceError) as e:
        sb.files.watch_dir("/box/no-such-dir")
    assert e.value.status == 404


@needs_service
def test_session_lease_and_end(service: str) -> None:
    before = open_fds()
    sb = Session(socket_path=service, timeout=60, idle_timeout=60, memory_bytes=256 << 20,
                 pids=64, env={"FROM": "session"})
    assert sb.commands.run("echo $FROM").stdout == "session\n"
    old = sb.expires_at
    assert sb.set_timeout(600) > old == old
    info = sb.info()
    assert info["id"] == sb.id and info["usage"]["memory_peak"] > 0
    assert sb.is_running() and sb.id in repr(sb)
    sb.kill()
    sb.kill()  # twice is no error
    assert not sb.is_running()
    with pytest.raises(ServiceError) as e:
        sb.commands.run("true")
    assert e.value.status == 404
    assert open_fds() == before


@needs_service
def test_bad_requests_name_the_field(service: str) -> None:
    with pytest.raises(ServiceError) as e:
        Session(socket_path=service, image="/no/such/image")
    assert (e.value.status, e.value.field) == (400, "image")
    with pytest.raises(ValueError, match="timeout"):
        Session(socket_path=service, timeout=0)
    with Session(socket_path=service) as sb:
        with pytest.raises(ServiceError) as e:
            sb.run_code("1", language="cobol")
        assert (e.value.status, e.value.field) == (400, "language")


@needs_service
def test_over_tcp_with_a_token(tmp_path: Any) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-session-token\n")
    token.chmod(0o600)
    with socket.socket() as s:  # a free loopback port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with running_service("--listen", f"127.0.0.1:{port}", "--token-file", str(token)):
        url = f"http://127.0.0.1:{port}"
        with pytest.raises(ServiceError) as e:
            Session(url=url, token="wrong")
        assert e.value.status == 401
        with Session(url=url, token="s3cret-session-token", timeout=60) as sb:
            sb.run_code("x = 20")
            assert sb.run_code("x + 22").result == "42"
            sb.files.write("t.txt", "over tcp")
            assert sb.commands.run("cat t.txt").stdout == "over tcp"


def test_no_service_is_one_clear_error(tmp_path: Any) -> None:
    with pytest.raises(SandboxUnavailableError, match="no isolate service answers"):
        Session(socket_path=str(tmp_path / "none.sock"))


# --- the wire, against a server of the test's own ---------------------------------------------

Answer = Tuple[int, Any]


class Stub(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """Answers each request from ``routes`` (method and path -> status and a JSON value, or a
    list of NDJSON lines); keeps what it was sent."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), StubHandler)
        self.routes: Dict[str, List[Answer]] = {}
        self.seen: List[Tuple[str, str, Dict[str, str], bytes]] = []

    def route(self, key: str, *answers: Answer) -> None:
        self.routes.setdefault(key, []).extend(answers)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def bodies(self, key: str) -> List[Any]:
        return [json.loads(b) for m, p, _, b in self.seen if f"{m} {p}" == key]


class StubHandler(http.server.BaseHTTPRequestHandler):
    server: Stub

    def log_message(self, *args: Any) -> None:
        pass

    def answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = f"{self.command} {self.path}"
        self.server.seen.append((self.command, self.path, dict(self.headers), body))
        value: Any
        if self.path == "/v1/health":
            status, value = 200, {"ok": True}
        elif self.server.routes.get(key):
            queue = self.server.routes[key]
            status, value = queue.pop(0) if len(queue) > 1 else queue[0]
        else:
            status, value = 404, {"error": "no such session"}
        if isinstance(value, list):
            data = b"".join(json.dumps(v).encode() + b"\n" for v in value)
            kind = "application/x-ndjson"
        elif isinstance(value, bytes):
            data, kind = value, "application/octet-stream"
        else:
            data, kind = json.dumps(value).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        if status == 429:
            self.send_header("Retry-After", "3")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = answer


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    server.route("POST /v1/sessions", (201, {"id": "s1", "expires_at": "T1",
                                             "idle_expires_at": "T2"}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


EXECUTION = {"result": "2", "stdout": "", "stderr": "", "error": None, "execution_count": 1,
             "context": "c1", "restarted": False, "wall_time": 0.01}


def test_wire_session_and_code(stub: Stub) -> None:
    stub.route("POST /v1/sessions/s1/code", (200, EXECUTION), (200, [
        {"type": "stdout", "data": "a"}, {"type": "stderr", "data": "b"},
        {"type": "stdout", "data": ""},
        dict(EXECUTION, type="execution", result=None, stdout="a", stderr="b",
             error={"name": "ContextDied", "value": "killed by signal 9 (out of memory)",
                    "traceback": ""}, execution_count=3, restarted=True)]))
    stub.route("DELETE /v1/sessions/s1", (204, b""))
    with Session(url=stub.url, token="tok", timeout=90, cpus=1.5, net=True,
                 output_limit_bytes=1000) as sb:
        assert (sb.id, sb.expires_at, sb.idle_expires_at) == ("s1", "T1", "T2")
        ex = sb.run_code("1+1")
        assert (ex.result, ex.text, ex.context, ex.error) == ("2", "2", "c1", None)
        got: List[str] = []
        ex = sb.run_code("x", on_stdout=got.append, on_stderr=got.append, timeout=5)
        assert got == ["a", "b"] and (ex.stdout, ex.stderr, ex.restarted) == ("a", "b", True)
        assert ex.error is not None and ex.error.value == "killed by signal 9 (out of memory)"
    assert stub.bodies("POST /v1/sessions") == [{"timeout_ms": 90000, "lang": "python",
                                                 "net": "host", "cpus": 1.5,
                                                 "output_limit_bytes": 1000}]
    assert stub.bodies("POST /v1/sessions/s1/code") == [
        {"code": "1+1", "language": "python"},
        {"code": "x", "language": "python", "timeout_ms": 5000, "stream": True}]
    assert all(h.get("Authorization") == "Bearer tok" for _, _, h, _ in stub.seen)
    assert [(m, p) for m, p, _, _ in stub.seen][-1] == ("DELETE", "/v1/sessions/s1")


def test_wire_streams_that_fail(stub: Stub) -> None:
    stub.route("POST /v1/sessions/s1/code", (200, [{"type": "stdout", "data": "x"},
                                                   {"type": "error", "error": "ended"}]),
               (200, [{"type": "stdout", "data": "x"}]))
    stub.route("POST /v1/sessions/s1/commands", (200, [{"type": "error", "error": "gone"}]),
               (200, [{"type": "stdout", "data": "x"}]))
    sb = Session(url=stub.url)
    with pytest.raises(SandboxError, match="the request failed: ended"):
        sb.run_code("1", on_stdout=print)
    with pytest.raises(SandboxError, match="ended before its execution"):
        sb.run_code("1", on_stdout=print)
    with pytest.raises(SandboxError, match="the request failed: gone"):
        sb.commands.run("true", on_stdout=print)
    with pytest.raises(SandboxError, match="ended before the command's report"):
        sb.commands.run("true", on_stdout=print)


def test_wire_commands_and_handles(stub: Stub) -> None:
    report = {"status": "OK", "exit_code": 0, "signal": 0, "stdout": "o", "stderr": "",
              "wall_time": 0.5, "cpu_time": 0.25, "memory_peak": 4096}
    stub.route("POST /v1/sessions/s1/commands", (200, [
        {"type": "stdout", "data": "o"}, dict(report, type="report")]),
        (201, {"id": 7, "running": True}))
    killed = dict(report, status="SG", signal=9)
    stub.route("POST /v1/sessions/s1/commands/7/wait", (200, {"id": 7, "running": True}),
               (200, {"id": 7, "running": False, "report": killed}))
    stub.route("POST /v1/sessions/s1/commands/7/signal", (200, {}))
    sb = Session(url=stub.url)
    out: List[str] = []
    r = sb.commands.run(["echo", "o"], on_stdout=out.append, stderr_to_stdout=True,
                        output_limit_bytes=10, timeout=2)
    assert isinstance(r, CommandResult) and out == ["o"]
    assert (r.stdout, r.exit_code, r.wall_time, r.cpu_time, r.memory_peak) == \
        ("o", 0, 0.5, 0.25, 4096)
    h = sb.commands.run("sleep 1", background=True, timeout=3)
    assert isinstance(h, CommandHandle) and h.id == 7 and "7" in repr(h)
    h.kill()
    r = h.wait()
    assert (r.status, r.signal, r.exit_code) == ("SG", 9, None)
    assert stub.bodies("POST /v1/sessions/s1/commands") == [
        {"args": ["echo", "o"], "timeout_ms": 2000, "stderr_to_stdout": True,
         "output_limit_bytes": 10, "stream": True},
        {"args": ["/bin/sh", "-c", "sleep 1"], "background": True, "timeout_ms": 3000}]
    assert stub.bodies("POST /v1/sessions/s1/commands/7/signal") == [{"signal": "KILL"}]


def test_wire_errors(stub: Stub) -> None:
    stub.route("POST /v1/sessions/s1/timeout", (429, {"error": "too many"}))
    stub.route("GET /v1/sessions/s1", (500, {"error": "broken"}))
    stub.route("POST /v1/sessions/s1/contexts", (201, {"id": "c9"}))
    stub.route("GET /v1/sessions/s1/files/%2Fetc/x?stat=1", (500, {"error": "broken"}))
    stub.route("GET /v1/sessions/s1/files/odd?list=1", (200, b"\xff not json"))
    sb = Session(url=stub.url)
    with pytest.raises(ServiceError) as e:
        sb.set_timeout(10)
    assert (e.value.status, e.value.retry_after) == (429, 3.0)
    with pytest.raises(ServiceError):
        sb.is_running()
    with pytest.raises(ServiceError):
        sb.files.exists("/etc/x")  # 404 is False; other answers are errors
    ctx = sb.create_code_context()
    assert (ctx.id, ctx.language) == ("c9", "python") and "c9" in repr(ctx)
    with pytest.raises(SandboxError, match="not JSON"):
        sb.files.list("odd")
    sb.kill()  # 404: already ended
    stub.shutdown()
    stub.server_close()
    with pytest.raises(SandboxError, match="isolate service on"):
        sb.run_code("1")


def test_execution_from_json_defaults() -> None:
    ex = Execution.from_json({"error": {"name": "E"}})
    assert (ex.result, ex.stdout, ex.execution_count, ex.context) == (None, "", 0, None)
    assert ex.error is not None and (ex.error.name, ex.error.value) == ("E", "")


def test_token_from_the_environment(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISOLATE_URL", stub.url)
    monkeypatch.setenv("ISOLATE_TOKEN", "envtok")
    sb: Optional[Session] = Session()
    assert sb is not None and sb.endpoint == stub.url and sb.token == "envtok"
