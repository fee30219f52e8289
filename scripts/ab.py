#!/usr/bin/env python3
"""Interleaved A/B timing of isolate command lines (the figures marked A/B in
docs/PERFORMANCE.md): each round runs every command once, in order, timing it
from spawn to reap.

    scripts/ab.py [--rounds N] 'CMD A' 'CMD B' ...

e.g. scripts/ab.py '/tmp/old/isolate run -- /bin/true' 'bin/isolate run -- /bin/true'.
A command may start with VAR=value words for its environment. The timer
includes Python's own spawn (about 0.1 ms on the project's VMs): compare the
commands with each other, not with other tables."""
import argparse, os, shlex, statistics, subprocess, time

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=300)
ap.add_argument("commands", nargs="+")
a = ap.parse_args()

cmds = []
for c in a.commands:
    words, env = shlex.split(c), dict(os.environ)
    while words and "=" in words[0] and not words[0].startswith("/"):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    cmds.append((c, words, env))
times = {c: [] for c, _, _ in cmds}
for _ in range(a.rounds):
    for c, words, env in cmds:
        t = time.perf_counter()
        subprocess.run(words, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times[c].append((time.perf_counter() - t) * 1000)
for c, _, _ in cmds:
    xs = sorted(times[c])
    print(f"median {statistics.median(xs):6.3f} ms  p25 {xs[len(xs)//4]:6.3f}  p75 {xs[3*len(xs)//4]:6.3f}  {c}")
