"""SandboxRunner and SandboxExecutor through the real isolate binary, as root."""

import pathlib

import pytest

from conftest import isolate_tmp, needs_root, open_fds
from isolate_sandbox import SandboxConfig, SandboxExecutor, SandboxRunner

pytestmark = needs_root


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("def double(x):\n    return 2 * x\n")
    (root / "test_pkg.py").write_text(
        "from pkg import double\n\ndef test_double():\n    assert double(2) == 4\n\n"
        "def test_fails():\n    assert double(1) == 3\n")
    return root


def test_runner_runs_pytest_on_a_copy(project: pathlib.Path) -> None:
    runner = SandboxRunner(SandboxConfig(backend="cli", max_output_kb=256, timeout=60))
    before = (open_fds(), isolate_tmp())
    r = runner.execute("python3 -m pytest -q -p no:cacheprovider; touch written", str(project))
    assert "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    assert r.exit_code == 0  # touch's status: the shell's last command
    assert not (project / "written").exists()  # the box wrote to its copy only
    assert (open_fds(), isolate_tmp()) == before


def test_runner_environment(project: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALLER_SECRET", "s3cret")
    monkeypatch.setenv("PASSED_ON", "p")
    runner = SandboxRunner(backend="cli")
    r = runner.execute("env | sort; exit 7", str(project), env={"GIVEN": "g"},
                       pass_env=["PASSED_ON", "NOT_SET_ANYWHERE"])
    names = {line.split("=", 1)[0] for line in r.stdout.splitlines()}
    assert "CALLER_SECRET" not in names and "NOT_SET_ANYWHERE" not in names
    assert {"PATH", "GIVEN", "PASSED_ON"} <= names
    assert "GIVEN=g" in r.stdout and "PASSED_ON=p" in r.stdout
    assert (r.status, r.exit_code) == ("RE", 7)


def test_runner_refuses_missing_project(tmp_path: pathlib.Path) -> None:
    runner = SandboxRunner(backend="cli")
    with pytest.raises(ValueError, match="does not exist"):
        runner.execute("true", str(tmp_path / "missing"))


def test_runner_leaves_nothing_when_it_raises(project: pathlib.Path) -> None:
    runner = SandboxRunner(backend="cli")
    before = (open_fds(), isolate_tmp())

    def stop(text: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.execute("echo started; sleep 30", str(project), on_stdout=stop)
    assert (open_fds(), isolate_tmp()) == before


def test_runner_timeout(project: pathlib.Path) -> None:
    r = SandboxRunner(backend="cli").execute("sleep 10", str(project), timeout=1)
    assert r.timed_out and r.error == "Code execution timed out after 1s"


CODE = """
class Calc:
    def add(self, a, b):
        print("adding")
        return a + b

    def as_set(self):
        return {1, 2}

    def fail(self):
        raise KeyError("missing")

    def spin(self):
        while True:
            pass
"""


@pytest.fixture
def executor() -> SandboxExecutor:
    return SandboxExecutor(SandboxConfig(backend="cli"))


def test_executor_keyword_and_positional(executor: SandboxExecutor) -> None:
    out = executor.execute(CODE, "Calc", "add", {"a": 2, "b": 3})
    assert out == {"success": True, "result": 5, "error": None, "traceback": None,
                   "result_is_repr": False, "stdout": "adding\n", "stderr": ""}
    assert executor.execute(CODE, "Calc", "add", [[1], [2]])["result"] == [1, 2]


def test_executor_not_serialisable(executor: SandboxExecutor) -> None:
    out = executor.execute(CODE, "Calc", "as_set")
    assert out["success"] and out["result"] == "{1, 2}" and out["result_is_repr"]


def test_executor_exception_with_traceback(executor: SandboxExecutor) -> None:
    out = executor.execute(CODE, "Calc", "fail")
    assert not out["success"] and out["error"] == "KeyError: 'missing'"
    assert out["traceback"].startswith("Traceback (most recent call last):")
    assert 'File "generated.py", line 11, in fail' in out["traceback"]
    assert 'raise KeyError("missing")' in out["traceback"]
    missing = executor.execute(CODE, "Nope", "add")
    assert missing["error"].startswith("AttributeError:")


def test_executor_timeout(executor: SandboxExecutor) -> None:
    out = executor.execute(CODE, "Calc", "spin", timeout_seconds=1)
    assert out["success"] is False and out["status"] == "TO"
    assert out["error"] == "Code execution timed out after 1s"


def test_executor_params_must_be_json(executor: SandboxExecutor) -> None:
    with pytest.raises(TypeError):
        executor.execute(CODE, "Calc", "add", {"a": object()})
