"""The local backend: plain subprocesses, no isolation (no root needed)."""

import os
import pathlib
import tempfile
import time
import warnings

import pytest

from isolate_sandbox import Sandbox, SandboxConfig, SandboxRunner
from isolate_sandbox.local_transport import LocalTransport, run_local
from isolate_sandbox.transport import Limits, RunRequest


@pytest.fixture
def local() -> Sandbox:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Sandbox(SandboxConfig.from_env(backend="local", import_mode="warn"))


def test_runs_python(local: Sandbox) -> None:
    r = local.execute_code("import sys\nprint(input())\nprint('e', file=sys.stderr)\nsys.exit(3)",
                           stdin="hello\n")
    assert (r.status, r.exit_code, r.stdout, r.stderr) == ("RE", 3, "hello\n", "e\n")
    assert r.error == "Exited with status 3"
    assert r.meta.runtime == "local"


def test_syntax_error_is_ce(local: Sandbox) -> None:
    r = local.execute_code("print(")
    assert r.status == "CE" and "SyntaxError" in r.stderr


def test_timeout_kills_the_group(local: Sandbox, tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "late"
    # A child in the background would write the marker after the parent is killed.
    code = (f"import subprocess, time\nsubprocess.Popen(['sh', '-c', 'sleep 2; touch {marker}'])"
            "\ntime.sleep(30)")
    r = local.execute_code(code, timeout=0.5)
    assert r.timed_out and r.status == "TO"
    assert r.error == "Code execution timed out after 0.5s"
    time.sleep(2.5)  # past the child's sleep: it would have written by now
    assert not marker.exists()


def test_truncation(local: Sandbox) -> None:
    r = local.execute_code("print('x' * 5000)", max_output_kb=1)
    assert r.truncated and r.meta.truncated
    assert r.stdout == "x" * 512 + "\n[... 3977 bytes cut ...]\n" + "x" * 511 + "\n"


def test_signal(local: Sandbox) -> None:
    r = local.execute_code("import os, signal\nos.kill(os.getpid(), signal.SIGABRT)")
    assert r.status == "SG" and r.error == "Killed by signal 6"


def test_environment_stripped(local: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALLER_SECRET", "s3cret")
    r = local.execute_code("import os\nprint(os.environ.get('CALLER_SECRET'), sorted(os.environ))",
                           env={"GIVEN": "1"})
    assert r.stdout.startswith("None ") and "GIVEN" in r.stdout


def test_compiled_language(local: Sandbox) -> None:
    if not os.path.exists("/usr/bin/gcc"):
        pytest.skip("needs gcc on the host")
    ok = local.execute_code('#include <stdio.h>\nint main(){puts("c");}', "c")
    assert (ok.status, ok.stdout) == ("OK", "c\n")
    bad = local.execute_code("int main(){ return x; }", "c")
    assert bad.status == "CE" and "x" in bad.stderr


def test_missing_program_is_xx() -> None:
    report = run_local(["/nonexistent/prog"], "/", {}, Limits(1, 64, 100), None, None, "")
    assert report["status"] == "XX" and "cannot start /nonexistent/prog" in report["message"]


def test_runner_and_copy_out(tmp_path: pathlib.Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "a.txt").write_text("A")
    with pytest.warns(RuntimeWarning):
        runner = SandboxRunner(SandboxConfig(backend="local"))
    r = runner.execute("cat a.txt; pwd", str(tmp_path / "proj"))
    assert r.status == "OK" and r.stdout.startswith("A")
    assert not (tmp_path / "proj" / "out").exists()
    with pytest.warns(RuntimeWarning):
        transport = LocalTransport()
    outcome = transport.run(RunRequest(["sh", "-c", "echo hi > o.txt"], Limits(5, 64, 100),
                                       copy_in=[(str(tmp_path / "proj" / "a.txt"), "/box/a")],
                                       copy_out=["/box/o.txt", "/box/none"]))
    assert outcome.files == {"/box/o.txt": b"hi\n"}
    with pytest.raises(ValueError, match="maps only /box"):
        transport.run(RunRequest(["true"], Limits(5, 64, 100), cwd="/etc"))
    assert not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("isolate-local-")]
