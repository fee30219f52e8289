#!/usr/bin/env python3
"""Where a running service's CPU per run goes: itself, or its boxes.

    scripts/service-cpu.py SOCKET PID [--seconds 10] [--clients 1]

Posts `/bin/true` runs to the isolate-serve API on the unix socket
SOCKET from CLIENTS threads (one keep-alive connection each) for SECONDS,
and prints the runs per second and, per run, the user and system time of
the service process PID itself and of the children it reaped (its boxes'
inits, with everything they reaped), from /proc/PID/stat before and
after, and the minor page faults of each. The clients' own CPU is not in
it. docs/PERFORMANCE.md (sessions J and K) gives figures from it.
"""
import argparse
import os
import sys
import threading
import time

# The Python client's own connection over a unix socket.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python", "src"))
from isolate_sandbox.service_transport import UnixHTTPConnection  # noqa: E402

BODY = b'{"commands":[{"args":["/bin/true"]}]}'


def times(pid):
    """utime, stime, cutime, cstime of pid, in clock ticks, then its
    minor faults and its reaped children's."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return [int(x) for x in fields[11:15]] + [int(fields[7]), int(fields[8])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("socket")
    ap.add_argument("pid", type=int)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--clients", type=int, default=1)
    args = ap.parse_args()
    runs, errors = [0], []
    lock = threading.Lock()

    def client(deadline):
        conn = UnixHTTPConnection(args.socket)
        try:
            while time.monotonic() < deadline:
                conn.request("POST", "/v1/run", BODY, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                body = resp.read()
                if resp.status != 200 or b'"status":"OK"' not in body:
                    raise RuntimeError(f"{resp.status} {body[:200]!r}")
                with lock:
                    runs[0] += 1
        except Exception as e:  # reported after the other clients
            errors.append(e)

    before, start = times(args.pid), time.monotonic()
    threads = [threading.Thread(target=client, args=(start + args.seconds,)) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after, took = times(args.pid), time.monotonic() - start
    if errors:
        raise errors[0]
    n = max(runs[0], 1)
    ms = [(b - a) * 1000 / os.sysconf("SC_CLK_TCK") / n for a, b in zip(before[:4], after[:4])]
    faults = [(b - a) / n for a, b in zip(before[4:], after[4:])]
    print(f"{args.clients} client(s): {runs[0] / took:.1f} runs/s; ms per run: service user {ms[0]:.2f} "
          f"system {ms[1]:.2f}; its boxes user {ms[2]:.2f} system {ms[3]:.2f}; total {sum(ms):.2f}; "
          f"minor faults per run: service {faults[0]:.0f}, boxes {faults[1]:.0f}")


if __name__ == "__main__":
    main()
