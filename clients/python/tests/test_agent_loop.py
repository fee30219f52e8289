"""An agent's loop of thirty tasks (agent_loop.py) on every transport and as every kind of
caller: root; nobody, a member of the service's socket group (its CLI runs handed to the
service); a user made as useradd makes them (uid not its gid) with a service of its own and the
binary's rootless runs. Each kind runs the loop with a fresh box per task through the CLI
transport and through the service, and in one Session."""

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, Iterator, Mapping, Optional

import pytest

from conftest import User, isolate_binary, made_split_user
from test_agent_backend import handover_service
from test_rootless import users_own_service
from test_service import NOBODY, SRC, needs_service

LOOP = pathlib.Path(__file__).with_name("agent_loop.py")
KINDS = ["fresh-cli", "fresh-service", "session"]


@pytest.fixture(scope="module")
def shared_service() -> Iterator[Dict[str, str]]:
    """One service for root and the socket group's member: its API socket and its CLI's."""
    with handover_service("--parallel", "2") as (api, cli):
        yield {"api": api, "cli": cli}


@contextlib.contextmanager
def home_of(user: Optional[User]) -> Iterator[str]:
    """A temporary directory of the caller's own: its TMPDIR (workspaces, the client's files)."""
    path = tempfile.mkdtemp(prefix="agent-loop-home-")
    os.chmod(path, 0o755)
    if user is not None:
        os.chown(path, user.uid, user.gid)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_loop(user: Optional[User], home: str,
             env: Mapping[str, str]) -> Dict[str, Dict[str, Optional[str]]]:
    """The loop of every kind, run as ``user`` (None: root), each task's answer by kind."""
    full = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{SRC}:{LOOP.parent}", "TMPDIR": home,
            "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/nonexistent",
            "ISOLATE_BIN": isolate_binary(), **env}
    if "GOCOVERDIR" in os.environ:
        # A coverage-built binary warns on its stderr, which a task reads, without a
        # directory for its counters: root's go where the test command collects them, a
        # user's (who may not write there) into its own home.
        full["GOCOVERDIR"] = os.environ["GOCOVERDIR"] if user is None else home
    ids = {} if user is None else {"user": user.uid, "group": user.gid,
                                   "extra_groups": []}
    done = subprocess.run([sys.executable, str(LOOP)] + KINDS, env=full, cwd="/",
                          capture_output=True, text=True, timeout=300, **ids)  # type: ignore
    assert done.returncode == 0, done.stderr
    answers: Dict[str, Dict[str, Optional[str]]] = json.loads(done.stdout.splitlines()[-1])
    return answers


def assert_all_passed(answers: Dict[str, Dict[str, Optional[str]]]) -> None:
    assert list(answers) == KINDS
    for kind, tasks in answers.items():
        assert len(tasks) == 30, (kind, list(tasks))
        failed = {name: why for name, why in tasks.items() if why is not None}
        assert not failed, (kind, failed)


@needs_service
def test_agent_loop_as_root(shared_service: Dict[str, str]) -> None:
    with home_of(None) as home:
        assert_all_passed(run_loop(None, home, {
            "ISOLATE_SOCKET": shared_service["api"], "ISOLATE_NO_SERVICE": "1"}))


@needs_service
def test_agent_loop_as_a_socket_group_member(shared_service: Dict[str, str]) -> None:
    nobody = User(NOBODY.pw_uid, NOBODY.pw_gid)
    with home_of(nobody) as home:
        assert_all_passed(run_loop(nobody, home, {
            "ISOLATE_SOCKET": shared_service["api"],
            "ISOLATE_SERVICE_SOCKET": shared_service["cli"]}))


@needs_service
def test_agent_loop_as_a_user_on_its_own_service() -> None:
    """Rlimits alone bound this caller's boxes (no cgroup of its own), on the host's root file
    system: its service's sessions and the binary's runs without root."""
    if open("/proc/sys/user/max_user_namespaces").read().strip() == "0":
        pytest.skip("needs user namespaces")
    with made_split_user() as user, home_of(user) as home, \
            users_own_service(user, home) as sock:
        assert_all_passed(run_loop(user, home, {
            "ISOLATE_SOCKET": sock, "ISOLATE_NO_SERVICE": "1", "IMAGE": "host",
            "SANDBOX_ALLOW_RLIMIT_ONLY": "1", "ISOLATE_CONFIG": "/dev/null"}))
