"""What an agent back end leans on, against a real `isolate serve` (as root; some calls as
nobody): a busy service retried on both transports, a refusal named on both, the binary's runs
handed over whatever ISOLATE_ variables the client reads, projects beyond the request body's
bound through the file store, sessions found again by metadata from another process, and the
health check asked once per endpoint."""

import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Any, Iterator, List, Tuple

import pytest

from conftest import isolate_binary, needs_root
from isolate_sandbox import (RefusedError, Sandbox, SandboxConfig, SandboxRunner, ServiceError,
                             Session)
from isolate_sandbox.cli_transport import no_report_error
from isolate_sandbox.result import syntax_error_of
from test_service import NOBODY, SRC, as_nobody, needs_service, running_service
from test_session import Stub, stub  # noqa: F401 - the fixture

SERVE = os.path.join(os.path.dirname(isolate_binary()), "isolate-serve")


@contextlib.contextmanager
def handover_service(*extra: str) -> Iterator[Tuple[str, str]]:
    """A real service that also takes the binary's runs on a CLI socket of its own: the API's
    socket and the CLI's."""
    tmp = tempfile.mkdtemp(prefix="pysvc-cli-")
    os.chmod(tmp, 0o755)
    cli = os.path.join(tmp, "cli.sock")
    try:
        with running_service("--cli-socket", cli, *extra) as (path, _):
            yield path, cli
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def nobody_dir() -> str:
    """A temporary directory nobody may write (its TMPDIR in these tests)."""
    path = tempfile.mkdtemp(prefix="pysvc-nobody-")
    os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    return path


# --- the binary: handed over, busy, refused ----------------------------------------------------

@needs_service
def test_isolate_bin_keeps_the_handover(monkeypatch: pytest.MonkeyPatch) -> None:
    """ISOLATE_BIN (and the client's other ISOLATE_ variables) do not reach the binary: its run
    is handed to the service, as without them."""
    with handover_service() as (api, cli):
        monkeypatch.delenv("ISOLATE_NO_SERVICE")
        monkeypatch.setenv("ISOLATE_SERVICE_SOCKET", cli)
        monkeypatch.setenv("ISOLATE_URL", "")
        monkeypatch.setenv("ISOLATE_QUEUE_PREFIX", "unused")
        box = Sandbox(SandboxConfig.from_env(backend="cli"))
        r = box.execute_code("print(1+1)")
        assert r.stdout == "2\n", r
        assert r.meta.report["run"]["sandbox"]["via"] == "service", r.meta.report


@needs_service
def test_the_binary_retries_a_busy_service() -> None:
    """The binary hands nobody's runs to a service with one slot and a queue of one: six at
    once, and every one of them runs (a busy answer is tried again within the call's bound)."""
    with handover_service("--parallel", "1", "--queue", "1") as (api, cli):
        tmp = nobody_dir()
        try:
            script = (
                "import json, threading\n"
                "from isolate_sandbox import Sandbox, SandboxConfig\n"
                "box = Sandbox(SandboxConfig.from_env(backend='cli'))\n"
                "out = []\n"
                "def one():\n"
                "    try:\n"
                "        r = box.execute_code('import time; time.sleep(0.5); print(7)')\n"
                "        out.append([r.status, r.stdout, r.meta.report['run']['sandbox']['via']])\n"
                "    except Exception as e:\n"
                "        out.append([type(e).__name__, str(e), ''])\n"
                "ts = [threading.Thread(target=one) for _ in range(6)]\n"
                "[t.start() for t in ts]\n"
                "[t.join() for t in ts]\n"
                "print(json.dumps(out))\n")
            done = as_nobody(script, api, ISOLATE_BIN=isolate_binary(),
                             ISOLATE_SERVICE_SOCKET=cli, TMPDIR=tmp)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout) == [["OK", "7\n", "service"]] * 6
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@needs_service
def test_a_refused_network_is_a_refused_error_on_both_transports() -> None:
    """nobody asks the host's network of a service that allows it to root only: RefusedError
    naming the field, through the API and through the binary's handover alike."""
    with handover_service() as (api, cli):
        tmp = nobody_dir()
        try:
            script = (
                "import json\n"
                "from isolate_sandbox import Sandbox, SandboxConfig, RefusedError\n"
                "out = []\n"
                "for kind in ('service', 'cli'):\n"
                "    box = Sandbox(SandboxConfig.from_env(backend=kind))\n"
                "    try:\n"
                "        box.execute_code('print(1)', network=True)\n"
                "        out.append([kind, 'ran'])\n"
                "    except RefusedError as e:\n"
                "        out.append([kind, e.field, e.status])\n"
                "print(json.dumps(out))\n")
            done = as_nobody(script, api, ISOLATE_BIN=isolate_binary(),
                             ISOLATE_SERVICE_SOCKET=cli, TMPDIR=tmp)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout) == [["service", "net", 403], ["cli", "net", 403]]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def test_what_the_binary_says_without_a_report() -> None:
    busy = no_report_error(2, "isolate: the service is busy: every run slot is taken and its "
                              "queue is full (--parallel, --queue); try again")
    assert isinstance(busy, ServiceError) and busy.status == 429
    refused = no_report_error(2, "isolate: --seccomp none: this service allows it to root only,"
                                 " and to the groups of --seccomp-none-group")
    assert isinstance(refused, RefusedError) and refused.field == "seccomp"
    refused = no_report_error(2, "isolate: --box-id: choosing a box id needs root: ...")
    assert isinstance(refused, RefusedError) and refused.field == "box_id"
    refused = no_report_error(2, "isolate: --bind /root/x: permission denied (as uid 65534)")
    assert isinstance(refused, RefusedError) and refused.field == "binds"
    other = no_report_error(2, "isolate: --bind /x: no such file or directory (as uid 65534)")
    assert not isinstance(other, ServiceError)
    other = no_report_error(2, "isolate: --time: bad duration")
    assert not isinstance(other, ServiceError)


# --- big projects --------------------------------------------------------------------------

@needs_service
def test_a_project_beyond_the_body_bound_runs_on_both_transports(service_api: str,
                                                                 tmp_path: pathlib.Path
                                                                 ) -> None:
    """A project of 6 MiB in 300 files (over the service's 4 MiB body and its 256 copy_in
    entries) gives the same answer through the service as through the binary, and leaves
    nothing in the file store."""
    project = tmp_path / "project"
    (project / "src" / "deep").mkdir(parents=True)
    (project / "big.bin").write_bytes(os.urandom(6 << 20))
    (project / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (project / "run.sh").chmod(0o755)
    for i in range(300):
        (project / "src" / "deep" / f"m{i}.py").write_text(f"X = {i}\n")
    os.symlink("src/deep/m7.py", project / "link.py")
    os.chmod(tmp_path, 0o755)
    want = hashlib.sha256((project / "big.bin").read_bytes()).hexdigest()
    command = ("sha256sum big.bin | cut -d' ' -f1; ls src/deep | wc -l; cat link.py; ./run.sh; "
               "ls -a /box")
    answers = []
    for kind, socket_path in (("service", service_api), ("cli", "/nonexistent")):
        runner = SandboxRunner(SandboxConfig(backend=kind, socket_path=socket_path))
        r = runner.execute(command, str(project), timeout=30)
        assert r.status == "OK", (kind, r.stderr, r.error)
        answers.append(r.stdout)
    assert answers[0] == answers[1]
    lines = answers[0].splitlines()
    assert lines[:4] == [want, "300", "X = 7", "ran"], answers[0]
    assert ".isolate-in.tar" not in answers[0]
    store = pathlib.Path(service_api).parent / "files"
    assert [p for p in store.rglob("*") if p.is_file() and not p.name.startswith(".")] == []


@pytest.fixture(scope="module")
def service_api() -> Iterator[str]:
    """A service of this module's own, its file store beside its socket."""
    with running_service("--parallel", "4") as (path, _):
        yield path


# --- sessions --------------------------------------------------------------------------------

@needs_service
def test_session_retries_a_caller_at_its_cap() -> None:
    """Three sessions at once for a caller allowed one: each waits for its turn (429 retried
    with backoff), none fails."""
    with running_service("--max-sessions-per-caller", "1") as (api, _):
        out: List[Any] = []

        def one() -> None:
            try:
                with Session(socket_path=api, timeout=60) as sb:
                    out.append(sb.run_code("6 * 7").result)
            except Exception as e:  # the test's answer, whatever it is
                out.append(repr(e))
        threads = [threading.Thread(target=one) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert out == ["42"] * 3
        with Session(socket_path=api, timeout=60):
            with pytest.raises(ServiceError) as e:
                Session(socket_path=api, timeout=60, busy_wait=0)
            assert e.value.status == 429


@needs_service
def test_sessions_found_again_from_another_process(service_api: str) -> None:
    """A session made with metadata is listed by it and taken up by id in another process
    (its interpreter's state as it was); another caller sees neither."""
    with Session(socket_path=service_api, timeout=120,
                 metadata={"conversation": "c-42", "user": "ann"}) as sb:
        assert sb.metadata == {"conversation": "c-42", "user": "ann"}
        sb.run_code("state = 'kept'")
        with Session(socket_path=service_api, timeout=120, metadata={"conversation": "c-43"}):
            script = (
                "import json, sys\n"
                "from isolate_sandbox import Session\n"
                "found = Session.list(metadata={'conversation': 'c-42'},"
                " socket_path=sys.argv[1])\n"
                "sb = Session.connect(found[0].id, socket_path=sys.argv[1])\n"
                "print(json.dumps([[f.id for f in found], found[0].metadata,"
                " sb.run_code('state').result, sb.info()['processes'],"
                " len(Session.list(socket_path=sys.argv[1]))]))\n")
            done = subprocess.run([sys.executable, "-c", script, service_api],
                                  env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)},
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout) == [[sb.id], {"conversation": "c-42", "user": "ann"},
                                               "'kept'", [], 2]
            other = as_nobody(
                "import json, sys\nfrom isolate_sandbox import Session, ServiceError\n"
                "found = Session.list(metadata={'conversation': 'c-42'})\n"
                "try:\n"
                f"    Session.connect({sb.id!r})\n"
                "    status = 200\n"
                "except ServiceError as e:\n"
                "    status = e.status\n"
                "print(json.dumps([len(found), status]))\n", service_api)
            assert other.returncode == 0, other.stderr
            assert json.loads(other.stdout) == [0, 404]
    with pytest.raises(ValueError, match="metadata"):
        Session(socket_path=service_api, metadata={"k": "v" * 513})


@needs_service
def test_run_code_env_and_cwd_for_one_call(service_api: str) -> None:
    look = "import os\n(os.environ.get('A'), os.getcwd())"
    with Session(socket_path=service_api, timeout=60) as sb:
        assert sb.run_code(look, env={"A": "1"}, cwd="/tmp").result == "('1', '/tmp')"
        assert sb.run_code(look).result == "(None, '/box')"
        ctx = sb.create_code_context()
        assert ctx.run_code(look, cwd="/tmp").result == "(None, '/tmp')"
        with pytest.raises(ServiceError) as e:
            sb.run_code("1", cwd="tmp")
        assert (e.value.status, e.value.field) == (400, "cwd")


@needs_service
def test_files_make_dir_and_rename(service_api: str) -> None:
    with Session(socket_path=service_api, timeout=60) as sb:
        assert sb.files.make_dir("a/b") is True
        assert sb.files.make_dir("/box/a/b") is False
        sb.files.write("a/f.txt", "hi")
        moved = sb.files.rename("a/f.txt", "a/b/g.txt")
        assert (moved.path, moved.size, moved.is_dir) == ("/box/a/b/g.txt", 2, False)
        assert sb.files.read("/box/a/b/g.txt") == "hi" and not sb.files.exists("a/f.txt")
        with pytest.raises(ServiceError) as e:
            sb.files.rename("a", "/etc/a")
        assert (e.value.status, e.value.field) == (400, "to")
        with pytest.raises(ServiceError) as e:
            sb.files.make_dir("a/b/g.txt")
        assert (e.value.status, e.value.field) == (400, "path")


def test_health_asked_once_per_endpoint(stub: Stub) -> None:  # noqa: F811
    stub.route("GET /v1/sessions", (200, {"sessions": [{"id": "s1", "metadata": {"k": "v"}}]}))
    for _ in range(3):
        Session(url=stub.url)
    assert [(f.id, f.metadata) for f in Session.list(url=stub.url)] == [("s1", {"k": "v"})]
    assert [p for _, p, _, _ in stub.seen].count("/v1/health") == 1


# --- execute_code --------------------------------------------------------------------------

@needs_root
def test_syntax_error_as_an_exception(cli: Sandbox) -> None:
    r = cli.execute_code("x = 1\nprint(1+")
    assert r.status == "CE"
    assert r.exception is not None and r.exception.name == "SyntaxError", r
    assert "never closed" in r.exception.value and "line 2" in r.exception.traceback
    assert syntax_error_of("error: expected ';'\n") is None
    # An image with no compile step (the host's): the error comes as the program runs.
    r = cli.execute_code("x = 1\nprint(1+", image="host")
    assert r.status == "RE" and r.exception is not None, r
    assert (r.exception.name, r.error) == ("SyntaxError", "SyntaxError: " + r.exception.value)
    # A program that only prints the words is no syntax error of its own.
    r = cli.execute_code("import sys\nprint('SyntaxError: no', file=sys.stderr)\nsys.exit(2)",
                         image="host")
    assert (r.status, r.exception) == ("RE", None)
