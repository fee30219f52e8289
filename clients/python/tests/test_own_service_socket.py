"""Where the client looks for a service a user who is not root runs for itself: the same
directory the isolate binary picks (its runtime directory rule)."""

import os
import pathlib

import pytest

from isolate_sandbox.service_transport import own_service_socket

UID = 54321


def test_own_service_socket_follows_the_runtime_directory_rule(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("makes directories of another uid")
    monkeypatch.setattr(os, "geteuid", lambda: UID)
    xdg, tmp, home = tmp_path / "xdg", tmp_path / "tmp", tmp_path / "home"
    for d in (xdg, tmp, home):
        d.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(xdg), "TMPDIR": str(tmp), "HOME": str(home)}
    # $XDG_RUNTIME_DIR only when it is the user's alone.
    assert own_service_socket(env) == f"{tmp}/isolate-{UID}/api.sock"
    os.chown(xdg, UID, UID)
    assert own_service_socket(env) == f"{xdg}/isolate/api.sock"
    del env["XDG_RUNTIME_DIR"]
    # $TMPDIR/isolate-UID: missing (the service makes it) or the user's own.
    assert own_service_socket(env) == f"{tmp}/isolate-{UID}/api.sock"
    squat = tmp / f"isolate-{UID}"
    squat.mkdir(mode=0o700)
    os.chown(squat, UID, UID)
    assert own_service_socket(env) == f"{squat}/api.sock"
    # Made by another user: $HOME/.cache/isolate, as the binary falls back.
    os.chown(squat, 0, 0)
    assert own_service_socket(env) == f"{home}/.cache/isolate/api.sock"
    # Root runs none of its own.
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert own_service_socket(env) is None
