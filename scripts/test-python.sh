#!/bin/sh
# The Python client's checks: flake8, mypy, then pytest with coverage against the real isolate
# binary (root tests take the shared root-test lock). Fails under 90 % coverage of the package.
# Usage: sudo ./scripts/test-python.sh   (ISOLATE_BIN picks a binary; default bin/isolate)
set -eu
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=/usr/bin/python3
missing=""
for pkg in flake8 mypy python3-pytest python3-pytest-cov python3-setuptools; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >/dev/null
fi
[ -x "${ISOLATE_BIN:-bin/isolate}" ] || make build
export ISOLATE_BIN="${ISOLATE_BIN:-$REPO/bin/isolate}"
cd clients/python
# Coverage data outside the tree: nothing of a test run lands in the repository.
export COVERAGE_FILE="${TMPDIR:-/tmp}/isolate-python-coverage.$$"
trap 'rm -f "$COVERAGE_FILE"' EXIT
$PY -m flake8 src tests
$PY -m mypy src
# The root tests start boxes and the suite's leak check is machine-wide: hold the shared lock,
# unless the caller (scripts/test.sh under flock) already does.
set -- $PY -m pytest -q -p no:cacheprovider --cov=isolate_sandbox --cov-report=term-missing \
	--cov-fail-under=90 tests
if [ "${ISOLATE_ROOT_LOCK_HELD:-}" = 1 ]; then
	PYTHONPATH=src "$@"
else
	PYTHONPATH=src flock /tmp/isolate-root-tests.lock "$@"
fi
