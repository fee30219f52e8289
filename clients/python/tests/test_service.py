"""The service transport against a real `isolate serve` (isolate-serve beside ISOLATE_BIN), which
a session fixture starts as root on a temporary unix socket and stops by its PID."""

import base64
import contextlib
import json
import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Iterator, List, Tuple

import pytest

from conftest import User, isolate_binary, open_fds, stop
from isolate_sandbox import (Sandbox, SandboxConfig, SandboxError, SandboxExecutor, SandboxRunner,
                             SandboxUnavailableError, ServiceError, get_sandbox)
from isolate_sandbox.service_transport import (ServiceTransport, copied_out, env_list, error_of,
                                               inline_files, limit_fields, reassemble,
                                               service_answers)
from isolate_sandbox.errors import RefusedError
from isolate_sandbox.transport import ExecRequest, Limits, Mount, RunRequest, TextSink

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
NOBODY = pwd.getpwnam("nobody")
SERVE = os.path.join(os.path.dirname(isolate_binary()), "isolate-serve")

needs_service = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(SERVE, os.X_OK),
    reason="needs root and isolate-serve beside the isolate binary (make build)")


@contextlib.contextmanager
def running_service(*extra: str) -> Iterator[Tuple[str, str]]:
    """A real service on a socket an ordinary user's group (nobody's) may use: its socket path
    and its log so far once it answers. Its own store; stopped by PID (SIGTERM drains, then
    SIGKILL) at the end."""
    tmp = tempfile.mkdtemp(prefix="pysvc-serve-")
    os.chmod(tmp, 0o755)  # nobody reaches the socket through it
    path = os.path.join(tmp, "api.sock")
    log = open(os.path.join(tmp, "serve.log"), "w+b")  # a file: a pipe nobody drains fills
    # Private paths only: never the machine's /run/isolate sockets (--cli-socket none).
    proc = subprocess.Popen([SERVE, "--socket", path, "--socket-group", str(NOBODY.pw_gid),
                             "--cli-socket", "none", "--store", os.path.join(tmp, "files"),
                             "--grace", "5s"] + list(extra),
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        for _ in range(200):
            if proc.poll() is not None or service_answers(path):
                break
            time.sleep(0.05)
        log.seek(0)
        text = log.read().decode(errors="replace")
        if not service_answers(path):
            pytest.fail(f"isolate-serve did not come up: {text}")
        yield path, text
    finally:
        stop(proc)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def service() -> Iterator[str]:
    """The session's service: 2 commands at once and a queue of 1, so a test can fill it."""
    with running_service("--parallel", "2", "--queue", "1") as (path, _):
        yield path


@pytest.fixture
def box(service: str) -> Sandbox:
    """A sandbox on the service."""
    return Sandbox(SandboxConfig(backend="service", socket_path=service))


# --- no service needed ------------------------------------------------------------------------

def test_limit_fields_carry_units() -> None:
    assert limit_fields(Limits(1.5, 64, 1024, pids=8)) == {
        "cpu_time_ms": 1500, "wall_time_ms": 1500, "memory_bytes": 64 << 20,
        "output_limit_bytes": 1024, "pids": 8}


def test_env_list_refuses_bad_names() -> None:
    assert env_list({"A": "1=2"}) == ["A=1=2"]
    with pytest.raises(ValueError, match="bad environment variable name"):
        env_list({"A=B": "x"})


def test_inline_files_skip_symlinks(tmp_path: pathlib.Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.txt").write_bytes(b"A")
    (tmp_path / "d" / "sub" / "b.sh").write_bytes(b"B")
    os.chmod(tmp_path / "d" / "sub" / "b.sh", 0o755)
    os.symlink("/etc/passwd", tmp_path / "d" / "link")
    entries = inline_files([(str(tmp_path / "d"), "/box/p")])
    assert sorted((e["path"], base64.b64decode(e["base64"]), e["mode"]) for e in entries) == \
        [("/box/p/a.txt", b"A", 0o644), ("/box/p/sub/b.sh", b"B", 0o755)]
    with pytest.raises(SandboxError, match="cannot copy"):
        inline_files([(str(tmp_path / "missing"), "/box/m")])


def test_copied_out_decodes_and_reports_partial_files() -> None:
    assert copied_out([{"path": "/box/t", "size": 2, "text": "hé"},
                       {"path": "/box/b", "size": 1, "base64": "/w=="}]) == \
        ({"/box/t": "hé".encode(), "/box/b": b"\xff"}, {})
    assert copied_out([{"path": "/box/big", "size": 9, "truncated": True},
                       {"path": "/box/s", "size": 9, "error": "the store's quota"}]) == \
        ({}, {"/box/big": "over 67108864 bytes", "/box/s": "the store's quota"})


def test_error_bodies_become_service_errors() -> None:
    e = error_of(400, "Bad Request", b'{"error":"lang: unknown language","field":"lang"}')
    assert (e.status, e.field) == (400, "lang")
    assert str(e) == "isolate service: 400 Bad Request: lang: unknown language"
    e = error_of(502, "Bad Gateway", b"<html>proxy</html>")
    assert (e.status, e.field) == (502, None)
    assert str(e) == "isolate service: 502 Bad Gateway: <html>proxy</html>"


def test_refusals_name_the_field_and_the_mount() -> None:
    e = error_of(403, "Forbidden", b'{"error":"net: host is the operator\'s choice",'
                 b'"field":"net"}')
    assert isinstance(e, RefusedError) and (e.status, e.field) == (403, "net")
    assert str(e) == "isolate service: 403 Forbidden: net: host is the operator's choice"
    mounts = [Mount("/a", "/box/a"), Mount("/b", "/box/b", rw=True)]
    e = error_of(400, "Bad Request", b'{"error":"binds: root only",'
                 b'"field":"binds[1].host"}', None, mounts)
    assert str(e) == "isolate service: 400 Bad Request: mount /b:/box/b:rw: binds: root only"
    e = error_of(429, "Too Many Requests", b'{"error":"queue full"}', "2")
    assert (e.status, e.retry_after) == (429, 2.0)
    e = error_of(413, "Payload Too Large", b'{"error":"body over 1 MiB","field":"source"}')
    assert (e.status, e.field, type(e)) == (413, "source", ServiceError)


def test_a_call_stopped_at_its_bound_is_a_timeout() -> None:
    from isolate_sandbox.errors import CallTimeoutError
    from isolate_sandbox.result import from_report
    from isolate_sandbox.sandbox import call_timeout_report
    r = from_report(call_timeout_report(CallTimeoutError(41.5), True), "cli",
                    Limits(10, 64, 1024))
    assert (r.status, r.timed_out, r.error) == ("TO", True, (
        "Code execution timed out: the call (compilation, run and setup) exceeded 41.5s "
        "and was stopped"))


def test_output_keep_modes() -> None:
    for keep, limit, text in (("head_tail", 4, "ab\n[... 6 bytes cut ...]\nij"),
                              ("head", 4, "abcd\n[... 6 bytes cut ...]\n"),
                              ("tail", 5, "\n[... 5 bytes cut ...]\nfghij")):
        sink = TextSink(None, limit, keep)
        for chunk in ("abc", "defg", "hij"):
            sink.feed(chunk.encode())
        sink.close()
        assert (sink.text, sink.truncated) == (text, True)
    with pytest.raises(ValueError, match="unknown output keep mode"):
        TextSink(None, 4, "middle")


def test_reassemble_reports_broken_streams() -> None:
    sinks = (TextSink(None, 10), TextSink(None, 10))
    with pytest.raises(SandboxError, match="the request failed: boom"):
        reassemble(iter([{"cmd": 0, "stream": "stdout", "data": "x"}, {"error": "boom"}]),
                   sinks)
    with pytest.raises(SandboxError, match="ended before its last line"):
        reassemble(iter([{"cmd": 0, "result": {}}]), sinks)


def test_no_service_is_one_clear_error(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "api.sock")
    assert not service_answers(path)
    # A socket file nobody listens on does not count as a service either.
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()
    assert not service_answers(path)
    with pytest.raises(SandboxUnavailableError, match="start it with `isolate serve`"):
        ServiceTransport(path)


# --- through the real service -----------------------------------------------------------------

@needs_service
def test_execute_python_through_the_service(box: Sandbox) -> None:
    r = box.execute_code("import sys\nprint(sys.stdin.read()[::-1])", stdin="abc")
    assert (r.status, r.stdout, r.exit_code, r.meta.runtime, r.error) == \
        ("OK", "cba\n", 0, "service", None)
    assert r.meta.report["run"]["sandbox"]["image"] != ""


@needs_service
def test_execute_c_through_the_service(box: Sandbox) -> None:
    src = '#include <stdio.h>\nint main(int c, char **v) { printf("%s %d\\n", v[1], 6 * 7); }\n'
    r = box.execute_code(src, "c", args=["arg"])
    assert (r.status, r.stdout, r.meta.runtime) == ("OK", "arg 42\n", "service")
    r = box.execute_code("int main( { }", "c")
    assert r.status == "CE" and "error" in r.stderr + str(r.meta.report["compile"]["stderr"])


@needs_service
def test_streaming_callbacks_in_order(box: Sandbox) -> None:
    events: List[Tuple[str, str]] = []
    code = ("import sys, time\n"
            "for i in range(3):\n"
            "    print('out', i, flush=True); time.sleep(0.2)\n"
            "    print('err', i, file=sys.stderr, flush=True); time.sleep(0.2)\n")
    r = box.execute_code(code, on_stdout=lambda s: events.append(("out", s)),
                         on_stderr=lambda s: events.append(("err", s)))
    assert r.status == "OK"
    assert [text for _, text in events] == [f"{s} {i}\n" for i in range(3) for s in ("out", "err")]
    assert "".join(t for k, t in events if k == "out") == r.stdout


@needs_service
def test_timeout_through_the_service(box: Sandbox) -> None:
    r = box.execute_code("while True: pass", timeout=1)
    assert (r.status, r.timed_out, r.meta.runtime) == ("TO", True, "service")


@needs_service
def test_truncation_through_the_service(box: Sandbox) -> None:
    r = box.execute_code("print('x' * 5000)", max_output_kb=1)
    assert (r.status, r.truncated) == ("OK", True)
    assert r.stdout == "x" * 512 + "\n[... 3977 bytes cut ...]\n" + "x" * 511 + "\n"


@needs_service
def test_bad_request_is_a_service_error(service: str) -> None:
    transport = ServiceTransport(service)
    request = ExecRequest(language="nosuch", source="x", limits=Limits(1, 64, 1024))
    with pytest.raises(ServiceError) as e:
        transport.exec(request)
    assert (e.value.status, e.value.field) == (400, "lang"), str(e.value)
    with pytest.raises(ServiceError) as e:
        transport.run(RunRequest(command=[], limits=Limits(1, 64, 1024)), on_stdout=print)
    assert e.value.status == 400, str(e.value)


@needs_service
def test_copy_in_and_out_through_the_service(service: str, tmp_path: pathlib.Path) -> None:
    (tmp_path / "in.txt").write_text("hello")
    transport = ServiceTransport(service)
    outcome = transport.run(RunRequest(
        command=["/bin/sh", "-c", "tr a-z A-Z < in.txt > out.txt; printf '\\377' > bin"],
        limits=Limits(5, 64, 1024), copy_in=[(str(tmp_path / "in.txt"), "/box/in.txt")],
        copy_out=["/box/out.txt", "/box/bin"]))
    assert outcome.report["status"] == "OK", outcome.report
    assert outcome.files == {"/box/out.txt": b"HELLO", "/box/bin": b"\xff"}


@needs_service
def test_runner_and_executor_through_the_service(service: str, tmp_path: pathlib.Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "proj" / "pkg").mkdir(parents=True)
    (tmp_path / "proj" / "pkg" / "data.txt").write_text("data\n")
    monkeypatch.setenv("CALLER_SECRET", "s3cret")
    config = SandboxConfig(backend="service", socket_path=service)
    before = open_fds()
    events: List[str] = []
    r = SandboxRunner(config).execute("cat pkg/data.txt; env; exit 3", str(tmp_path / "proj"),
                                      env={"GIVEN": "g"}, on_stdout=events.append)
    assert (r.exit_code, r.meta.runtime) == (3, "service"), (r.status, r.error, r.stderr)
    assert r.stdout.startswith("data\n") and "GIVEN=g" in r.stdout
    assert "CALLER_SECRET" not in r.stdout and "".join(events) == r.stdout
    ex = SandboxExecutor(config=config)
    code = "class K:\n    def add(self, a, b):\n        return a + b\n    def bad(self):\n" \
           "        raise KeyError('nope')\n"
    answer = ex.execute(code, "K", "add", {"a": 2, "b": 3}, 10)
    assert (answer["success"], answer["result"]) == (True, 5), answer
    answer = ex.execute(code, "K", "bad", {}, 10)
    assert answer["success"] is False and "KeyError" in answer["traceback"], answer
    assert open_fds() == before


@needs_service
def test_auto_picks_the_service(service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISOLATE_SOCKET", service)
    sandbox = get_sandbox()
    assert sandbox.runtime == "service"
    assert sandbox.execute_code("print(1+1)").stdout == "2\n"


def as_nobody(script: str, socket_path: str, **extra: str) -> "subprocess.CompletedProcess[str]":
    """A Python script run as nobody (no extra groups) with the client on its path and the
    ``extra`` variables."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC), "ISOLATE_SOCKET": socket_path,
           "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/nonexistent", **extra}
    return subprocess.run([sys.executable, "-c", script], user=NOBODY.pw_uid,
                          group=NOBODY.pw_gid, extra_groups=[], env=env, cwd="/",
                          capture_output=True, text=True, timeout=120)


@needs_service
def test_a_user_whose_gid_is_not_its_uid_through_the_service(service: str,
                                                             split_user: User) -> None:
    """A member of the socket's group whose primary gid is not its uid (as useradd makes users)
    runs execute_code, and SandboxRunner on a project of its own with a file collected, through
    the service, which opens the project with that user's rights."""
    project = tempfile.mkdtemp(prefix="pysvc-split-")
    try:
        data = os.path.join(project, "data.txt")
        with open(data, "w") as f:
            f.write("mine\n")
        for p in (project, data):
            os.chown(p, split_user.uid, split_user.gid)
        os.chmod(project, 0o700)
        script = ("import json\nfrom isolate_sandbox import execute_code, SandboxRunner\n"
                  "r = execute_code('print(1+1)')\n"
                  "c = SandboxRunner().execute('cat data.txt > out.txt; cat out.txt', "
                  f"{project!r}, collect=['out.txt'])\n"
                  "print(json.dumps([r.status, r.stdout, r.meta.runtime, c.status, c.stdout,"
                  " {k: v.decode() for k, v in c.files.items()}]))\n")
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC), "ISOLATE_SOCKET": service,
               "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/nonexistent"}
        done = subprocess.run([sys.executable, "-c", script], user=split_user.uid,
                              group=split_user.gid, extra_groups=[NOBODY.pw_gid], env=env,
                              cwd="/", capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == ["OK", "2\n", "service", "OK", "mine\n",
                                           {"out.txt": "mine\n"}]
    finally:
        shutil.rmtree(project)


@needs_service
def test_an_ordinary_user_through_the_service(service: str) -> None:
    """nobody (not root) runs execute_code through the service."""
    script = ("import json\nfrom isolate_sandbox import execute_code\n"
              "r = execute_code('print(1+1)')\n"
              "print(json.dumps([r.status, r.stdout, r.meta.runtime]))\n")
    done = as_nobody(script, service)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["OK", "2\n", "service"]
    # And without the service, nobody gets the one clear error that says what to start.
    done = as_nobody(script, "/nonexistent/api.sock")
    assert done.returncode != 0 and "start the service" in done.stderr, done.stderr
