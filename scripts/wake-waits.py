#!/usr/bin/env python3
"""How long a box's processes wait between being woken and running.

    perf record -a -e sched:sched_switch -e sched:sched_wakeup -o wake.data -- \\
        sh -c 'for i in $(seq 30); do sleep 0.05; isolate run -- /bin/true; done'
    perf script -i wake.data -F comm,tid,cpu,time,event,trace | scripts/wake-waits.py

(with a service taking the runs: ISOLATE_SERVICE_SOCKET or its default socket).
A box's processes are the ones whose name is a number (init runs from a
memfd, /proc/PID/fd/N) or "true" (the program). For each wake-up of one,
the time until the scheduler switches to it; then the median, p75, p90 and
the longest, and what ran on that CPU while the longest fifth waited.
docs/PERFORMANCE.md ("Session E") quotes it.
"""
import collections
import re
import statistics
import sys

HEADER = re.compile(r"\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)")


def boxed(comm):
    return comm.isdigit() or comm == "true"


def main():
    events = []
    for line in sys.stdin:
        m = HEADER.match(line)
        if m:
            comm, _, cpu, t, event, rest = m.groups()
            events.append((float(t), int(cpu), comm, event, rest))
    events.sort()
    waits = []  # (seconds, index of the wake-up, cpu it ran on)
    pending = {}  # pid -> (time woken, index)
    for i, (t, cpu, comm, event, rest) in enumerate(events):
        if event == "sched:sched_wakeup":
            m = re.search(r"comm=(\S+) pid=(\d+)", rest)
            if m and boxed(m.group(1)):
                pending[int(m.group(2))] = (t, i)
        elif event == "sched:sched_switch":
            m = re.search(r"next_pid=(\d+)", rest)
            if m and int(m.group(1)) in pending:
                woken, at = pending.pop(int(m.group(1)))
                waits.append((t - woken, at, i, cpu))
    if not waits:
        sys.exit("wake-waits: no wake-up of a box's process in the input")
    ms = sorted(w[0] * 1e3 for w in waits)
    q = statistics.quantiles(ms, n=20) if len(ms) > 1 else ms * 19
    print(f"{len(ms)} wake-ups of a box's processes; wait until running (ms): "
          f"median {statistics.median(ms):.3f}, p75 {q[14]:.3f}, p90 {q[17]:.3f}, max {ms[-1]:.3f}")
    # What held the CPU during the longest waits: the task switched to
    # before the woken one, over each wait's span.
    longest = sorted(waits, reverse=True)[:max(1, len(waits) // 5)]
    holders = collections.Counter()
    for wait, at, ran, cpu in longest:
        for t, c, comm, event, rest in events[at:ran]:
            if c == cpu and event == "sched:sched_switch":
                m = re.search(r"next_comm=(.+?) next_pid=", rest)
                if m:
                    name = m.group(1)
                    holders["a box's process" if boxed(name) else
                            "idle" if name.startswith("swapper") else name] += 1
    print("switched to on that CPU during the longest fifth:",
          ", ".join(f"{name} {n}" for name, n in holders.most_common(6)) or "nothing")


if __name__ == "__main__":
    main()
