"""SandboxExecutor: call one method of a class defined by generated code, inside a box."""

import json
import os
import tempfile
from typing import Any, Dict, Optional

from .config import SandboxConfig
from .result import error_message, run_report_of
from .sandbox import select_transport
from .transport import Limits, RunRequest, Transport

BOX_JOB = "/box/job"
RESULT_FILE = BOX_JOB + "/result.json"

# The driver runs in the box: it loads the code as a module, instantiates the class, calls the
# method, and writes the outcome to result.json, which the client copies out. Output the code
# prints is captured into the outcome, so stdout stays free of protocol.
DRIVER = r'''
import contextlib, io, json, linecache, sys, traceback, types

def main():
    with open("request.json", encoding="utf-8") as f:
        req = json.load(f)
    out, err = io.StringIO(), io.StringIO()
    outcome = {"success": False, "result": None, "error": None, "traceback": None,
               "result_is_repr": False}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            module = types.ModuleType("generated")
            module.__file__ = "generated.py"
            sys.modules["generated"] = module
            # Tracebacks quote the generated code's lines, as they would from a file.
            linecache.cache["generated.py"] = (len(req["code"]), None,
                                               req["code"].splitlines(True), "generated.py")
            exec(compile(req["code"], "generated.py", "exec"), module.__dict__)
            cls = getattr(module, req["class_name"])
            method = getattr(cls(), req["method_name"])
            params = req["params"]
            if isinstance(params, dict):
                value = method(**params)
            elif isinstance(params, list):
                value = method(*params)
            else:
                value = method(params)
        try:
            json.dumps(value, allow_nan=False)
            outcome["result"] = value
        except (TypeError, ValueError):
            outcome["result"], outcome["result_is_repr"] = repr(value), True
        outcome["success"] = True
    except BaseException as e:
        outcome["error"] = "%s: %s" % (type(e).__name__, e)
        outcome["traceback"] = traceback.format_exc()
    outcome["stdout"], outcome["stderr"] = out.getvalue(), err.getvalue()
    with open("result.json", "w", encoding="utf-8") as f:
        json.dump(outcome, f)

main()
'''


class SandboxExecutor:
    """Calls ``class_name().method_name(**params)`` of generated Python code in a fresh box.

    The box uses the ``python`` language image by default (``image="host"`` for the host's
    interpreter and libraries).
    """

    def __init__(self, config: Optional[SandboxConfig] = None, image: str = "python",
                 transport: Optional[Transport] = None, **overrides: Any) -> None:
        self.config = config or SandboxConfig.from_env(**overrides)
        self.image = image
        self.transport = transport if transport is not None else select_transport(self.config)

    def execute(self, code_string: str, class_name: str, method_name: str,
                method_params: Any = None, timeout_seconds: Optional[float] = None
                ) -> Dict[str, Any]:
        """Run the call; return ``{"success", "result", "error", "traceback", "stdout",
        "stderr", "result_is_repr"}``.

        ``method_params``: a dict (keyword arguments), a list (positional) or None. A result
        that is not JSON-serialisable comes back as its ``repr`` with ``result_is_repr`` True;
        an exception as ``error`` with the full ``traceback``; a box that ends otherwise (time,
        memory, crash) as ``error`` saying so, with ``status`` set to the report's.
        """
        request_data = {"code": code_string, "class_name": class_name,
                        "method_name": method_name,
                        "params": {} if method_params is None else method_params}
        payload = json.dumps(request_data)  # a TypeError here is the caller's
        seconds = self.config.timeout if timeout_seconds is None else float(timeout_seconds)
        limits = Limits(timeout=seconds, memory_mb=self.config.memory_mb,
                        max_output_bytes=self.config.max_output_bytes)
        with tempfile.TemporaryDirectory(prefix="isolate-executor-") as tmp:
            os.chmod(tmp, 0o755)  # isolate copies it in as the box user
            for name, text in (("driver.py", DRIVER), ("request.json", payload)):
                with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                    f.write(text)
            request = RunRequest(command=["python3", "driver.py"], limits=limits,
                                 image=self.image, copy_in=[(tmp, BOX_JOB)],
                                 copy_out=[RESULT_FILE], cwd=BOX_JOB)
            outcome = self.transport.run(request)
        report = run_report_of(outcome.report)
        data = outcome.files.get(RESULT_FILE)
        if data is not None and report.get("status") in ("OK", "RE"):
            answer: Dict[str, Any] = json.loads(data)
            return answer
        status = str(report.get("status", "XX"))
        return {"success": False, "result": None, "result_is_repr": False,
                "error": error_message(status, report, str(report.get("stderr", "")),
                                       seconds, limits.memory_mb) or "no result",
                "traceback": None, "status": status,
                "stdout": report.get("stdout", ""), "stderr": report.get("stderr", "")}
