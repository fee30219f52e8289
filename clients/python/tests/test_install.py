"""The documented install: ``python3 -m pip --python VENV/bin/python install --no-index
./clients/python`` into a venv made without pip, with no setuptools or wheel needed, from a
root-owned checkout as root and as nobody, leaving the checkout as it was."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional

import pytest

from test_service import NOBODY

CLIENT = pathlib.Path(__file__).resolve().parents[1]


def tree(root: pathlib.Path) -> List[str]:
    """Every path under root (caches of test tools aside)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if not {".mypy_cache", "__pycache__", ".pytest_cache"} & set(p.parts))


def pythons() -> List[str]:
    """This interpreter, and the first python3 on PATH when that is another (pyenv's, say)."""
    found = [sys.executable]
    first = shutil.which("python3")
    if first and os.path.realpath(first) != os.path.realpath(sys.executable):
        found.append(first)
    return found


def has_pip(python: str) -> bool:
    return subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0


@pytest.mark.parametrize("python", pythons())
@pytest.mark.parametrize("user", [None, NOBODY.pw_uid])
def test_install_into_a_bare_venv(python: str, user: Optional[int]) -> None:
    if not has_pip(python):
        pytest.skip(f"{python} has no pip to install with")
    if user is not None and os.geteuid() != 0:
        pytest.skip("installing as nobody needs root to switch")
    if user is not None:
        try:
            subprocess.run([python, "-c", "pass"], user=user, capture_output=True, timeout=60)
        except PermissionError:
            pytest.skip(f"{python} is not executable by nobody (under root's home)")
    before = tree(CLIENT)
    home = tempfile.mkdtemp(prefix="pyinstall-")
    try:
        if user is not None:
            os.chown(home, user, -1)
        venv = os.path.join(home, "venv")
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "PIP_NO_CACHE_DIR": "1",
               "PYTHONDONTWRITEBYTECODE": "1"}
        run = [[python, "-m", "venv", "--without-pip", venv],
               [python, "-m", "pip", "--python", os.path.join(venv, "bin", "python"),
                "install", "-q", "--no-index", str(CLIENT)],
               [os.path.join(venv, "bin", "python"), "-c",
                "import isolate_sandbox as m; print(m.__file__, m.__version__)"]]
        for argv in run:
            done = subprocess.run(argv, user=user, env=env, cwd=home, capture_output=True,
                                  text=True, timeout=300)
            assert done.returncode == 0, (argv, done.stdout, done.stderr)
        assert done.stdout.startswith(venv) and done.stdout.endswith(" 0.1.0\n"), done.stdout
        assert tree(CLIENT) == before  # no build/, no .egg-info, nothing
    finally:
        shutil.rmtree(home)
