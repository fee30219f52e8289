#!/usr/bin/env python3
"""Where one API request's time goes, from the scheduler's tracepoints.

    scripts/api-phases.py SOCKET [--requests 60] [--gap-ms 20] [--program /bin/true]

Posts REQUESTS runs of PROGRAM to the isolate-serve API on the unix socket
SOCKET, one at a time on one keep-alive connection, GAP_MS apart, while
`perf record -a` takes the scheduler's switch, waking (in the waker's
context, unlike sched_wakeup, which a remote CPU may report), exec and
exit events. Then, per request, on the host's clock:

  request -> init woken    the client's request wakes the service, until
                           the service wakes the box's init (the command);
  init woken -> exec       until the program's execve has returned;
  exec -> exit             the program itself, up to its exit;
  exit -> answer           until the service wakes the client;
  answer -> client runs    until the client is on a CPU again;

and prints each phase's median and quartiles over the requests in which
every event was found. Then it runs PROGRAM itself as many times, bare,
and prints the same execve-to-exit figure for those runs. The box's init is the task with an all-digit name
(it runs from /proc/PID/fd/N) that the service wakes. Root; Linux perf.
docs/PERFORMANCE.md (session K) gives figures from it.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

# The Python client's own connection over a unix socket.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python", "src"))
from isolate_sandbox.service_transport import UnixHTTPConnection  # noqa: E402

EVENTS = ["sched:sched_switch", "sched:sched_waking", "sched:sched_process_exec", "sched:sched_process_exit"]
# perf script -F comm,tid,time,event,trace: "comm tid time: sched:event: fields".
LINE = re.compile(r"\s*(.+?)\s+(\d+)\s+([\d.]+):\s+sched:(\w+):(.*)")


def field(rest, name):
    m = re.search(r"(?<!\w)" + name + r"=(\S+)", rest)
    return m.group(1) if m else None


def phases(events, client, program, bare):
    """The phases of each request, from perf script's lines (the programs
    whose pid is in bare ran outside the service)."""
    out = []
    for i, (_, tid, t, ev, rest) in enumerate(events):
        if ev != "sched_process_exec" or field(rest, "filename") != program or tid in bare:
            continue
        # Back: the client's request, which wakes the service, and the
        # service's wake-up of init after it.
        j = i
        while j > 0 and not (events[j][1] == client and events[j][3] == "sched_waking"
                             and field(events[j][4], "comm") == "isolate-serve"):
            j -= 1
        k = next((k for k in range(j, i) if events[k][3] == "sched_waking"
                  and events[k][0] == "isolate-serve" and (field(events[k][4], "comm") or "").isdigit()), None)
        # Forward: the program's exit, the client's wake-up, its run.
        f = next((f for f in range(i, len(events))
                  if events[f][3] == "sched_process_exit" and events[f][1] == tid), None)
        if j == 0 or k is None or f is None:
            continue
        g = next((g for g in range(f, len(events)) if events[g][3] == "sched_waking"
                  and field(events[g][4], "pid") == str(client)), None)
        if g is None:
            continue
        h = next((h for h in range(g, len(events)) if events[h][3] == "sched_switch"
                  and field(events[h][4], "next_pid") == str(client)), None)
        if h is None:
            continue
        ms = lambda a, b: (events[b][2] - events[a][2]) * 1000  # noqa: E731
        out.append({"request -> init woken": ms(j, k), "init woken -> exec": ms(k, i), "exec -> exit": ms(i, f),
                    "exit -> answer": ms(f, g), "answer -> client runs": ms(g, h), "total": ms(j, h)})
    return out


def bare_runs(events, pids):
    """execve to exit, in ms, of the processes in pids."""
    execs, out = {}, []
    for _, tid, t, ev, rest in events:
        if tid in pids and ev == "sched_process_exec":
            execs[tid] = t
        elif tid in execs and ev == "sched_process_exit":
            out.append((t - execs.pop(tid)) * 1000)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("socket")
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--gap-ms", type=float, default=20)
    ap.add_argument("--program", default="/bin/true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("api-phases: needs root (perf record -a)")
    body = json.dumps({"commands": [{"args": [args.program]}]}).encode()
    conn = UnixHTTPConnection(args.socket)

    def post():
        conn.request("POST", "/v1/run", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200 or b'"status":"OK"' not in data:
            sys.exit(f"api-phases: {resp.status} {data[:300]!r}")

    for _ in range(5):  # warm: the page cache, the pool
        post()
    with tempfile.TemporaryDirectory(prefix="api-phases-") as tmp:
        data = os.path.join(tmp, "perf.data")
        rec = subprocess.Popen(["perf", "record", "-q", "-a", "-o", data]
                               + [a for e in EVENTS for a in ("-e", e)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bare = set()
        try:
            time.sleep(0.5)
            for _ in range(args.requests):
                post()
                time.sleep(args.gap_ms / 1000)
            for _ in range(args.requests):
                p = subprocess.Popen([args.program], stdout=subprocess.DEVNULL)
                bare.add(p.pid)
                p.wait()
                time.sleep(args.gap_ms / 1000)
        finally:
            rec.send_signal(signal.SIGINT)
            rec.wait()
        script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,time,event,trace"],
                                capture_output=True, text=True, check=True).stdout
    events = []
    for line in script.splitlines():
        m = LINE.match(line)
        if m:
            comm, tid, t, ev, rest = m.groups()
            events.append((comm.strip(), int(tid), float(t), ev, rest))
    rows = phases(events, os.getpid(), args.program, bare)
    if not rows:
        sys.exit("api-phases: no request had all its events")
    rows_bare = [{"exec -> exit": d} for d in bare_runs(events, bare)]

    def show(name, rows):
        v = sorted(r[name] for r in rows)
        print(f"  {name:24} median {statistics.median(v):7.3f}   p25 {v[len(v) // 4]:7.3f}"
              f"   p75 {v[3 * len(v) // 4]:7.3f}")

    print(f"{len(rows)} of {args.requests} requests of {args.program}, {args.gap_ms:g} ms apart (ms):")
    for name in rows[0]:
        show(name, rows)
    if rows_bare:
        print(f"{len(rows_bare)} of {args.requests} bare runs of {args.program} from this script (ms):")
        show("exec -> exit", rows_bare)


if __name__ == "__main__":
    main()
