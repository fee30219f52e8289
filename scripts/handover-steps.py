#!/usr/bin/env python3
"""Where a handed-over `isolate run` spends its time, from the scheduler's events.

    perf record -a -e sched:sched_process_fork -e sched:sched_process_exec \\
        -e sched:sched_process_exit -e sched:sched_switch -e sched:sched_wakeup \\
        -o steps.data -- sh -c 'for i in $(seq 80); do sleep 0.03; \\
            isolate run -- /bin/true >/dev/null 2>&1; done'
    perf script -i steps.data -F comm,pid,tid,cpu,time,event,trace \\
        | scripts/handover-steps.py

(with a service taking the runs: ISOLATE_SERVICE_SOCKET or its default
socket). A run starts when its caller forks the process that becomes
`isolate`; the steps end at: the CLI's exec, the program's exec and exit
(`true`), the program a zombie (its exit done), the CLI's last wake-up
after that (the service's answer; none when it did not sleep), the CLI's
exit, the CLI a zombie. Prints the median, p25 and p75 of each step over
the runs (the first three dropped), and what took the CPU from the CLI
while it exited. Only scheduler events are
recorded: tracing system calls as well would slow every step several
times over on a VM. docs/PERFORMANCE.md ("Session F") quotes it.
"""
import collections
import re
import statistics
import sys

LINE = re.compile(r"\s*(.+?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)")
STEPS = ["exec", "prog_exec", "prog_exit", "prog_zombie", "cli_wake", "cli_exit", "cli_zombie"]
NAMES = {
    "exec": "fork -> exec of isolate",
    "prog_exec": "-> the program's exec",
    "prog_exit": "-> the program's exit",
    "prog_zombie": "-> its exit done",
    "cli_wake": "-> the CLI woken with the exit",
    "cli_exit": "-> the CLI's exit",
    "cli_zombie": "-> its exit done",
}


def events(stream):
    for line in stream:
        m = LINE.match(line)
        if m:
            comm, _, tid, cpu, t, event, rest = m.groups()
            yield comm, int(tid), int(cpu), float(t), event.split(":")[-1], rest


def runs(evs):
    """Each run's step times (s since its fork) and the CLI's preemptions."""
    forks = {}  # child pid -> (index, time) of its fork
    starts = []  # (index, cli pid, fork time)
    for i, (comm, tid, cpu, t, event, rest) in enumerate(evs):
        if event == "sched_process_fork":
            m = re.search(r"child_pid=(\d+)", rest)
            if m:
                forks[int(m.group(1))] = (i, t)
        elif event == "sched_process_exec" and re.search(r"filename=\S*/isolate ", rest + " "):
            if tid in forks:
                starts.append((forks[tid][0], tid, forks[tid][1]))
    starts.sort()
    for k, (i0, cli, t0) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(evs)
        at, preempted = {}, collections.Counter()
        for comm, tid, cpu, t, event, rest in evs[i0:end]:
            if tid == cli and event == "sched_process_exec":
                at.setdefault("exec", t)
            elif tid == cli and event == "sched_process_exit":
                at["cli_exit"] = t
            elif (event == "sched_wakeup" and re.search(rf"\bpid={cli}\b", rest)
                  and "prog_zombie" in at and "cli_exit" not in at):
                at["cli_wake"] = t
            elif comm == "true" and event == "sched_process_exec":
                at["prog_exec"] = t
            elif comm == "true" and event == "sched_process_exit":
                at["prog_exit"] = t
            elif event == "sched_switch":
                if "prev_comm=true " in rest and "prev_state=Z" in rest:
                    at["prog_zombie"] = t
                if re.search(rf"prev_pid={cli}\b", rest):
                    if "prev_state=Z" in rest:
                        at["cli_zombie"] = t
                    elif "cli_exit" in at and "cli_zombie" not in at:
                        preempted[rest.split("next_comm=")[1].split(" next_pid")[0]] += 1
        yield {s: v - t0 for s, v in at.items()}, preempted


def main():
    evs = list(events(sys.stdin))
    rows = list(runs(evs))[3:]
    if not rows:
        sys.exit("no handed-over run found (a fork that became .../isolate)")
    print(f"{len(rows)} runs; ms, median (p25-p75)")
    before = None
    for step in STEPS:
        d = sorted(1000 * (r[step] - (r[before] if before else 0))
                   for r, _ in rows if step in r and (before is None or before in r))
        if d:
            q = lambda f: d[int(f * (len(d) - 1))]  # noqa: E731
            print(f"  {NAMES[step]:32s} {statistics.median(d):6.3f} ({q(.25):.3f}-{q(.75):.3f})")
        before = step
    total = collections.Counter()
    for _, p in rows:
        total.update(p)
    took = ", ".join(f"{c} {n}" for c, n in total.most_common(6))
    print("  the CLI's exit preempted by:", took or "nothing")


if __name__ == "__main__":
    main()
