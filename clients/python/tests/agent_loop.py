"""Thirty tasks an AI coding agent does, run as the caller the test picks: write a file, run it,
read what it made, fix a failing test, work with the standard library alone, start a server in the
background, keep state across cells, show a rich result, and so on, each checking its answer.

Run as ``python3 agent_loop.py KIND...`` (``fresh-cli``, ``fresh-service``, ``session``) with the
client on ``PYTHONPATH``; ``IMAGE`` names the image (none: the default). ``fresh-*``: each task
in a fresh box, the workspace a directory of the caller's own that the box gets a copy of and
whose files the box's commands made are collected back (SandboxRunner, execute_code); ``session``:
all of them in one Session. Prints one JSON line: ``{KIND: {task: null | "what went wrong"}}``.
"""

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

from isolate_sandbox import Sandbox, SandboxConfig, SandboxRunner, Session

IMAGE = os.environ.get("IMAGE") or None
# Bytes of output kept per stream: small, so a long test run is cut (head and tail).
OUTPUT_KB = 64
COLLECT = ["*", "*/*"]


@dataclasses.dataclass
class Outcome:
    """What a command or a piece of code gave, the same on every transport."""

    stdout: str = ""
    stderr: str = ""
    exit_code: Optional[int] = 0
    status: str = "OK"
    truncated: bool = False
    error: Optional[str] = None  # the exception's name, for code
    html: Optional[str] = None  # a rich result's HTML, when the transport has rich results


class Fresh:
    """Every call in a fresh box; the workspace lives on the host."""

    def __init__(self, backend: str) -> None:
        config = SandboxConfig.from_env(backend=backend, max_output_kb=OUTPUT_KB)
        self.sandbox, self.runner = Sandbox(config), SandboxRunner(config)
        self.work = tempfile.mkdtemp(prefix="agent-loop-")

    def close(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)

    def write(self, path: str, data: str) -> None:
        self.put(path, data.encode("utf-8"))

    def put(self, path: str, data: bytes) -> None:
        where = os.path.join(self.work, path)
        os.makedirs(os.path.dirname(where), exist_ok=True)
        with open(where, "wb") as f:
            f.write(data)

    def read(self, path: str) -> str:
        with open(os.path.join(self.work, path), encoding="utf-8") as f:
            return f.read()

    def sh(self, cmd: str, timeout: float = 30, env: Optional[Mapping[str, str]] = None) -> Outcome:
        r = self.runner.execute(cmd, self.work, timeout=timeout, env=env, image=IMAGE,
                                collect=COLLECT)
        for path, data in r.files.items():
            self.put(path, data)
        return Outcome(r.stdout, r.stderr, r.exit_code, r.status, r.truncated)

    def py(self, cells: Sequence[str], timeout: float = 30) -> Outcome:
        # A stateless call: the cells go together.
        r = self.sandbox.execute_code("\n".join(cells), timeout=timeout, image=IMAGE)
        error = r.exception.name if r.exception else (None if r.status == "OK" else r.status)
        return Outcome(r.stdout, r.stderr, r.exit_code, r.status, r.truncated, error)


class InSession:
    """Every call in one session: files, processes and the interpreter's state stay."""

    def __init__(self) -> None:
        self.sb = Session(image=IMAGE, timeout=300, output_limit_bytes=OUTPUT_KB << 10)

    def close(self) -> None:
        self.sb.kill()

    def write(self, path: str, data: str) -> None:
        self.sb.files.write(path, data)

    def read(self, path: str) -> str:
        text = self.sb.files.read(path)
        assert isinstance(text, str)
        return text

    def sh(self, cmd: str, timeout: float = 30, env: Optional[Mapping[str, str]] = None) -> Outcome:
        r = self.sb.commands.run(cmd, timeout=timeout, env=env)
        return Outcome(r.stdout, r.stderr, r.exit_code, r.status, r.truncated)

    def py(self, cells: Sequence[str], timeout: float = 30) -> Outcome:
        out = Outcome()
        for cell in cells:
            ex = self.sb.run_code(cell, timeout=timeout)
            out.stdout += ex.stdout
            out.stderr += ex.stderr
            out.truncated = out.truncated or ex.truncated
            html = [r.html for r in ex.results if r.html]
            out.html = html[0] if html else out.html
            if ex.error:
                out.error, out.status = ex.error.name, "RE"
                break
        return out


Agent = Union[Fresh, InSession]
TASKS: List[Callable[..., None]] = []


def task(fn: Callable[..., None]) -> Callable[..., None]:
    TASKS.append(fn)
    return fn


def eq(got: object, want: object) -> None:
    assert got == want, f"got {got!r}, want {want!r}"


@task
def write_a_script_and_run_it(a: Agent) -> None:
    a.write("hello.py", "import sys\nprint('hello,', sys.argv[1])\n")
    eq(a.sh("python3 hello.py agent").stdout, "hello, agent\n")


@task
def read_the_file_a_run_made(a: Agent) -> None:
    a.sh("python3 -c \"open('sum.txt', 'w').write(str(sum(range(101))))\"")
    eq(a.read("sum.txt"), "5050")


@task
def fix_a_failing_test(a: Agent) -> None:
    a.write("calc.py", "def add(a, b):\n    return a - b\n")
    a.write("test_calc.py", "import unittest\nfrom calc import add\n\n"
            "class T(unittest.TestCase):\n    def test_add(self):\n"
            "        self.assertEqual(add(2, 3), 5)\n\n"
            "if __name__ == '__main__':\n    unittest.main()\n")
    failed = a.sh("python3 -m unittest -q test_calc")
    assert failed.exit_code == 1 and "FAILED (failures=1)" in failed.stderr, failed
    # (Another size than the broken one's: a .pyc of the same second and size would stand.)
    a.write("calc.py", "def add(a, b):\n    return a + b  # not a - b\n")
    passed = a.sh("python3 -m unittest -q test_calc")
    assert passed.exit_code == 0 and passed.stderr.rstrip().endswith("OK"), passed


@task
def find_the_todos(a: Agent) -> None:
    a.write("src/a.py", "x = 1  # TODO: name it\n")
    a.write("src/b.py", "def f():\n    pass  # TODO: write it\n")
    eq(a.sh("grep -rn TODO src | sort").stdout,
       "src/a.py:1:x = 1  # TODO: name it\nsrc/b.py:2:    pass  # TODO: write it\n")


@task
def process_json(a: Agent) -> None:
    a.write("data.json", json.dumps({"items": [{"price": 3}, {"price": 4.5}]}))
    r = a.sh("python3 -c \"import json; d = json.load(open('data.json')); "
             "print(sum(i['price'] for i in d['items']))\"")
    eq(r.stdout, "7.5\n")


@task
def compute_in_code(a: Agent) -> None:
    eq(a.py(["import math", "print(math.factorial(20))"]).stdout, "2432902008176640000\n")


@task
def keep_state_across_cells(a: Agent) -> None:
    eq(a.py(["data = [3, 1, 2]", "data.sort()", "print(data, len(data))"]).stdout,
       "[1, 2, 3] 3\n")


@task
def name_the_exception(a: Agent) -> None:
    r = a.py(["config = {}", "config['missing']"])
    eq(r.error, "KeyError")


@task
def name_a_syntax_error(a: Agent) -> None:
    eq(a.py(["def f(:\n    pass"]).error, "SyntaxError")


@task
def query_with_the_standard_library(a: Agent) -> None:
    r = a.py(["import sqlite3", "db = sqlite3.connect(':memory:')",
              "db.execute('create table t (x)')\n"
              "db.executemany('insert into t values (?)', [(i,) for i in range(10)])",
              "print(db.execute('select sum(x), count(*) from t').fetchone())"])
    eq(r.stdout, "(45, 10)\n")


@task
def summarise_a_csv(a: Agent) -> None:
    a.write("sales.csv", "region,amount\nnorth,10\nsouth,5\nnorth,7\n")
    a.write("report.py", "import csv, collections\nt = collections.Counter()\n"
            "for row in csv.DictReader(open('sales.csv')):\n"
            "    t[row['region']] += int(row['amount'])\n"
            "for k, v in sorted(t.items()):\n    print(k, v)\n")
    eq(a.sh("python3 report.py").stdout, "north 17\nsouth 5\n")


@task
def count_with_a_pipeline(a: Agent) -> None:
    eq(a.sh("printf 'b\\na\\nb\\nc\\n' | sort | uniq -c | sort -rn | head -1").stdout.split(),
       ["2", "b"])


@task
def serve_in_the_background(a: Agent) -> None:
    a.write("page.txt", "served")
    fetch = ("for i in $(seq 100); do python3 -c 'import urllib.request as u; "
             "print(u.urlopen(\"http://127.0.0.1:8765/page.txt\").read().decode())' "
             "2>/dev/null && exit; sleep 0.1; done; exit 1")
    serve = "python3 -m http.server 8765 --bind 127.0.0.1"
    if isinstance(a, InSession):
        server = a.sb.commands.run(serve, background=True)
        try:
            eq(a.sh(fetch).stdout, "served\n")
        finally:
            server.kill()
        eq(server.wait(timeout=30).signal, 9)
    else:
        eq(a.sh(f"{serve} >/dev/null 2>&1 & ({fetch}); s=$?; kill $!; exit $s").stdout,
           "served\n")


@task
def see_an_exit_status(a: Agent) -> None:
    r = a.sh("echo partial; exit 7")
    eq((r.stdout, r.exit_code, r.status), ("partial\n", 7, "RE"))


@task
def keep_stdout_and_stderr_apart(a: Agent) -> None:
    r = a.sh("echo out; echo err >&2")
    eq((r.stdout, r.stderr), ("out\n", "err\n"))


@task
def stop_a_hung_command(a: Agent) -> None:
    eq(a.sh("sleep 30", timeout=1).status, "TO")


@task
def read_the_end_of_a_long_run(a: Agent) -> None:
    r = a.sh("python3 -c 'for i in range(100000): print(i)'")
    assert r.truncated and r.stdout.startswith("0\n1\n") and r.stdout.endswith("\n99999\n"), \
        (r.truncated, r.stdout[:20], r.stdout[-20:])
    assert "bytes cut ...]" in r.stdout


@task
def import_a_package_of_its_own(a: Agent) -> None:
    a.write("pkg/__init__.py", "")
    a.write("pkg/mod.py", "VALUE = 'from the package'\n")
    eq(a.sh("python3 -c 'import pkg.mod; print(pkg.mod.VALUE)'; ls pkg/*.py").stdout,
       "from the package\npkg/__init__.py\npkg/mod.py\n")


@task
def pass_an_environment_variable(a: Agent) -> None:
    eq(a.sh("echo \"$GREETING, $USER_NAME\"", env={"GREETING": "hi", "USER_NAME": "agent"})
       .stdout, "hi, agent\n")


@task
def keep_unicode_whole(a: Agent) -> None:
    a.write("naïve.txt", "héllo wörld ✓\n")
    eq(a.sh("cat naïve.txt").stdout, "héllo wörld ✓\n")


@task
def checksum_a_binary_file(a: Agent) -> None:
    r = a.sh("python3 -c \"open('blob.bin', 'wb').write(bytes(range(256)) * 4)\" && "
             "sha256sum blob.bin | cut -c1-64")
    eq(r.stdout.strip(), hashlib.sha256(bytes(range(256)) * 4).hexdigest())


@task
def edit_a_config_with_sed(a: Agent) -> None:
    a.write("app.ini", "[app]\ndebug = false\nport = 80\n")
    a.sh("sed -i 's/^debug = false/debug = true/' app.ini")
    eq(a.read("app.ini"), "[app]\ndebug = true\nport = 80\n")


@task
def diff_two_versions(a: Agent) -> None:
    a.write("old.txt", "a\nb\nc\n")
    a.write("new.txt", "a\nB\nc\n")
    r = a.sh("diff -u old.txt new.txt | tail -n +4")
    eq((r.stdout, r.exit_code), (" a\n-b\n+B\n c\n", 0))


@task
def show_a_rich_result(a: Agent) -> None:
    cells = ["class Table:\n    def _repr_html_(self):\n        return '<table><tr><td>1</td></tr>"
             "</table>'\n    def __repr__(self):\n        return 'Table()'",
             "Table()" if isinstance(a, InSession) else "print(Table()._repr_html_())"]
    r = a.py(cells)
    html = r.html if isinstance(a, InSession) else r.stdout.strip()
    eq(html, "<table><tr><td>1</td></tr></table>")


@task
def interrupt_a_runaway_loop(a: Agent) -> None:
    r = a.py(["n = 0\nwhile True:\n    n += 1"], timeout=1)
    assert r.error in ("TO", "KeyboardInterrupt"), r


@task
def feed_a_program_its_input(a: Agent) -> None:
    eq(a.sh("echo stressed | python3 -c 'print(input()[::-1])'").stdout, "desserts\n")


@task
def bump_a_version(a: Agent) -> None:
    a.write("VERSION", "1.2.3\n")
    a.write("bump.py", "p = open('VERSION').read().split('.')\np[-1] = str(int(p[-1]) + 1)\n"
            "open('VERSION', 'w').write('.'.join(p) + '\\n')\n")
    a.sh("python3 bump.py")
    eq(a.read("VERSION"), "1.2.4\n")


@task
def find_a_large_file(a: Agent) -> None:
    eq(a.sh("python3 -c \"open('big.log', 'w').write('x' * 100000)\"; "
            "find . -name '*.log' -size +50k").stdout, "./big.log\n")


@task
def work_out_statistics(a: Agent) -> None:
    eq(a.py(["import statistics", "xs = [2, 4, 4, 4, 5, 5, 7, 9]",
             "print(statistics.mean(xs), statistics.pstdev(xs))"]).stdout, "5 2.0\n")


@task
def pack_the_workspace(a: Agent) -> None:
    r = a.sh("tar czf /tmp/out.tgz hello.py calc.py && tar tzf /tmp/out.tgz | sort")
    eq(r.stdout, "calc.py\nhello.py\n")


def run(kind: str) -> Dict[str, Optional[str]]:
    agent: Agent = InSession() if kind == "session" else Fresh(kind.split("-", 1)[1])
    answers: Dict[str, Optional[str]] = {}
    try:
        for t in TASKS:
            try:
                t(agent)
                answers[t.__name__] = None
            except Exception as e:  # a task's failure is its answer; the loop goes on
                answers[t.__name__] = f"{type(e).__name__}: {e}"[:500]
    finally:
        agent.close()
    return answers


if __name__ == "__main__":
    print(json.dumps({kind: run(kind) for kind in sys.argv[1:]}))
