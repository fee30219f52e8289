"""The ``local`` backend: a plain subprocess in a temporary directory. It isolates NOTHING.

It exists for trusted code and for machines without isolate, because callers' configurations
name it. The program runs as the caller, sees the caller's files and network; only the
environment is stripped and the time and output limits are applied.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .languages import SOURCE_NAMES
from .security import syntax_error_text
from .transport import (ExecRequest, Limits, OutputCallback, RunOutcome, RunRequest, TextSink,
                        kill_and_reap, pump)
from .cli_transport import read_bounded

WARNING = "the local sandbox backend isolates nothing: use it for trusted code only"

LOCAL_PATH = "/usr/local/bin:/usr/bin:/bin"

# Compile and run commands per language, run in the temporary directory.
COMMANDS: Dict[str, Dict[str, List[str]]] = {
    "python": {"run": [sys.executable, "main.py"]},
    "javascript": {"run": ["node", "main.js"]},
    "c": {"compile": ["gcc", "-O2", "-o", "main", "main.c", "-lm"], "run": ["./main"]},
    "cpp": {"compile": ["g++", "-std=c++20", "-O2", "-o", "main", "main.cpp"], "run": ["./main"]},
    "go": {"compile": ["go", "build", "-o", "main", "main.go"], "run": ["./main"]},
    "rust": {"compile": ["rustc", "-O", "-o", "main", "main.rs"], "run": ["./main"]},
    "java": {"compile": ["javac", "Main.java"], "run": ["java", "-cp", ".", "Main"]},
}


class LocalTransport:
    """Runs requests as plain subprocesses of the caller (no isolation; warns once)."""

    name = "local"

    def __init__(self) -> None:
        warnings.warn(WARNING, RuntimeWarning, stacklevel=3)

    def exec(self, request: ExecRequest, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None) -> Dict[str, Any]:
        """Compile (if the language compiles) and run the source in a temporary directory."""
        commands = COMMANDS[request.language]
        with tempfile.TemporaryDirectory(prefix="isolate-local-") as tmp:
            with open(os.path.join(tmp, SOURCE_NAMES[request.language]), "w",
                      encoding="utf-8") as f:
                f.write(request.source)
            if request.language == "python":
                try:
                    compile(request.source, "main.py", "exec")
                except SyntaxError as e:
                    message = f"SyntaxError: {syntax_error_text(e)}"
                    return {"status": "CE", "compile": None,
                            "run": compile_error(message)}
            if "compile" in commands:
                built = run_local(commands["compile"], tmp, request.env, request.limits,
                                  None, None, "")
                if built["status"] != "OK":
                    built["message"] = (built["stderr"] + built["stdout"]).strip() \
                        or built["message"]
                    return {"status": "CE" if built["status"] != "XX" else "XX",
                            "compile": built, "run": None}
            run = run_local(list(commands["run"]) + list(request.args), tmp, request.env,
                            request.limits, on_stdout, on_stderr, request.stdin)
            return {"status": run["status"], "compile": None, "run": run}

    def run(self, request: RunRequest, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None) -> RunOutcome:
        """Run the command in a temporary directory standing for /box (box paths map into it)."""
        with tempfile.TemporaryDirectory(prefix="isolate-local-") as tmp:
            def local(box_path: str) -> str:
                rel = os.path.relpath(os.path.normpath(box_path), "/box")
                if rel.startswith(".."):
                    raise ValueError(f"the local backend maps only /box, not {box_path!r}")
                return os.path.join(tmp, rel)
            for host, box in request.copy_in:
                if os.path.isdir(host):
                    shutil.copytree(host, local(box), symlinks=True)
                else:
                    shutil.copy(host, local(box))
            report = run_local(request.command, local(request.cwd), request.env,
                               request.limits, on_stdout, on_stderr, request.stdin)
            files = {box: data for box in request.copy_out
                     if (data := read_bounded(local(box))) is not None}
            return RunOutcome(report=report, files=files)


def compile_error(message: str) -> Dict[str, Any]:
    """A report for code that did not compile."""
    return {"status": "CE", "message": message, "exit_code": 1, "signal": 0, "stdout": "",
            "stderr": message, "stdout_truncated": False, "stderr_truncated": False,
            "wall_time": 0.0, "sandbox": {"image": "local"}}


def run_local(argv: Sequence[str], cwd: str, env: Mapping[str, str], limits: Limits,
              on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback],
              stdin: str) -> Dict[str, Any]:
    """Run argv in its own session, enforce the wall limit, kill its whole process group."""
    child_env = {"PATH": LOCAL_PATH, "HOME": cwd, "LANG": "C.UTF-8"}
    child_env.update(env)
    out = TextSink(on_stdout, limits.max_output_bytes)
    err = TextSink(on_stderr, limits.max_output_bytes)
    started = time.monotonic()
    stdin_file = tempfile.TemporaryFile()
    try:
        stdin_file.write(stdin.encode("utf-8"))
        stdin_file.seek(0)
        try:
            proc = subprocess.Popen(list(argv), cwd=cwd, env=child_env, stdin=stdin_file,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True, close_fds=True)
        except OSError as e:
            return {"status": "XX", "message": f"cannot start {argv[0]}: {e.strerror}",
                    "exit_code": 0, "signal": 0, "stdout": "", "stderr": "",
                    "stdout_truncated": False, "stderr_truncated": False, "wall_time": 0.0}
    finally:
        stdin_file.close()
    try:
        assert proc.stdout is not None and proc.stderr is not None
        finished = pump(proc, [(proc.stdout, out), (proc.stderr, err)],
                        started + limits.timeout)
        finished = finished and exited_by(proc.pid, started + limits.timeout)
    finally:
        # Kill the session we created (the leader is not reaped yet, so its group id cannot
        # have passed to anyone else): what the program left running dies with it.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        kill_and_reap(proc)
    status, code, sig = "OK", proc.returncode, 0
    if not finished:
        status = "TO"
    elif code < 0:
        status, sig, code = "SG", -code, 0
    elif code != 0:
        status = "RE"
    return {"status": status, "message": "", "exit_code": code, "signal": sig,
            "killed": not finished, "limit": "" if finished else "wall",
            "wall_time": time.monotonic() - started,
            "stdout": out.text, "stderr": err.text,
            "stdout_truncated": out.truncated, "stderr_truncated": err.truncated,
            "sandbox": {"image": "local"}}


def exited_by(pid: int, deadline: float) -> bool:
    """Wait until our child exits or the deadline passes, without reaping it."""
    while True:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
