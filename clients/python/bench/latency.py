"""Latency of execute_code("pass") through the service and the cli transport, against a bare
`python3 -c pass`, interleaved round by round (as root; starts its own isolate-serve).

Usage: sudo PYTHONPATH=src python3 bench/latency.py [ROUNDS]   (from clients/python; make build)
"""

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

from isolate_sandbox import Sandbox, SandboxConfig
from isolate_sandbox.service_transport import service_answers

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.environ.get("ISOLATE_BIN") or os.path.join(REPO, "bin", "isolate")


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    tmp = tempfile.mkdtemp(prefix="pysvc-bench-")
    sock = os.path.join(tmp, "api.sock")
    serve = subprocess.Popen([os.path.join(os.path.dirname(BIN), "isolate-serve"), "--socket",
                              sock, "--store", os.path.join(tmp, "files")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not service_answers(sock):
            time.sleep(0.05)
        boxes = {"service": Sandbox(SandboxConfig(backend="service", socket_path=sock)),
                 "cli": Sandbox(SandboxConfig(backend="cli", isolate_bin=BIN))}
        times: Dict[str, List[float]] = {"service": [], "cli": [], "bare": []}
        for name, box in boxes.items():  # warm the image caches, not measured
            assert box.execute_code("pass").status == "OK"
        for _ in range(rounds):
            for name, box in boxes.items():
                t = time.perf_counter()
                r = box.execute_code("pass")
                times[name].append(time.perf_counter() - t)
                assert r.status == "OK", r.error
            t = time.perf_counter()
            subprocess.run(["/usr/bin/python3", "-c", "pass"], check=True)
            times["bare"].append(time.perf_counter() - t)
        for name, ts in times.items():
            ts.sort()
            print(f"{name:8} median {statistics.median(ts) * 1000:7.1f} ms  "
                  f"p90 {ts[int(0.9 * len(ts))] * 1000:7.1f} ms  min {ts[0] * 1000:7.1f} ms")
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
