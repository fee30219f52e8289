"""What an agent loop relies on, on every transport: the executor's statuses, bounded output,
errors it can read, special files in a project, mounts, the disk limit, files back out, and a
full service's 429. Real binary and real service (the session's, from test_service), as root."""

import json
import os
import pathlib
import socket
import shutil
import tempfile
import threading
import time
from typing import Any, Iterator, List

import pytest

from conftest import needs_root
from isolate_sandbox import (Sandbox, SandboxConfig, SandboxError, SandboxExecutor,
                             SandboxRunner, ServiceError, analyze_code, execute_code, run_code)
from isolate_sandbox.service_transport import UnixHTTPConnection
from test_service import (NOBODY, as_nobody, needs_service, running_service,  # noqa: F401
                          service)

pytestmark = [needs_root, needs_service]

CODE = """
import os
class A:
    def spin(self):
        while True:
            pass
    def hog(self):
        return len(bytearray(400 << 20))
    def kill(self):
        os.kill(os.getpid(), 9)
    def bail(self):
        os._exit(3)
    def loud(self):
        print("x" * 3000000)
        return 1
"""


@pytest.fixture(params=["cli", "service"])
def config(request: pytest.FixtureRequest, service: str) -> SandboxConfig:  # noqa: F811
    """The same configuration on each transport."""
    return SandboxConfig(backend=request.param, socket_path=service, memory_mb=128)


@pytest.mark.parametrize("method,seconds,status,error", [
    ("spin", 2, "TO", "Code execution timed out after 2s"),
    # Time enough that reclaiming under the memory limit never turns it into a TO.
    ("hog", 30, "ML", "Memory limit exceeded (128 MiB)"),
    ("kill", 10, "SG", "Killed by signal 9"),
    ("bail", 10, "RE", "Exited with status 3"),
])
def test_executor_statuses(config: SandboxConfig, method: str, seconds: int, status: str,
                           error: str) -> None:
    out = SandboxExecutor(config).execute(CODE, "A", method, None, seconds)
    assert (out["success"], out["status"], out["error"]) == (False, status, error), out


def test_executor_output_is_bounded(config: SandboxConfig) -> None:
    out = SandboxExecutor(config).execute(CODE, "A", "loud", None, 10)
    assert (out["success"], out["result"]) == (True, 1), out
    assert out["stdout"] == "x" * 5120 + "\n[... 2989761 bytes cut ...]\n" + "x" * 5119 + "\n"


def test_errors_an_agent_can_read(config: SandboxConfig) -> None:
    box = Sandbox(config)
    r = box.execute_code("def f(d):\n    return d['k']\nf({})\n")
    assert (r.status, r.error) == ("RE", "KeyError: 'k'")
    assert r.exception is not None and (r.exception.name, r.exception.value) == ("KeyError", "'k'")
    assert r.exception.traceback.startswith("Traceback (most recent call last):")
    assert "line 2, in f" in r.exception.traceback
    r = box.execute_code("import sys\nsys.exit(93)")
    assert (r.status, r.exit_code, r.error) == ("RE", 93, "Exited with status 93")
    r = box.execute_code("print(1 +")
    assert r.status == "CE" and "SyntaxError" in r.stderr
    assert run_code is not None and box.run_code("print(2)").stdout == "2\n"


def test_output_keeps_head_and_tail(config: SandboxConfig) -> None:
    r = Sandbox(config).execute_code("for i in range(3000): print(i)", max_output_kb=1)
    assert r.truncated and r.stdout.startswith("0\n1\n2\n") and r.stdout.endswith("2999\n")
    assert "bytes cut ...]" in r.stdout
    head = Sandbox(SandboxConfig(backend=config.backend, socket_path=config.socket_path,
                                 output_keep="head"))
    r = head.execute_code("print('y' * 20000)", max_output_kb=1)
    assert r.stdout.startswith("y" * 1024) and r.stdout.endswith("bytes cut ...]\n")


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "proj"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "data.txt").write_text("data\n")
    os.symlink("sub/data.txt", root / "inside")
    os.symlink("/etc/passwd", root / "outside")
    return root


def test_project_symlinks_kept_inside_reported_outside(config: SandboxConfig,
                                                       project: pathlib.Path) -> None:
    r = SandboxRunner(config).execute("cat inside; ls -a", str(project))
    assert r.status == "OK" and r.stdout.startswith("data\n"), (r.error, r.stderr)
    assert "outside" not in r.stdout.split()
    assert r.meta.notes == ["symlink outside -> /etc/passwd leads out of the project: "
                            "not copied"]


def test_fifo_in_a_project_is_a_clear_error(config: SandboxConfig,
                                            project: pathlib.Path) -> None:
    os.mkfifo(project / "sub" / "pipe")
    with pytest.raises(SandboxError, match="pipe into the box: a FIFO, not a regular file"):
        SandboxRunner(config).execute("true", str(project), timeout=1)


def test_collect_brings_files_back(config: SandboxConfig, project: pathlib.Path) -> None:
    r = SandboxRunner(config).execute(
        "mkdir -p reports; echo '<a/>' > reports/a.xml; printf '\\377' > reports/b.xml;"
        " ln -s /etc/passwd reports/c.xml; exit 4", str(project), collect=["reports/*.xml"])
    assert (r.status, r.exit_code) == ("RE", 4), (r.error, r.stderr)
    assert r.files == {"reports/a.xml": b"<a/>\n", "reports/b.xml": b"\xff"}
    assert r.meta.notes[1:] == []


def test_collect_after_a_timeout_says_nothing_came(config: SandboxConfig,
                                                   project: pathlib.Path) -> None:
    r = SandboxRunner(config).execute("touch a.xml; sleep 30", str(project), timeout=1,
                                      collect=["*.xml"])
    assert (r.status, r.files) == ("TO", {})
    assert r.meta.notes[1:] == ["collected files: none, the command did not finish"]


def test_collect_is_bounded(config: SandboxConfig, project: pathlib.Path) -> None:
    from isolate_sandbox.collect import CollectLimits
    r = SandboxRunner(config).execute(
        "for i in 1 2 3; do head -c 100 /dev/zero > f$i.bin; done", str(project),
        collect=["*.bin"], collect_limits=CollectLimits(max_files=2, max_bytes=150))
    assert r.files == {"f1.bin": b"\0" * 100, "f2.bin": b"\0" * 50}, r.meta.notes
    assert r.meta.notes[1:] == ["collected file f2.bin cut to 50 of 100 bytes "
                                "(all files together at most 150)",
                                "collected files cut at 2 files"]


def test_mounts_read_only_and_writable(config: SandboxConfig, tmp_path: pathlib.Path) -> None:
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "in.txt").write_text("input\n")
    (tmp_path / "rw").mkdir()
    os.chmod(tmp_path / "rw", 0o777)
    mounts = [f"{tmp_path / 'ro'}:/box/in", (str(tmp_path / "rw"), "/box/out", "rw")]
    r = Sandbox(config).execute_code(
        "print(open('/box/in/in.txt').read(), end='')\n"
        "open('/box/out/o.txt', 'w').write('written')\n"
        "try:\n    open('/box/in/x', 'w')\nexcept OSError as e:\n    print(e.errno)\n",
        mounts=mounts)
    assert (r.status, r.stdout) == ("OK", "input\n30\n"), (r.error, r.stderr)
    assert (tmp_path / "rw" / "o.txt").read_text() == "written"
    assert not (tmp_path / "ro" / "x").exists()
    assert r.meta.resource_limits["disk_mb"] is None


def test_disk_limit(config: SandboxConfig) -> None:
    r = Sandbox(config).execute_code("open('/box/big', 'wb').write(b'x' * (20 << 20))",
                                     disk_mb=8)
    assert r.status in ("RE", "SG") and r.error is not None, (r.status, r.stderr)
    assert r.error.startswith("Disk limit exceeded (8 MiB"), r.error
    assert r.meta.resource_limits["disk_mb"] == 8


def test_network_is_opt_in(config: SandboxConfig) -> None:
    code = "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))"
    r = Sandbox(config).execute_code(code)
    assert r.stdout == "['lo']\n", (r.error, r.stderr)
    r = Sandbox(config).execute_code(code, network=True)
    assert r.status == "OK" and r.stdout != "['lo']\n" and r.meta.resource_limits["network"]


def test_import_guard_sees_builtins_import() -> None:
    assert analyze_code("import builtins\nbuiltins.__import__('os')").blocked == ["os"]


def test_infinite_timeout_refused_at_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_TIMEOUT_SEC", "inf")
    with pytest.raises(ValueError, match="SANDBOX_TIMEOUT_SEC='inf' is not a finite number"):
        SandboxConfig.from_env()
    with pytest.raises(ValueError, match="timeout must be a finite positive"):
        SandboxConfig(timeout=float("inf"))


def health(path: str) -> dict:  # type: ignore[type-arg]
    conn = UnixHTTPConnection(path, timeout=5)
    try:
        conn.request("GET", "/v1/health")
        answer: dict = json.loads(conn.getresponse().read())  # type: ignore[type-arg]
        return answer
    finally:
        conn.close()


@pytest.fixture
def full_service(service: str) -> Iterator[str]:  # noqa: F811
    """The session's service (2 at once, a queue of 1) with both slots and its queue taken by
    requests that sleep."""
    box = Sandbox(SandboxConfig(backend="service", socket_path=service))
    threads: List[threading.Thread] = []
    for _ in range(3):
        t = threading.Thread(target=box.execute_code,
                             args=("import time\ntime.sleep(5)",), kwargs={"timeout": 10})
        t.start()
        threads.append(t)
    while True:
        h = health(service)
        if h["running"] == 2 and h["waiting"] == 1:
            break
        assert all(t.is_alive() for t in threads), "a holding request ended early"
        time.sleep(0.02)
    yield service
    for t in threads:
        t.join()


def test_full_service_retries_429_within_the_bound(full_service: str) -> None:
    hasty = Sandbox(SandboxConfig(backend="service", socket_path=full_service, busy_wait=0))
    with pytest.raises(ServiceError) as e:
        hasty.execute_code("print(1)")
    assert e.value.status == 429 and "retried for" in str(e.value)
    patient = Sandbox(SandboxConfig(backend="service", socket_path=full_service))
    r = patient.execute_code("print(1)", timeout=40)
    assert (r.status, r.stdout) == ("OK", "1\n")


def test_permission_denied_names_the_group() -> None:
    tmp = tempfile.mkdtemp(prefix="pysvc-denied-")
    os.chmod(tmp, 0o755)
    path = os.path.join(tmp, "api.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(1)
    os.chmod(path, 0o660)
    try:
        done = as_nobody("from isolate_sandbox import execute_code\n"
                         "execute_code('print(1)')\n", path)
    finally:
        s.close()
        shutil.rmtree(tmp)
    assert done.returncode != 0
    assert "permission denied on the isolate service's socket" in done.stderr, done.stderr
    assert "the group 'root'" in done.stderr


def test_a_non_root_callers_mount_goes_through_the_policy(service: str,  # noqa: F811
                                                          tmp_path: pathlib.Path) -> None:
    """nobody mounts a directory of its own: the service binds it (where its caller policy
    opens it with nobody's rights) or refuses with one error naming the mount and the rule."""
    own = tmp_path / "mine"
    own.mkdir()
    (own / "f.txt").write_text("nobody's\n")
    os.chown(own, NOBODY.pw_uid, NOBODY.pw_gid)
    os.chmod(tmp_path, 0o755)
    answer = nobody_calls(service, "print(open('/box/m/f.txt').read(), end='')",
                          f"mounts=['{own}:/box/m:ro']")
    if answer[0] == "ran":
        assert answer[1:] == ["OK", "nobody's\n"]
    else:
        assert answer[1] in (400, 403) and f"mount {own}:/box/m:ro" in answer[4], answer


def nobody_calls(socket_path: str, code: str, arguments: str) -> List[Any]:
    """``execute_code(code, ARGUMENTS)`` as nobody: ``["ran", status, stdout]`` or
    ``["refused", http status, field, exception class, message]``."""
    script = ("import json\nfrom isolate_sandbox import execute_code, ServiceError\n"
              f"try:\n    r = execute_code({code!r}, {arguments})\n"
              "    print(json.dumps(['ran', r.status, r.stdout]))\n"
              "except ServiceError as e:\n"
              "    print(json.dumps(['refused', e.status, e.field, type(e).__name__, str(e)]))\n")
    done = as_nobody(script, socket_path)
    assert done.returncode == 0, done.stderr
    answer: List[Any] = json.loads(done.stdout)
    return answer


def test_tcp_url_is_parsed() -> None:
    from isolate_sandbox.service_transport import connection
    conn = connection("http://127.0.0.1:7070", 1.0)
    assert (conn.host, conn.port) == ("127.0.0.1", 7070)
    with pytest.raises(ValueError, match="use http://HOST:PORT"):
        connection("https://x", 1.0)


def test_execute_code_collects_files(config: SandboxConfig) -> None:
    code = ("import os, sys\nos.makedirs('out', exist_ok=True)\n"
            "open('out/r.json', 'w').write(sys.stdin.read() + sys.argv[1])\n"
            "open('out/skip.txt', 'w').write('no')\n")
    r = Sandbox(config).execute_code(code, stdin="in:", args=["arg"], collect=["out/*.json"],
                                     bypass_security=True)
    assert (r.status, r.files, r.meta.notes) == ("OK", {"out/r.json": b"in:arg"}, []), \
        (r.error, r.stderr)
    with pytest.raises(ValueError, match="Python only, not c"):
        Sandbox(config).execute_code("int main(){}", "c", collect=["*"])


def test_image_per_call(config: SandboxConfig) -> None:
    code = "import sys\nprint(sys.prefix)"
    r = Sandbox(config).execute_code(code, image="host")
    assert r.status == "OK", (r.error, r.stderr)
    assert r.meta.report["run"]["sandbox"]["image"] == "host"
    # The binary runs in-process: never handed to a service on the machine's sockets.
    assert r.meta.report["run"]["sandbox"]["via"] == {"cli": "in-process",
                                                      "service": "service"}[config.backend]


def test_the_whole_call_is_bounded(config: SandboxConfig) -> None:
    """Past its own bound (here shorter than the box's time limit) the call stops the box:
    the CLI's isolate is stopped, the service's request cancelled; nothing is left."""
    from isolate_sandbox.errors import CallTimeoutError
    from isolate_sandbox.sandbox import select_transport
    from isolate_sandbox.transport import ExecRequest, Limits
    from conftest import isolate_tmp, open_fds
    transport = select_transport(config)

    def ours() -> object:
        return open_fds(), isolate_tmp()

    before = ours()
    limits = Limits(timeout=60, memory_mb=64, max_output_bytes=1024, call_timeout=1)
    with pytest.raises(CallTimeoutError, match="did not finish within 1s"):
        transport.exec(ExecRequest("python", "import time\ntime.sleep(60)", limits))
    assert ours() == before


def test_tcp_with_a_token(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-agent-token\n")
    os.chmod(token, 0o600)
    with running_service("--listen", "127.0.0.1:0", "--token-file", str(token)) as (_, log):
        listening = next(line for line in log.splitlines() if " listening on " in line)
        address = listening.split(" and ", 1)[1].split()[0]
        monkeypatch.setenv("ISOLATE_URL", f"http://{address}")
        monkeypatch.setenv("ISOLATE_TOKEN", "s3cret-agent-token")
        r = execute_code("print(6 * 7)")
        assert (r.status, r.stdout, r.meta.runtime) == ("OK", "42\n", "service")
        monkeypatch.setenv("ISOLATE_TOKEN", "wrong")
        with pytest.raises(ServiceError) as e:
            execute_code("print(1)")
        assert e.value.status == 401


def test_network_for_a_non_root_caller_is_the_operators_choice(service: str) -> None:  # noqa
    """A caller who is not root asks for the host's network: a service that leaves it to the
    operator (--net-host-group, off by default) refuses with 403 naming the field; a service
    without that policy lets it through, which this test reports as the missing feature."""
    answer = nobody_calls(service, "print(1)", "network=True")
    if answer[0] == "ran":
        pytest.skip("the service lacks the operator's opt-in for the host network "
                    "(isolate serve --net-host-group): it gave a non-root caller net host")
    assert answer[1:4] == [403, "net", "RefusedError"], answer


def test_runner_and_executor_mounts(config: SandboxConfig, project: pathlib.Path,
                                    tmp_path: pathlib.Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "n.txt").write_text("41")
    os.chmod(tmp_path / "shared", 0o777)
    mount = f"{tmp_path / 'shared'}:/box/shared:rw"
    r = SandboxRunner(config).execute("cat /box/shared/n.txt > /box/shared/copy", str(project),
                                      mounts=[mount])
    assert r.status == "OK", (r.error, r.stderr)
    assert (tmp_path / "shared" / "copy").read_text() == "41"
    code = "class C:\n    def get(self):\n        return int(open('/box/shared/n.txt').read())\n"
    out = SandboxExecutor(config).execute(code, "C", "get", None, 10, mounts=[mount])
    assert (out["success"], out["result"]) == (True, 41), out


def test_a_limit_beyond_the_services_cap_names_the_field() -> None:
    with running_service("--max-mem", "64M") as (path, _):
        box = Sandbox(SandboxConfig(backend="service", socket_path=path))
        with pytest.raises(ServiceError) as e:
            box.execute_code("print(1)", memory_mb=128)
    assert (e.value.status, e.value.field) == (400, "memory_bytes"), str(e.value)


def test_a_request_body_over_the_services_bound(config: SandboxConfig) -> None:
    """A source larger than the service takes is a ServiceError naming the limit (400 or 413);
    through the binary the same source runs."""
    code = "# " + "x" * (48 << 20) + "\nprint('big')\n"
    box = Sandbox(config)
    if config.backend == "cli":
        r = box.execute_code(code, memory_mb=512)
        assert (r.status, r.stdout) == ("OK", "big\n"), (r.error, r.stderr)
        return
    try:
        r = box.execute_code(code, memory_mb=512)
    except ServiceError as e:
        assert e.status in (400, 413) and not str(e).endswith("no details"), e
        return
    assert (r.status, r.stdout) == ("OK", "big\n"), (r.error, r.stderr)
    pytest.skip("the service takes a 48 MiB body: it has no request body bound yet "
                "(the service's body and output caps)")


def test_an_agent_loop_as_a_socket_group_member(service: str) -> None:  # noqa: F811
    """nobody, admitted by the socket's group: the executor's statuses, an exception's fields,
    the disk limit, a project with a symlink out and files collected, all through the
    service."""
    home = tempfile.mkdtemp(prefix="pysvc-nobody-")
    try:
        os.chmod(home, 0o755)
        proj = os.path.join(home, "proj")
        os.mkdir(proj)
        with open(os.path.join(proj, "a.txt"), "w") as f:
            f.write("A")
        os.symlink("/etc/shadow", os.path.join(proj, "out"))
        os.chown(proj, NOBODY.pw_uid, NOBODY.pw_gid)
        script = (
            "import json\nfrom isolate_sandbox import *\n"
            "ex = SandboxExecutor()\n"
            f"spin = ex.execute({CODE!r}, 'A', 'spin', None, 1)\n"
            f"bail = ex.execute({CODE!r}, 'A', 'bail', None, 10)\n"
            "r = execute_code('1/0')\n"
            "d = execute_code('open(\"/box/f\", \"wb\").write(bytes(9 << 20))', disk_mb=4)\n"
            f"p = SandboxRunner().execute('cp a.txt b.xml', {proj!r}, collect=['*.xml'])\n"
            "print(json.dumps([spin['status'], spin['error'], bail['status'], r.error,\n"
            "                  r.exception.name, d.error[:19], p.status, p.meta.runtime,\n"
            "                  {k: v.decode() for k, v in p.files.items()}, p.meta.notes]))\n")
        done = as_nobody(script, service)
    finally:
        shutil.rmtree(home)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        "TO", "Code execution timed out after 1s", "RE", "ZeroDivisionError: division by zero",
        "ZeroDivisionError", "Disk limit exceeded", "OK", "service", {"b.xml": "A"},
        ["symlink out -> /etc/shadow leads out of the project: not copied"]]


def test_executor_result_too_large_to_copy_is_an_answer() -> None:
    """Output kept so large that result.json passes the copy's bound: an XX answer saying so,
    on both transports, never an exception (a service that allows 40 MiB of output)."""
    code = ("import sys\nclass L:\n    def f(self):\n        print('o' * (40 << 20))\n"
            "        print('e' * (40 << 20), file=sys.stderr)\n        return 1\n")
    with running_service("--max-output", "40M") as (path, _):
        for backend in ("cli", "service"):
            config = SandboxConfig(backend=backend, socket_path=path, memory_mb=1024,
                                   max_output_kb=40 << 10)
            out = SandboxExecutor(config).execute(code, "L", "f", None, 60, disk_mb=256)
            assert (out["success"], out["status"]) == (False, "XX"), out["error"]
            assert out["error"] == ("Sandbox failure: the result was not copied out: "
                                    "over 67108864 bytes"), backend
            # Within the default disk limit the driver cannot even write it: that is said.
            out = SandboxExecutor(config).execute(code, "L", "f", None, 60)
            assert out["error"].startswith("Disk limit exceeded (64 MiB"), out["error"]
