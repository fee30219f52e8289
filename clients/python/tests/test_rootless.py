"""The CLI transport as a caller who is not root, with no service: the binary's runs without
root, through execute_code and SandboxRunner. Each test runs as nobody (uid = gid) and as a user
made as ``useradd`` makes them (a primary group of another number than the uid, subordinate
ids), created by the test and removed after it. Their processes start from this test's cgroup,
which is not delegated to them: isolate has no cgroup subtree of theirs to use on any host, so
it either refuses or (allowed) enforces the limits with rlimits alone."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

import pytest

from conftest import User, isolate_binary
from isolate_sandbox.config import DEFAULT_SOCKET
from isolate_sandbox.service_transport import service_answers
from test_service import NOBODY, SERVE, SRC

NO_SERVICE = "/nonexistent/api.sock"
# A command line no other process on the machine has: the leak check looks for it.
SLEEPER = "sleep 37.25"

needs_rootless = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(isolate_binary(), os.X_OK)
    or open("/proc/sys/user/max_user_namespaces").read().strip() == "0",
    reason="needs root (to run as nobody), the isolate binary and user namespaces")

pytestmark = needs_rootless

# The script's prelude: facts(result) is what the tests compare, as JSON.
PRELUDE = """import base64, json
import isolate_sandbox as s
from isolate_sandbox.result import run_report_of
def facts(r):
    run = run_report_of(r.meta.report)
    return {"status": r.status, "stdout": r.stdout, "exit_code": r.exit_code,
            "error": r.error, "runtime": r.meta.runtime, "enforcement": r.meta.enforcement,
            "cgroup": run["sandbox"]["cgroup"], "memory_peak": run["memory_peak"],
            "limit": run["limit"], "exception": r.exception and r.exception.name,
            "files": {k: base64.b64encode(v).decode() for k, v in r.files.items()}}
def refusal(call):
    try:
        call()
    except s.SandboxUnavailableError as e:
        return str(e)
    return "ran"
"""

RLIMITS_ONLY = {"memory": "rlimit", "memory_rlimit": "address-space", "pids": "rlimit",
                "cpu": "rlimit", "cpus": "none", "wall": "supervisor"}


@pytest.fixture(params=["nobody", "uid-not-gid"])
def user(request: pytest.FixtureRequest) -> User:
    """nobody, or a user whose primary gid is not its uid (conftest's split_user)."""
    if request.param == "nobody":
        return User(NOBODY.pw_uid, NOBODY.pw_gid)
    split: User = request.getfixturevalue("split_user")
    return split


def as_user(who: User, script: str, socket_path: str,
            **extra: str) -> "subprocess.CompletedProcess[str]":
    """A Python script run as ``who`` (no extra groups) with the client on its path and the
    ``extra`` variables."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC), "ISOLATE_SOCKET": socket_path,
           "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/nonexistent", **extra}
    return subprocess.run([sys.executable, "-c", script], user=who.uid, group=who.gid,
                          extra_groups=[], env=env, cwd="/", capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def home(user: User) -> Iterator[str]:
    """The user's TMPDIR (the client's temporary directories, isolate's own box ids and locks)
    holding a project to copy in."""
    path = tempfile.mkdtemp(prefix="pyrootless-")
    project = os.path.join(path, "project")
    os.mkdir(project)
    with open(os.path.join(project, "data.txt"), "w") as f:
        f.write("from the project\n")
    for p in (path, project, os.path.join(project, "data.txt")):
        os.chown(p, user.uid, user.gid)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def user_runs(who: User, home: str, script: str, **env: str) -> Any:
    """``script`` (after PRELUDE) run as ``who`` with the binary, no service, ``home`` as
    TMPDIR and an empty isolate configuration unless ``env`` names one (the host's could allow
    rlimits); the JSON its last line prints."""
    env.setdefault("ISOLATE_CONFIG", "/dev/null")
    done = as_user(who, PRELUDE + script, NO_SERVICE, ISOLATE_BIN=isolate_binary(),
                   ISOLATE_NO_SERVICE="1", TMPDIR=home, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def assert_nothing_left(home: str, who: User) -> None:
    """No temporary directory of the client, no box of isolate's, no mount and no process of
    the runs remains: only the project and isolate's (empty) runtime directory."""
    runtime = f"isolate-{who.uid}"
    assert set(os.listdir(home)) - {runtime} == {"project"}
    for sub in ("boxes", "root"):
        where = os.path.join(home, runtime, sub)
        assert not os.path.isdir(where) or os.listdir(where) == [], where
    with open("/proc/self/mountinfo") as f:
        assert home not in f.read()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").strip().decode(errors="replace")
        except OSError:
            continue
        assert cmdline != SLEEPER, f"process {pid} of a run remains"


def test_ok_and_re_with_rlimits_say_how_limits_were_enforced(user: User, home: str) -> None:
    answer = user_runs(user, home, f"""
box = s.get_sandbox(allow_rlimit_only=True)
runner = s.SandboxRunner(allow_rlimit_only=True)
project = {os.path.join(home, "project")!r}
print(json.dumps([box.runtime,
                  facts(box.execute_code("print(6 * 7)", image="host")),
                  facts(box.execute_code("raise ValueError('boom')", image="host")),
                  facts(runner.execute("cat data.txt > out.txt; cat out.txt; exit 3", project,
                                       collect=["out.txt"]))]))
""")
    runtime, ok, raised, command = answer
    assert runtime == "cli"
    assert (ok["status"], ok["stdout"], ok["exit_code"], ok["error"]) == ("OK", "42\n", 0, None)
    assert (raised["status"], raised["exit_code"], raised["exception"], raised["error"]) == \
        ("RE", 1, "ValueError", "ValueError: boom")
    assert (command["status"], command["stdout"], command["exit_code"]) == \
        ("RE", "from the project\n", 3)
    assert command["files"] == {"out.txt": "ZnJvbSB0aGUgcHJvamVjdAo="}  # from the project\n
    for r in (ok, raised, command):
        assert r["runtime"] == "cli" and r["enforcement"] == RLIMITS_ONLY
        # No cgroup: no peak memory measured, and the result still maps.
        assert (r["cgroup"], r["memory_peak"]) == ("none", 0)
    assert_nothing_left(home, user)


def test_wall_timeout_allowed_from_the_environment(user: User, home: str) -> None:
    answer = user_runs(user, home, f"""
runner = s.SandboxRunner()
print(json.dumps([facts(runner.execute({SLEEPER!r}, {os.path.join(home, "project")!r},
                                       timeout=1)),
                  facts(s.execute_code("while True: pass", image="host", timeout=1))]))
""", SANDBOX_ALLOW_RLIMIT_ONLY="1")
    slept, spun = answer
    assert (slept["status"], slept["limit"], slept["error"]) == \
        ("TO", "wall", "Code execution timed out after 1s")
    assert slept["enforcement"] == RLIMITS_ONLY
    assert (spun["status"], spun["error"]) == ("TO", "Code execution timed out after 1s")
    assert_nothing_left(home, user)


def test_refused_without_the_option_with_isolates_fix(user: User, home: str) -> None:
    answer = user_runs(user, home, f"""
project = {os.path.join(home, "project")!r}
print(json.dumps([
    refusal(lambda: s.execute_code("print(1)", image="host")),
    refusal(lambda: s.SandboxRunner().execute("true", project)),
    refusal(lambda: s.get_sandbox(cgroup_root="/sys/fs/cgroup", allow_rlimit_only=True)
            .execute_code("print(1)", image="host")),
]))
""", SANDBOX_ALLOW_RLIMIT_ONLY="0")
    plain, runner, named = answer
    for said in (plain, runner):
        assert said.startswith("the isolate binary cannot run here without root"), said
        assert "systemd-run --user --scope -p Delegate=yes" in said
        assert "allow_rlimit_only=True (SANDBOX_ALLOW_RLIMIT_ONLY=1)" in said
    assert "--cgroup-root /sys/fs/cgroup: " in named and "SANDBOX_CGROUP_ROOT" in named
    assert_nothing_left(home, user)


def test_per_call_option_wins_over_the_environment(user: User, home: str) -> None:
    answer = user_runs(user, home, """
print(json.dumps([refusal(lambda: s.execute_code("print(1)", image="host",
                                                 allow_rlimit_only=False)),
                  facts(s.execute_code("print(1)", image="host"))]))
""", SANDBOX_ALLOW_RLIMIT_ONLY="1")
    refused, ran = answer
    assert refused.startswith("the isolate binary cannot run here without root"), refused
    assert (ran["status"], ran["stdout"]) == ("OK", "1\n")
    assert_nothing_left(home, user)


def test_isolates_configuration_allows_rlimits(user: User, home: str) -> None:
    config = os.path.join(home, "isolate.conf")
    with open(config, "w") as f:
        f.write("allow_rlimit_only = 1\n")
    answer = user_runs(user, home, """
print(json.dumps(facts(s.execute_code("print(2)", image="host"))))
""", ISOLATE_CONFIG=config)
    assert (answer["status"], answer["stdout"], answer["enforcement"]) == \
        ("OK", "2\n", RLIMITS_ONLY)
    os.remove(config)
    assert_nothing_left(home, user)


@contextlib.contextmanager
def users_own_service(user: User, home: str) -> Iterator[str]:
    """isolate-serve run by ``user`` for itself (rlimits alone; ``home`` its TMPDIR, where its
    socket is): the socket's path once it answers. Stopped at the end, it leaves no socket."""
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": home, "HOME": "/nonexistent"}
    log = tempfile.TemporaryFile()
    svc = subprocess.Popen([SERVE, "--allow-rlimit-only", "--cli-binary", isolate_binary(),
                            "--grace", "5s"], user=user.uid, group=user.gid,
                           extra_groups=[], env=env, cwd="/", stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=log)
    sock = os.path.join(home, f"isolate-{user.uid}", "api.sock")
    try:
        for _ in range(200):
            if svc.poll() is not None or service_answers(sock):
                break
            time.sleep(0.05)
        if not service_answers(sock):
            log.seek(0)
            pytest.fail(f"the user's isolate-serve did not come up: {log.read().decode()}")
        yield sock
    finally:
        svc.terminate()
        assert svc.wait(timeout=30) == 0
        log.close()
    assert not os.path.exists(sock)


def test_a_service_of_the_users_own(user: User, home: str) -> None:
    """The user runs a service for itself: with no ISOLATE_SOCKET, get_sandbox and Session find
    it in the user's own directory (root's default socket answering nothing), its runs enforce the
    limits as the user's own runs do, and it leaves nothing when it stops."""
    if service_answers(DEFAULT_SOCKET):
        pytest.skip("root's service answers at the default socket: it takes the user's calls first")
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": home, "HOME": "/nonexistent"}
    with users_own_service(user, home):
        script = PRELUDE + """
box = s.get_sandbox(allow_rlimit_only=True)
r = box.execute_code("print(6 * 7)", image="host")
with s.Session(image="host") as sb:
    said = sb.commands.run("echo in a session").stdout
print(json.dumps([box.runtime, facts(r), said]))
"""
        client_env = {**env, "PYTHONPATH": str(SRC), "PYTHONDONTWRITEBYTECODE": "1",
                      "ISOLATE_BIN": isolate_binary()}
        done = subprocess.run([sys.executable, "-c", script], user=user.uid,
                              group=user.gid, extra_groups=[], cwd="/", timeout=120,
                              env=client_env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        runtime, facts, said = json.loads(done.stdout.splitlines()[-1])
        assert runtime == "service" and said == "in a session\n", done.stdout
        assert (facts["status"], facts["stdout"], facts["enforcement"]) == \
            ("OK", "42\n", RLIMITS_ONLY), facts
    assert_nothing_left(home, user)
