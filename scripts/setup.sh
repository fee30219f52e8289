#!/bin/bash
# One command on a fresh Debian machine: install what isolate needs, build
# it, diagnose the host, and run a real sandboxed program.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "setup: run as root (sudo $0)" >&2; exit 2; }
# bubblewrap: the baseline `isolate bench` compares against. uidmap: a
# subordinate uid per box for users' runs without root (SECURITY.md).
# (An assignment of its own: a failure stops the script, where `export
# PATH="$(...):$PATH"` would go on with an empty entry first in PATH.)
godir=$(./scripts/deps.sh make bubblewrap uidmap)
export PATH="$godir:$PATH"
make build
./bin/isolate check
echo
echo "== a sandboxed run: CPU 1 s, memory 64 MiB, no network, read-only root"
./bin/isolate run --time 1 --mem 64M -- /bin/sh -c 'echo "hello from $(hostname), uid $(id -u), pid $$"; ls /'
echo
echo "== the same, with the JSON report"
./bin/isolate run --json --time 1 --mem 64M -- /bin/echo hello
