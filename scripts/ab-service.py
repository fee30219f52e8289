#!/usr/bin/env python3
"""A/B of two builds of the service, as docs/PERFORMANCE.md measures them.

    scripts/ab-service.py OLD_DIR NEW_DIR [--blocks 4] [--runs 100] [--callers 1] [--gap MS]

Each DIR holds an `isolate` and an `isolate-serve` (`make build`'s bin/,
copied aside). Both services start side by side on sockets of their own
(--cli-socket taking their own isolate's runs); then, in alternating
blocks whose order flips every round, each block hands RUNS
`isolate run --json -- /bin/true` to one of them (--gap ms apart with one
caller, default 20, 0 for back to back; back to back with more) and
reports the median latency from spawn to reap, the median setup_time of
the reports, the runs per second, and the service's CPU per run: utime,
stime, cutime and cstime of /proc/PID/stat and of its live children, so
the service with its boxes, those built ahead included. Every run must
say it went through the service (sandbox.via).
With --stages it ends with each build's medians, over all its runs, of
the reports' stages (sandbox.stages) and of the box's cpu_time.
Stops both services and removes their directories, whatever happens.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """Seconds of CPU of pid and of the children it reaped."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3): utime..cstime are fields 14-17.
    return sum(int(x) for x in fields[11:15]) / TICK


def service_cpu(pid):
    """Seconds of CPU of pid with its children, reaped or not: counted at
    both ends of a block, a live child's CPU counts once (a box built
    ahead is alive at a block's end, reaped in the next)."""
    total = proc_cpu(pid)
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids = f.read().split()
        except FileNotFoundError:
            continue
        for kid in kids:
            try:
                total += proc_cpu(kid)
            except (FileNotFoundError, ProcessLookupError):
                pass  # reaped meanwhile: counted in pid's cutime
    return total


class Service:
    def __init__(self, name, bindir):
        self.name, self.bindir = name, os.path.abspath(bindir)
        self.dir = tempfile.mkdtemp(prefix=f"ab-service-{name}-")
        self.cli = os.path.join(self.dir, "cli.sock")
        self.reports = []  # of the counted runs (block)
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(self.bindir, "isolate-serve"),
             "--socket", os.path.join(self.dir, "api.sock"),
             "--cli-socket", self.cli,
             "--cli-binary", os.path.join(self.bindir, "isolate"),
             "--store", os.path.join(self.dir, "files")],
            stdout=self.log, stderr=self.log)
        for _ in range(200):
            if os.path.exists(self.cli):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        sys.exit(f"ab-service: {name}'s isolate-serve did not start (log in {self.dir})")

    def run_once(self):
        env = dict(os.environ, ISOLATE_SERVICE_SOCKET=self.cli)
        env.pop("ISOLATE_NO_SERVICE", None)
        start = time.perf_counter()
        argv = [os.path.join(self.bindir, "isolate"), "run", "--json", "--", "/bin/true"]
        out = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        took = time.perf_counter() - start
        report = json.loads(out.stdout)
        if report.get("status") != "OK" or report.get("sandbox", {}).get("via") != "service":
            raise RuntimeError(f"{self.name}: a run did not go through the service: "
                               f"{out.stdout[:300]!r}")
        self.reports.append(report)
        return took, report["sandbox"]["setup_time"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def block(svc, runs, callers, gap):
    """One block: (median latency s, median setup s, runs/s, CPU s per run)."""
    times, setups, errors = [], [], []
    cpu0, t0 = service_cpu(svc.proc.pid), time.perf_counter()

    def caller(n):
        try:
            for _ in range(n):
                took, setup = svc.run_once()
                times.append(took)
                setups.append(setup)
                if callers == 1 and gap > 0:
                    time.sleep(gap)  # the pool refills between runs
        except Exception as e:  # reported below, after the other callers
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(runs // callers,)) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    wall, cpu = time.perf_counter() - t0, service_cpu(svc.proc.pid) - cpu0
    return statistics.median(times), statistics.median(setups), len(times) / wall, cpu / len(times)


def print_stages(services):
    """Each build's medians (ms) of its reports' stages and box CPU."""
    def values(svc, key):
        if key == "cpu_time":
            return [r["cpu_time"] for r in svc.reports]
        return [r["sandbox"]["stages"][key] for r in svc.reports if key in r["sandbox"].get("stages", {})]
    keys = sorted({k for svc in services for r in svc.reports for k in r["sandbox"].get("stages", {})})
    print(f"{'stage (median ms)':>18}" + "".join(f"{svc.name:>9}" for svc in services))
    for key in keys + ["cpu_time"]:
        cells = [values(svc, key) for svc in services]
        print(f"{key:>18}" + "".join(f"{statistics.median(c) * 1e3:>9.3f}" if c else f"{'-':>9}" for c in cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--callers", type=int, default=1)
    ap.add_argument("--gap", type=float, default=20, help="ms between one caller's runs")
    ap.add_argument("--stages", action="store_true", help="end with the medians of the reports' stages")
    a = ap.parse_args()
    if a.blocks < 1 or a.runs < a.callers or a.callers < 1 or not 0 <= a.gap < 60000:
        sys.exit("ab-service: --blocks and --callers at least 1, --runs at least --callers, "
                 "--gap from 0 to 60000")
    services = []
    try:
        for name, bindir in (("old", a.old), ("new", a.new)):
            services.append(Service(name, bindir))
        for s in services:  # warm: the pool, the page cache
            for _ in range(10):
                s.run_once()
            s.reports.clear()
        spacing = f"{a.gap:g} ms apart" if a.callers == 1 and a.gap > 0 else "back to back"
        print(f"{a.blocks} rounds of {a.runs} handed-over `isolate run -- /bin/true` per build, "
              f"{a.callers} caller(s), runs {spacing}, order flipped each round")
        print(f"{'round':>5} {'build':>5} {'median ms':>10} {'setup ms':>9} {'runs/s':>8} "
              f"{'CPU ms/run':>11}")
        for r in range(a.blocks):
            for s in (services if r % 2 == 0 else services[::-1]):
                med, setup, rate, cpu = block(s, a.runs, a.callers, a.gap / 1e3)
                print(f"{r + 1:>5} {s.name:>5} {med * 1e3:>10.2f} {setup * 1e3:>9.2f} "
                      f"{rate:>8.1f} {cpu * 1e3:>11.2f}", flush=True)
        if a.stages:
            print_stages(services)
    finally:
        for s in services:
            s.stop()


if __name__ == "__main__":
    main()
