#!/bin/bash
# The container recipe (deploy/Containerfile) on this machine with Debian's
# podman, as root (CI runs it), both targets started by deploy/run.sh with
# the privileges docs/INSTALL.md explains and no others:
#   - minimal (FROM scratch), the host's images bound in read-only: an
#     exec through the API in every language image the host has
#     (scripts/images.sh builds them in /var/lib/isolate/images), a run
#     through the API and one with the CLI inside, both in an image;
#   - full (Debian with debootstrap and squashfs-tools) over an images
#     directory of its own: `isolate image build python` and `isolate
#     image import` of the host's python image in the container, an exec
#     on each, a run without an image.
# Each is stopped (a clean drain, exit 0). Then nothing may be left: no
# container, no volume (podman makes none per run), no mount, no loop
# device, no cgroup in the subtrees deploy/run.sh gave. Everything made
# is removed; the base image stays cached.
#
# No registry is reachable here: the full target's base is made from the
# machine's own Debian mirror (debootstrap --variant=minbase, podman
# import) unless BASE names one that podman already has.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "container-test: [${SECONDS}s] $*"; }
fail() { echo "container-test: FAIL: $*" >&2; exit 1; }

# runc: crun (podman's first choice) refuses cgroup hybrid hosts whose v2
# hierarchy holds a controller, such as this one ("cgroups in hybrid
# mode not supported"); deploy/run.sh picks runc there.
godir=$(./scripts/deps.sh podman runc debootstrap curl) # (a failure stops here)
export PATH="$godir:$PATH"
make build

codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
base=${BASE:-localhost/isolate-base:$codename}
host_images=/var/lib/isolate/images
tmp=$(mktemp -d /tmp/isolate-container.XXXXXX)
name=isolate-test-$$
image=localhost/isolate-test:$$
minimal=localhost/isolate-test:$$-minimal
# The container's root on the host (deploy/run.sh).
root_id=200000
# A runtime for podman's own commands (build): as deploy/run.sh chooses.
runtime=
[ -s /sys/fs/cgroup/unified/cgroup.controllers ] && runtime=runc

# The volumes before, to compare with after (podman makes an anonymous
# volume for an image's VOLUME); the IDs of the containers run here, to
# look for their mounts after.
volumes_before=$(podman volume ls -q | sort)
ids=()

cleanup() {
	for c in "$name-minimal" "$name-full"; do
		podman rm -f -t 0 "$c" > /dev/null 2>&1 || true
		# Killed, the service leaves its boxes' cgroups (empty now).
		for d in /sys/fs/cgroup/isolate-container-"$c" /sys/fs/cgroup/*/isolate-container-"$c"; do
			[ ! -d "$d" ] || find "$d" -depth -type d -exec rmdir {} + 2> /dev/null || true
		done
	done
	podman rmi -f "$image" "$minimal" > /dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

langs=()
for def in langs/defs/*.json; do
	lang=$(basename "$def" .json)
	[ -f "$host_images/$lang.json" ] && langs+=("$lang")
done
[ ${#langs[@]} -gt 0 ] || fail "no language image in $host_images: build them first (scripts/images.sh)"
[ -f "$host_images/python.json" ] || fail "no python image in $host_images: build it first (scripts/images.sh python)"

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

log "podman build (minimal, full)"
podman build -q ${runtime:+--runtime "$runtime"} --target minimal -f deploy/Containerfile -t "$minimal" . \
	> "$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; fail "podman build --target minimal"; }
# The full target's RUN needs the host's network to reach the mirror.
podman build -q ${runtime:+--runtime "$runtime"} --network host --build-arg BASE="$base" -f deploy/Containerfile -t "$image" . \
	> "$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; fail "podman build"; }

# start CONTAINER IMAGE: deploy/run.sh, then wait for the socket.
start() {
	ISOLATE_CONTAINER_UID=$root_id deploy/run.sh "$2" "$1" "$tmp/run-$1" > /dev/null
	ids+=("$(podman inspect -f '{{.Id}}' "$1")")
	local volumes
	volumes=$(podman inspect -f '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}' "$1")
	[ -z "$volumes" ] || fail "$1 has volumes: $volumes"
	for _ in $(seq 300); do
		[ -S "$tmp/run-$1/api.sock" ] && return 0
		[ "$(podman inspect -f '{{.State.Running}}' "$1")" = true ] || { podman logs "$1"; fail "the service in $1 exited"; }
		sleep 0.1
	done
	podman logs "$1"
	fail "no socket from $1"
}

# stop CONTAINER: SIGTERM drains; exit 0; nothing left in its cgroups.
stop() {
	podman stop -t 60 "$1" > /dev/null
	local code
	code=$(podman inspect -f '{{.State.ExitCode}}' "$1")
	[ "$code" = 0 ] || { podman logs "$1"; fail "the service in $1 exited $code on SIGTERM"; }
	# Podman's own clean-up of the stopped container can still hold its
	# /dev/shm for a moment ("device or resource busy"): a few tries.
	for _ in 1 2 3 4 5; do podman rm "$1" > /dev/null 2>&1 && break; sleep 1; done
	podman container exists "$1" && podman rm "$1" > /dev/null
	deploy/cgroup-subtree.sh remove "isolate-container-$1" > /dev/null || fail "$1 left cgroups"
}

# post CONTAINER PATH BODY: the API's answer.
post() { curl -sS --unix-socket "$tmp/run-$1/api.sock" "http://isolate$2" -d "$3"; }

# expect_ok REPORT: a run's or an exec's status OK, stdout "hello".
expect_ok() {
	python3 -c '
import json, sys
r = json.loads(sys.argv[1])
r = r["results"][0] if "results" in r else r
out = (r.get("run") or {}).get("stdout") if "run" in r else r["stdout"]
assert r["status"] == "OK" and out == "hello\n", r' "$1"
}

# hello LANG: a program that prints hello.
hello() {
	case $1 in
	c) printf '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n' ;;
	cpp) printf '#include <iostream>\nint main() { std::cout << "hello" << std::endl; }\n' ;;
	go) printf 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello") }\n' ;;
	java) printf 'public class Main { public static void main(String[] a) { System.out.println("hello"); } }\n' ;;
	javascript) printf 'console.log("hello");\n' ;;
	python | python-data) printf 'print("hello")\n' ;;
	rust) printf 'fn main() { println!("hello"); }\n' ;;
	*) return 1 ;;
	esac
}

# exec_hello CONTAINER LANG: /v1/exec of hello in LANG.
exec_hello() {
	local src body
	src=$(hello "$2") || fail "no hello program for language $2: add one to hello()"
	body=$(python3 -c 'import json, sys; print(json.dumps({"lang": sys.argv[1], "source": sys.argv[2]}))' "$2" "$src")
	expect_ok "$(post "$1" /v1/exec "$body")" || fail "POST /v1/exec $2 in $1"
}

c=$name-minimal
log "minimal: podman run (deploy/run.sh), the host's images bound in read-only"
start "$c" "$minimal"
for lang in "${langs[@]}"; do
	log "minimal: exec $lang through the API"
	exec_hello "$c" "$lang"
done
log "minimal: a box through the API and one with the CLI in the container (image python)"
expect_ok "$(post "$c" /v1/run '{"commands":[{"image":"python","args":["/bin/sh","-c","echo hello"],"cpu_time_ms":1000,"memory_bytes":67108864}]}')" ||
	fail "POST /v1/run in $c"
expect_ok "$(podman exec "$c" isolate run --json --image python -t 1 -m 64M -- /bin/sh -c 'echo hello')" ||
	fail "isolate run in $c"
podman exec "$c" isolate check > "$tmp/check.log" || { cat "$tmp/check.log"; fail "isolate check in $c"; }
log "minimal: podman stop"
stop "$c"

c=$name-full
log "full: podman run (deploy/run.sh), an images directory of its own"
ISOLATE_CONTAINER_IMAGES=$tmp/images ISOLATE_CONTAINER_IMAGES_RW=1 start "$c" "$image"
log "full: isolate image build python in the container"
podman exec "$c" isolate image build python > "$tmp/image-build.log" 2>&1 ||
	{ tail -20 "$tmp/image-build.log"; fail "isolate image build python in $c"; }
exec_hello "$c" python
log "full: isolate image import of the host's python image in the container"
bin/isolate image export python "$tmp/python.img" > /dev/null
podman cp "$tmp/python.img" "$c:/tmp/python.img"
podman exec "$c" isolate image import /tmp/python.img > "$tmp/import.log" 2>&1 ||
	{ cat "$tmp/import.log"; fail "isolate image import in $c"; }
want=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["sha256"])' "$host_images/python.json")
got=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["sha256"])' "$tmp/images/python.json")
[ "$got" = "$want" ] || fail "after the import, $c's python image is $got, not the host's $want"
exec_hello "$c" python
log "full: a box without an image through the API"
expect_ok "$(post "$c" /v1/run '{"commands":[{"args":["/bin/sh","-c","echo hello"],"cpu_time_ms":1000,"memory_bytes":67108864}]}')" ||
	fail "POST /v1/run in $c"
log "full: podman stop"
stop "$c"

log "nothing left"
left=$(podman ps -a --filter "name=^$name-" --format '{{.Names}}')
[ -z "$left" ] || fail "containers left: $left"
[ "$(podman volume ls -q | sort)" = "$volumes_before" ] || fail "volumes left: $(podman volume ls)"
left=$(grep -F -e "$tmp" "${ids[@]/#/-e}" /proc/self/mountinfo || true)
[ -z "$left" ] || fail "mounts left: $left"
left=$(losetup -a | grep -F -e "$tmp" || true)
[ -z "$left" ] || fail "loop devices left: $left"
log "1 passed, 0 failed"
