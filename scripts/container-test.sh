#!/bin/bash
# The container recipe (deploy/Containerfile) on this machine with Debian's
# podman, as root (CI runs it): builds the image, starts the service in it
# with the privileges docs/INSTALL.md explains and no others, runs a box
# through its API from the host and one with the CLI inside, stops it (a
# clean drain), and checks that the cgroup subtree it was given is empty
# again. Everything it made is removed; the base image stays cached.
#
# No registry is reachable here: the base image is made from the
# machine's own Debian mirror (debootstrap --variant=minbase, podman
# import) unless BASE names one that podman already has.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "container-test: [${SECONDS}s] $*"; }
fail() { echo "container-test: FAIL: $*" >&2; exit 1; }

# runc: crun refuses cgroup hybrid hosts such as this one ("cgroups in
# hybrid mode not supported"); runc runs on v1, hybrid and v2.
export PATH="$(./scripts/deps.sh podman runc debootstrap curl):$PATH"
make build

codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
base=${BASE:-localhost/isolate-base:$codename}
tmp=$(mktemp -d /tmp/isolate-container.XXXXXX)
name=isolate-test-$$
image=localhost/isolate-test:$$
# The container's root on the host (deploy/run.sh).
root_id=200000
cleanup() {
	podman rm -f -t 0 "$name" > /dev/null 2>&1 || true
	podman rmi -f "$image" > /dev/null 2>&1 || true
	deploy/cgroup-subtree.sh remove "isolate-container-$name" > /dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

if ! podman image exists "$base"; then
	[ -z "${BASE:-}" ] || fail "podman has no image $BASE"
	# The mirror this machine's apt uses for its own release.
	mirror=$(apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Created-By: Packages' |
		awk -v s="$codename" '$1 == s {print $2; exit}')
	[ -n "$mirror" ] || fail "no apt mirror for $codename in this machine's apt sources"
	log "making the base image $base (debootstrap)"
	debootstrap --variant=minbase "$codename" "$tmp/base" "$mirror" > "$tmp/debootstrap.log" 2>&1 ||
		{ tail -20 "$tmp/debootstrap.log"; fail "debootstrap"; }
	tar -C "$tmp/base" -c . | podman import -q - "$base" > /dev/null
	rm -rf "$tmp/base"
fi

log "podman build"
# The build's RUN needs the host's network to reach the mirror.
podman build -q --runtime runc --network host --build-arg BASE="$base" -f deploy/Containerfile -t "$image" . \
	> "$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; fail "podman build"; }

log "podman run (deploy/run.sh)"
ISOLATE_CONTAINER_UID=$root_id deploy/run.sh "$image" "$name" "$tmp/run" > /dev/null
for _ in $(seq 300); do
	[ -S "$tmp/run/api.sock" ] && break
	[ "$(podman inspect -f '{{.State.Running}}' "$name")" = true ] || { podman logs "$name"; fail "the service exited"; }
	sleep 0.1
done
[ -S "$tmp/run/api.sock" ] || { podman logs "$name"; fail "no socket"; }

# expect_ok REPORT: status OK, stdout "hello".
expect_ok() {
	python3 -c '
import json, sys
r = json.loads(sys.argv[1])
r = r["results"][0] if "results" in r else r
assert r["status"] == "OK" and r["stdout"] == "hello\n", r' "$1"
}
log "a box through the API, from the host"
expect_ok "$(curl -sS --unix-socket "$tmp/run/api.sock" http://isolate/v1/run \
	-d '{"commands":[{"args":["/bin/sh","-c","echo hello"],"cpu_time_ms":1000,"memory_bytes":67108864}]}')" ||
	fail "POST /v1/run"
log "a box with the CLI in the container"
expect_ok "$(podman exec "$name" isolate run --json -t 1 -m 64M -- /bin/sh -c 'echo hello')" || fail "isolate run in the container"
podman exec "$name" isolate check > "$tmp/check.log" || { cat "$tmp/check.log"; fail "isolate check in the container"; }

log "podman stop"
podman stop -t 60 "$name" > /dev/null
code=$(podman inspect -f '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || { podman logs "$name"; fail "the service exited $code on SIGTERM"; }
# Podman's own clean-up of the stopped container can still hold its /dev/shm
# for a moment ("device or resource busy"): a few tries, then its error.
for _ in 1 2 3 4 5; do podman rm "$name" > /dev/null 2>&1 && break; sleep 1; done
podman container exists "$name" && podman rm "$name" > /dev/null
# The cgroup subtree deploy/run.sh gave it: nothing left in it.
deploy/cgroup-subtree.sh remove "isolate-container-$name" > /dev/null || fail "the container left cgroups"
log "1 passed, 0 failed"
