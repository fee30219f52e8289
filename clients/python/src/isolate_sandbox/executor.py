"""SandboxExecutor: call one method of a class defined by generated code, inside a box."""

import json
import os
import tempfile
from typing import Any, Dict, Optional

from .config import SandboxConfig, parse_mounts
from .errors import CallTimeoutError
from .result import disk_full, error_message, exception_of, run_report_of
from .sandbox import call_timeout_report, limits_from, select_transport
from .transport import RunRequest, Transport

# The largest result (as JSON) the driver returns; the copy of result.json is bounded by it
# plus twice the output kept.
MAX_RESULT_BYTES = 16 << 20

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
    if outcome["success"] and len(json.dumps(outcome["result"])) > req["max_result_bytes"]:
        outcome.update(success=False, result=None, result_is_repr=False, traceback=None,
                       error="ResultTooLarge: the result's JSON exceeds %d bytes"
                       % req["max_result_bytes"])
    outcome["stdout"] = cut(out.getvalue(), req)
    outcome["stderr"] = cut(err.getvalue(), req)
    with open("result.json", "w", encoding="utf-8") as f:
        json.dump(outcome, f)

def cut(text, req):
    """The client's head-and-tail cut (transport.TextSink), by bytes."""
    data, limit = text.encode("utf-8"), req["max_output_bytes"]
    if len(data) <= limit:
        return text
    head = {"head_tail": limit - limit // 2, "head": limit, "tail": 0}[req["keep"]]
    tail = limit - head
    out = data[:head].decode("utf-8", "replace")
    out += "\n[... %d bytes cut ...]\n" % (len(data) - head - tail)
    return out + (data[len(data) - tail:].decode("utf-8", "replace") if tail else "")

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
                method_params: Any = None, timeout_seconds: Optional[float] = None, *,
                image: Optional[str] = None, mounts: Any = None,
                disk_mb: Optional[int] = None, network: Any = None
                ) -> Dict[str, Any]:
        """Run the call; return ``{"success", "result", "error", "traceback", "stdout",
        "stderr", "result_is_repr"}``.

        ``method_params``: a dict (keyword arguments), a list (positional) or None. A result
        that is not JSON-serialisable comes back as its ``repr`` with ``result_is_repr`` True;
        an exception as ``error`` with the full ``traceback`` (and ``exception``: name, value);
        a box that ends otherwise (time, memory, a signal, ``os._exit``) as ``error`` saying
        so, with ``status`` set to the report's, on every transport. Output is cut as
        ``execute_code``'s is; a result over MAX_RESULT_BYTES is an error.
        """
        limits = limits_from(self.config, timeout_seconds, None, None, disk_mb, network)
        request_data = {"code": code_string, "class_name": class_name,
                        "method_name": method_name,
                        "params": {} if method_params is None else method_params,
                        "max_output_bytes": limits.max_output_bytes, "keep": limits.keep,
                        "max_result_bytes": MAX_RESULT_BYTES}
        payload = json.dumps(request_data)  # a TypeError here is the caller's
        with tempfile.TemporaryDirectory(prefix="isolate-executor-") as tmp:
            os.chmod(tmp, 0o755)  # isolate copies it in as the box user
            for name, text in (("driver.py", DRIVER), ("request.json", payload)):
                with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                    f.write(text)
            request = RunRequest(command=["python3", "driver.py"], limits=limits,
                                 image=image or self.image, copy_in=[(tmp, BOX_JOB)],
                                 copy_out=[RESULT_FILE], cwd=BOX_JOB,
                                 mounts=tuple(self.config.mounts)
                                 + tuple(parse_mounts(mounts)))
            try:
                outcome = self.transport.run(request)
                report, data = run_report_of(outcome.report), outcome.files.get(RESULT_FILE)
                lost = outcome.errors.get(RESULT_FILE)
            except CallTimeoutError as e:
                report, data, lost = call_timeout_report(e, False), None, None
        status = str(report.get("status", "XX"))
        if lost and status == "OK":  # the driver ended well: its result must come back
            status, report = "XX", dict(report, message=f"the result was not copied out: {lost}")
        stderr = str(report.get("stderr", ""))
        full = disk_full(report, stderr)
        if data is not None and status in ("OK", "RE") and not full:
            try:
                answer: Dict[str, Any] = json.loads(data)
                return answer
            except ValueError:
                status, report = "XX", dict(report, message="the driver's result.json is not "
                                            "valid JSON (the code wrote over it?)")
        info = None if full else exception_of(stderr)
        return {"success": False, "result": None, "result_is_repr": False,
                "error": (f"{info.name}: {info.value}" if info else
                          error_message(status, report, stderr, limits.timeout,
                                        limits.memory_mb, limits.disk_mb) or "no result"),
                "traceback": info.traceback if info else None, "status": status,
                "stdout": report.get("stdout", ""), "stderr": stderr}
