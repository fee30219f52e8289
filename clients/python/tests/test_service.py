"""The service transport. Its request/response path runs only when `isolate serve` is up."""

import base64
import os
import pathlib
import socket

import pytest

from isolate_sandbox import Sandbox, SandboxConfig, SandboxUnavailableError
from isolate_sandbox.config import DEFAULT_SOCKET
from isolate_sandbox.service_transport import (ServiceTransport, inline_files, limit_fields,
                                               service_answers)
from isolate_sandbox.transport import Limits


def test_limit_fields_carry_units() -> None:
    assert limit_fields(Limits(1.5, 64, 1024, pids=8)) == {
        "cpu_time_ms": 1500, "wall_time_ms": 1500, "memory_bytes": 64 << 20,
        "output_limit_bytes": 1024, "pids": 8}


def test_inline_files_skip_symlinks(tmp_path: pathlib.Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_bytes(b"A")
    os.symlink("/etc/passwd", tmp_path / "d" / "link")
    entries = inline_files([(str(tmp_path / "d"), "/box/p")])
    assert [(e["path"], base64.b64decode(e["content_base64"])) for e in entries] == \
        [("/box/p/a.txt", b"A")]


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


@pytest.mark.skipif(not service_answers(os.environ.get("ISOLATE_SOCKET", DEFAULT_SOCKET)),
                    reason="needs a running `isolate serve` (issue 15; not built yet)")
def test_execute_through_the_service() -> None:  # pragma: no cover - no service yet
    box = Sandbox(SandboxConfig(backend="service", socket_path=DEFAULT_SOCKET))
    events: list = []
    r = box.execute_code("print(1+1)", on_stdout=events.append)
    assert (r.status, r.stdout, r.meta.runtime, events) == ("OK", "2\n", "service", ["2\n"])
