"""Fixtures: the real isolate binary (as root), and clean SANDBOX_* variables for every test."""

import os
import pathlib
import tempfile
from typing import Iterator, Set

import pytest

from isolate_sandbox import Sandbox, SandboxConfig

REPO = pathlib.Path(__file__).resolve().parents[3]


def isolate_binary() -> str:
    """ISOLATE_BIN, else the repository's bin/isolate (make build)."""
    return os.environ.get("ISOLATE_BIN") or str(REPO / "bin" / "isolate")


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(isolate_binary(), os.X_OK),
    reason="needs root and the isolate binary (make build, or ISOLATE_BIN)")


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
    """The client's temporary directories in the temporary directory (only its prefixes:
    other programs' isolate-* directories come and go beside the tests)."""
    return {n for n in os.listdir(tempfile.gettempdir())
            if n.startswith(("isolate-client-", "isolate-executor-", "isolate-local-"))}
