#!/bin/bash
# The test command: go.mod tidy, vet, build a coverage-instrumented isolate, run every
# test as root against the real kernel, report statement coverage of the
# runtime packages (isolate with its box init, code contexts and hostfs;
# cgroup, seccomp, rootfs), which must stay at
# or above 80 %.
set -euo pipefail
cd "$(dirname "$0")/.."
# bubblewrap: the baseline the bench tests compare against (isolate
# bench itself installs nothing). redis-server: the queue's tests start
# their own; python3-redis: the Python client's queue transport. uidmap:
# newuidmap and newgidmap, which map a subordinate id as the box user of a
# run without root (TestRootlessSubordinateIDs). python3-pip: pip in a box
# downloads from a package index through a network allowlist. systemd
# (systemd-analyze) and squashfs-tools: scripts/unit-test.sh.
godir=$(./scripts/deps.sh bubblewrap redis-server python3-redis python3-pip uidmap systemd squashfs-tools) # (a failure stops here)
export PATH="$godir:$PATH"
# The MCP clients the MCP server is tested with (npm registry).
mcp_clients=$(./scripts/mcp-clients.sh) # (a failure stops here)
export ISOLATE_MCP_CLIENTS="$mcp_clients"
. scripts/cgo-env.sh
# initbin: every box of a long-running process (the service, the pool and
# server tests) starts the small init (isolate/boxinit/initbin), built first.
TAGS=urfave_cli_no_docs,netgo,osusergo,initbin
RUNTIME_PKGS=github.com/isolate-sandbox/isolate/isolate,github.com/isolate-sandbox/isolate/isolate/boxinit,github.com/isolate-sandbox/isolate/isolate/codecontext,github.com/isolate-sandbox/isolate/isolate/hostfs,github.com/isolate-sandbox/isolate/cgroup,github.com/isolate-sandbox/isolate/seccomp,github.com/isolate-sandbox/isolate/rootfs
MIN_COVERAGE=80

[ "$(id -u)" = 0 ] || { echo "test: run as root (the tests use namespaces, cgroups, mounts)" >&2; exit 2; }

echo "== go.mod and go.sum tidy"
go mod tidy -diff || { echo "go.mod or go.sum is not tidy: run go mod tidy" >&2; exit 1; }

echo "== the small init (scripts/build-init.sh)"
./scripts/build-init.sh

echo "== no build output tracked"
# (The tree holds sources: a binary committed by mistake fails here.)
elf=$(git ls-files -z | while IFS= read -r -d '' f; do
	[ -f "$f" ] && [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] && echo "$f"
done; true)
[ -z "$elf" ] || { echo "build outputs tracked in git: $elf" >&2; exit 1; }

echo "== vet and format"
go vet -tags "$TAGS" ./...
unformatted=$(gofmt -l $(git ls-files '*.go'))
[ -z "$unformatted" ] || { echo "gofmt needed: $unformatted" >&2; exit 1; }

echo "== the Kubernetes manifests (deploy/: a module of its own, with the API types)"
(cd deploy && go mod tidy -diff && go vet ./... && go test -count=1 ./...)

work=$(mktemp -d /tmp/isolate-test.XXXXXX)
chmod 0755 "$work" # the box user and the not-root test run binaries from here
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/cover"

echo "== build (coverage-instrumented)"
# (The main package must be instrumented too, or the binary never writes
# its counters.)
go build -tags "$TAGS" -cover -coverpkg="$RUNTIME_PKGS,github.com/isolate-sandbox/isolate/cmd/isolate" -o "$work/isolate" ./cmd/isolate
# The service, beside it: the Python client's tests start it from ISOLATE_BIN's directory.
go build -tags "$TAGS" -o "$work/isolate-serve" ./cmd/isolate-serve

echo "== language images (built once per machine, then cached)"
ISOLATE_BIN="$work/isolate" ./scripts/images.sh

echo "== tests"
ISOLATE_BIN="$work/isolate" ISOLATE_COVERDIR="$work/cover" \
	go test -tags "$TAGS" -count=1 -timeout 40m -cover -coverpkg="$RUNTIME_PKGS" ./... \
	-args -test.gocoverdir="$work/cover"

echo "== the CLI suite again, every run handed to a service (isolate-serve --cli-socket)"
# cmd/isolate's TestMain starts the service beside ISOLATE_BIN; runBox
# checks that each run went the way it expects (the report's sandbox.via).
ISOLATE_BIN="$work/isolate" ISOLATE_COVERDIR="$work/cover" ISOLATE_TEST_VIA=service \
	go test -tags "$TAGS" -count=1 -timeout 20m ./cmd/isolate

echo "== the system unit: its exposure (systemd-analyze, offline), the service under its confinement"
ISOLATE_BIN="$work/isolate" ./scripts/unit-test.sh

echo "== Python client (clients/python), against the same binary"
ISOLATE_BIN="$work/isolate" GOCOVERDIR="$work/cover" ./scripts/test-python.sh

echo "== coverage of the runtime packages"
go tool covdata percent -i "$work/cover" -pkg "$RUNTIME_PKGS" | tee "$work/cover.txt"
go tool covdata textfmt -i "$work/cover" -pkg "$RUNTIME_PKGS" -o "$work/cover.out"
mkdir -p coverage
go tool cover -func "$work/cover.out" > coverage/func.txt
cp "$work/cover.out" coverage/cover.out
total=$(awk '/^total:/ {sub("%","",$3); print $3}' coverage/func.txt)
echo "runtime statement coverage: ${total}%"
awk -v t="$total" -v m="$MIN_COVERAGE" 'BEGIN { exit !(t >= m) }' || { echo "coverage ${total}% is below ${MIN_COVERAGE}%" >&2; exit 1; }
