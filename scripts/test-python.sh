#!/bin/sh
# The Python client's checks: flake8, mypy, then pytest with coverage against the real isolate
# binary. Fails under 90 % coverage of the package.
# Usage: sudo ./scripts/test-python.sh   (ISOLATE_BIN picks a binary; default bin/isolate)
set -eu
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=/usr/bin/python3
# Debian's packages only: the Python package index is not reachable.
./scripts/deps.sh flake8 mypy python3-pytest python3-pytest-cov python3-pip >/dev/null
[ -x "${ISOLATE_BIN:-bin/isolate}" ] || make build
export ISOLATE_BIN="${ISOLATE_BIN:-$REPO/bin/isolate}"
cd clients/python
# Coverage data outside the tree: nothing of a test run lands in the repository.
export COVERAGE_FILE="${TMPDIR:-/tmp}/isolate-python-coverage.$$"
# The tests' own directories too (pytest keeps its last three runs' in
# /tmp/pytest-of-USER otherwise).
BASETEMP=$(mktemp -d "${TMPDIR:-/tmp}/isolate-python-tests.XXXXXX")
trap 'rm -f "$COVERAGE_FILE"; rm -rf "$BASETEMP"' EXIT
$PY -m flake8 src tests stdlib_backend.py
$PY -m mypy src tests stdlib_backend.py
PYTHONPATH=src $PY -m pytest -q -p no:cacheprovider --basetemp="$BASETEMP/t" --cov=isolate_sandbox \
	--cov-report=term-missing --cov-fail-under=90 tests
