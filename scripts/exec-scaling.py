#!/usr/bin/env python3
"""How a bare exec of /bin/true scales over this machine's CPUs.

    scripts/exec-scaling.py [--seconds 3]

Runs loops of posix_spawn + waitpid of /bin/true for SECONDS: one loop
alone, two loops on two different CPUs, two loops on one CPU. Prints the
runs per second of all loops together and the children's CPU per run.
docs/PERFORMANCE.md quotes it: on the project's 2-CPU VMs the second CPU
makes every exec dearer (address-space work goes through the hypervisor,
which by these figures serializes it), which bounds what running boxes
side by side can gain.
"""
import argparse
import multiprocessing
import os
import time


def loop(cpu, seconds, out):
    os.sched_setaffinity(0, {cpu})
    devnull = os.open(os.devnull, os.O_RDWR)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, fd) for fd in (0, 1, 2)]
    before = os.times()
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        pid = os.posix_spawn("/bin/true", ["/bin/true"], {}, file_actions=actions)
        os.waitpid(pid, 0)
        n += 1
    after = os.times()
    cpu_s = (after.children_user + after.children_system
             - before.children_user - before.children_system)
    out.put((n, cpu_s))


def measure(cpus, seconds):
    q = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=loop, args=(c, seconds, q)) for c in cpus]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    runs = sum(n for n, _ in results)
    cpu = sum(c for _, c in results)
    return runs / seconds, 1000 * cpu / max(runs, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3)
    args = ap.parse_args()
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        raise SystemExit("needs two CPUs")
    a, b = mine[0], mine[1]
    print(f"bare exec of /bin/true, {args.seconds:g} s per case "
          "(runs/s of all loops; children's CPU ms per run)")
    cases = (("one loop", [a]), ("two loops, two CPUs", [a, b]), ("two loops, one CPU", [a, a]))
    for name, cpus in cases:
        rate, cpu = measure(cpus, args.seconds)
        print(f"  {name:22s} {rate:8.0f} {cpu:8.2f}")


if __name__ == "__main__":
    main()
