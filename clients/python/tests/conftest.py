"""Fixtures: the real isolate binary (as root), and clean SANDBOX_* variables for every test."""

import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
from typing import Iterator, NamedTuple, Set

import pytest

from isolate_sandbox import Sandbox, SandboxConfig

REPO = pathlib.Path(__file__).resolve().parents[3]


def isolate_binary() -> str:
    """ISOLATE_BIN, else the repository's bin/isolate (make build)."""
    return os.environ.get("ISOLATE_BIN") or str(REPO / "bin" / "isolate")


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(isolate_binary(), os.X_OK),
    reason="needs root and the isolate binary (make build, or ISOLATE_BIN)")


@pytest.fixture(scope="session", autouse=True)
def private_tmp() -> Iterator[str]:
    """The client's temporary directories go to a directory of this session's own (searchable
    by the box user, who copies from it): other runs of the client on the machine use the same
    name prefixes in /tmp, and the leak checks count only this session's."""
    path = tempfile.mkdtemp(prefix="pyclient-tmp-")
    os.chmod(path, 0o755)
    saved, tempfile.tempdir = tempfile.tempdir, path
    try:
        yield path
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> Iterator[None]:
    """No SANDBOX_* of the caller's leaks into a test; artifacts go to the test's directory;
    the binary is the one under test."""
    for name in list(os.environ):
        if name.startswith("SANDBOX_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ISOLATE_BIN", isolate_binary())
    monkeypatch.setenv("SANDBOX_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    # No service in these tests: auto must not find one at the default path by accident, and
    # the binary must not hand its runs to a service on the machine's /run/isolate/cli.sock.
    monkeypatch.setenv("ISOLATE_SOCKET", str(tmp_path / "no-service.sock"))
    monkeypatch.setenv("ISOLATE_NO_SERVICE", "1")
    yield


@pytest.fixture
def cli() -> Sandbox:
    """A sandbox on the isolate binary with the default configuration."""
    return Sandbox(SandboxConfig.from_env(backend="cli"))


def open_fds() -> Set[str]:
    """This process's open descriptors."""
    return set(os.listdir("/proc/self/fd"))


def isolate_tmp() -> Set[str]:
    """The client's temporary directories in the session's temporary directory."""
    return set(os.listdir(tempfile.gettempdir()))


def stop(proc: "subprocess.Popen[bytes]") -> None:
    """Terminate a process the tests started; kill it if it takes more than 20 seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class User(NamedTuple):
    """A user who is not root, as the tests run it."""
    uid: int
    gid: int


# The user the tests make: its primary group is not its uid, as most users' are.
SPLIT_NAME, SPLIT_GROUP = "isolate-split-py", "isolate-split-py-g"
SPLIT_UID, SPLIT_GID = 23002, 23502


def _remove_split_user() -> None:
    for cmd, name, db in (("userdel", SPLIT_NAME, "/etc/passwd"),
                          ("groupdel", SPLIT_GROUP, "/etc/group")):
        with open(db) as f:
            if any(line.split(":")[0] == name for line in f):
                subprocess.run([cmd, name], check=True, capture_output=True)


@contextlib.contextmanager
def made_split_user() -> Iterator[User]:
    """A user made with groupadd and useradd (uid 23002, primary gid 23502), as a host's
    administrator makes users, and removed afterwards (with the subordinate range useradd gave
    it). One left by a test that was killed is removed first."""
    if not shutil.which("useradd"):
        pytest.fail("useradd is missing (Debian's passwd package)")
    _remove_split_user()
    subprocess.run(["groupadd", "-g", str(SPLIT_GID), SPLIT_GROUP], check=True,
                   capture_output=True)
    try:
        subprocess.run(["useradd", "-u", str(SPLIT_UID), "-g", SPLIT_GROUP, "-M", "-d",
                        "/nonexistent", "-s", "/usr/sbin/nologin", SPLIT_NAME], check=True,
                       capture_output=True)
        yield User(SPLIT_UID, SPLIT_GID)
    finally:
        _remove_split_user()


@pytest.fixture
def split_user() -> Iterator[User]:
    """The user made_split_user makes, for one test."""
    with made_split_user() as user:
        yield user
