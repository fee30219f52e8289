#!/bin/bash
# The Kubernetes manifests (deploy/kubernetes) run, not only decoded: the
# DaemonSet's pod, as one node's kubelet would run it, under
# `podman kube play` with runc (Debian's podman; crun refuses hybrid
# hosts), as root (CI runs it after container-test.sh). It checks that the
# init container provisions the node's images, the pod starts, its
# readiness and liveness probes pass, a queue job (an exec in the python
# image) runs, /v1/run works on the pod's socket and on its TCP API with
# the token, the preStop hook drains, and `podman kube down` leaves no
# container, pod, volume, cgroup or mount.
#
# What differs from a cluster, and why (deploy/kubeplay prints each):
#   - podman 4.3 knows no DaemonSet, ConfigMap environment, spec.nodeName
#     or $(VAR): deploy/kubeplay makes the Pod the kubelet would, from
#     the manifests themselves;
#   - podman 4.3 mounts no Secret volume (hostPath, emptyDir and
#     persistentVolumeClaim only): the Secret is a host directory laid out
#     here exactly as the kubelet lays one out (token -> ..data/token,
#     ..data -> ..TIMESTAMP/, files mode 0400);
#   - /var/lib/isolate and /run/isolate are directories of this test's
#     (the host's own images and boxes stay untouched; the socket is
#     reachable from here); /var/lib/isolate starts with copies of this
#     machine's built images (squashfs and manifest) of the languages the
#     init container names, so its `isolate image build` finds them
#     current, builds nothing (building takes minutes per image) and
#     unpacks their trees;
#   - the pod joins the host's network (the Redis started here listens on
#     loopback), so --listen moves to a free loopback port;
#   - the kubelet's exec probes and preStop hook are run here as it runs
#     them: the manifest's commands, exec'd in the container;
#   - podman's default rlimits are lowered to this host's hard limits,
#     and its init containers run at each start of the pod (type
#     "always", as the kubelet runs them) and stay until the pod goes.
#
# The image is built as scripts/container-test.sh builds it (same base,
# same recipe); everything made is removed, the base image stays cached.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "kube-test: [${SECONDS}s] $*"; }
fail() { echo "kube-test: FAIL: $*" >&2; exit 1; }

# catatonit: podman builds its pods' pause image from it.
godir=$(./scripts/deps.sh podman runc catatonit debootstrap curl redis-server) # (a failure stops here)
export PATH="$godir:$PATH"
make build

codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
base=${BASE:-localhost/isolate-base:$codename}
tmp=$(mktemp -d /tmp/isolate-kube.XXXXXX)
image=localhost/isolate-kube-test:$$
pod=isolate-worker
redis_pid=
# runc: crun refuses cgroup hybrid hosts ("cgroups in hybrid mode not
# supported"); runc runs on v1, hybrid and v2.
podman() { command podman --runtime runc "$@"; }
# podman's default rlimits (nofile 1048576) may exceed what this host
# allows, and kube play takes no --ulimit: its configuration's defaults
# are this host's hard limits (as deploy/run.sh asks).
nproc=$(ulimit -Hu)
[ "$nproc" = unlimited ] || [ "$nproc" -le 32768 ] || nproc=32768
nofile=$(ulimit -Hn)
printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' "$nofile" "$nofile" "$nproc" "$nproc" > "$tmp/containers.conf"
export CONTAINERS_CONF=$tmp/containers.conf
cgparent=
# podman 4.3 (cgroupfs) leaves a pod's own cgroup in the hierarchies it
# does not manage (name=systemd, a hybrid host's unified): each one left
# empty is removed and said; one that holds a cgroup or a process is
# printed, a leak.
pod_cgroups() {
	local d
	[ -n "$cgparent" ] || return 0
	for d in $(find /sys/fs/cgroup -maxdepth 3 -type d -path "*$cgparent" 2> /dev/null); do
		if [ -n "$(find "$d" -mindepth 1 -type d | head -1)" ] || [ -n "$(cat "$d/cgroup.procs")" ]; then
			echo "$d"
		else
			rmdir "$d" && echo "kube-test: note: podman left the pod's empty cgroup $d: removed" >&2
		fi
	done
}
cleanup() {
	if [ -f "$tmp/pod.yaml" ]; then podman kube down "$tmp/pod.yaml" > /dev/null 2>&1 || true; fi
	podman pod rm -f -t 0 "$pod" > /dev/null 2>&1 || true
	pod_cgroups > /dev/null
	podman rmi -f "$image" > /dev/null 2>&1 || true
	[ -z "$redis_pid" ] || { kill "$redis_pid" 2> /dev/null; wait "$redis_pid" 2> /dev/null || true; }
	rm -rf "$tmp"
}
trap cleanup EXIT
podman pod exists "$pod" && fail "a pod $pod exists already: this test needs the name"

# --- The image, as scripts/container-test.sh builds it.
# A recipe with a base image (ARG BASE) gets one made from the mirror.
if grep -q '^ARG BASE' deploy/Containerfile && ! podman image exists "$base"; then
	[ -z "${BASE:-}" ] || fail "podman has no image $BASE"
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
podman build -q --network host --build-arg BASE="$base" -f deploy/Containerfile -t "$image" . \
	> "$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; fail "podman build"; }

# --- Redis on loopback, on a free port.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
	> "$tmp/redis.log" 2>&1 &
redis_pid=$!
rcli() { redis-cli -p "$redis_port" "$@"; }
for _ in $(seq 100); do rcli ping > /dev/null 2>&1 && break; sleep 0.1; done
rcli ping > /dev/null || fail "redis-server did not start: $(cat "$tmp/redis.log")"

# --- The Secret, as the kubelet lays out a Secret volume (defaultMode 0400).
token=$(head -c 32 /dev/urandom | base64 | tr -d '/+=')
stamp=..$(date -u +%Y_%m_%d_%H_%M_%S).$$
mkdir -p "$tmp/secret/$stamp" "$tmp/state/images" "$tmp/run"
printf '%s\n' "$token" > "$tmp/secret/$stamp/token"
printf 'redis://127.0.0.1:%s/0\n' "$redis_port" > "$tmp/secret/$stamp/queue-url"
chmod 0400 "$tmp/secret/$stamp"/*
ln -s "$stamp" "$tmp/secret/..data"
for key in token queue-url; do ln -s "..data/$key" "$tmp/secret/$key"; done

# --- The pod.
api_port=$(free_port)
(cd deploy && go run ./kubeplay -image "$image" -secret "$tmp/secret" -state "$tmp/state" -run "$tmp/run" \
	-listen "127.0.0.1:$api_port" -node kube-test -pod "$tmp/pod.yaml" -hooks "$tmp/hooks")
ctr=$(sed -n 's/^container //p' "$tmp/hooks")
hook() { sed -n "s/^$1 //p" "$tmp/hooks"; }

# The node's /var/lib/isolate, with this machine's images of the
# languages the init container builds.
langs=$(hook images)
[ -n "$langs" ] || fail "no init container that builds images in the DaemonSet"
for lang in $langs; do
	for f in "/var/lib/isolate/images/$lang.json" "/var/lib/isolate/images/$lang.sqfs"; do
		[ -f "$f" ] || fail "no $f: build the images first (scripts/images.sh)"
		cp --reflink=auto "$f" "$tmp/state/images/"
	done
done
volumes_before=$(podman volume ls -q | sort)

log "podman kube play"
podman kube play "$tmp/pod.yaml" > "$tmp/play.log" 2>&1 || { cat "$tmp/play.log"; fail "podman kube play"; }
ids=$(podman ps -a --pod --filter "pod=$pod" --format '{{.ID}}')
infra=$(podman pod inspect -f '{{.InfraContainerID}}' "$pod" 2> /dev/null || true)
cgparent=$(podman pod inspect -f '{{.CgroupPath}}' "$pod")
[ -n "$cgparent" ] || fail "the pod $pod has no cgroup"
# The init container ran and exited 0 (else the pod would not have
# started): each image is in place, with the tree it unpacks from the
# image's squashfs.
for init in $(hook init); do
	code=$(podman inspect -f '{{.State.ExitCode}}' "$init")
	[ "$code" = 0 ] || { podman logs "$init"; fail "the init container $init exited $code"; }
done
for lang in $langs; do
	ls -d "$tmp/state/images/trees/$lang"-* > /dev/null 2>&1 ||
		fail "the init container left no tree of $lang in /var/lib/isolate/images/trees: $(cat "$tmp/play.log")"
done
log "init container: exit 0, the images of $langs current, their trees unpacked"

sock=$tmp/run/api.sock
for _ in $(seq 300); do
	[ -S "$sock" ] && break
	[ "$(podman inspect -f '{{.State.Running}}' "$ctr")" = true ] || { podman logs "$ctr"; fail "the service exited"; }
	sleep 0.1
done
[ -S "$sock" ] || { podman logs "$ctr"; fail "no socket $sock"; }

# The kubelet runs an exec probe until it passes (readiness: each
# periodSeconds; the self-test makes a box first).
probe() {
	local name=$1 cmd
	cmd=$(hook "$name")
	[ -n "$cmd" ] || fail "no $name probe in the manifest"
	for _ in $(seq 60); do
		eval "podman exec $ctr $cmd" > "$tmp/$name.log" 2>&1 && { log "$name probe: passed"; return; }
		sleep 1
	done
	cat "$tmp/$name.log"
	podman logs "$ctr" | tail -20
	fail "the $name probe did not pass"
}
probe readiness
probe liveness

log "a job through the queue (exec in the python image)"
rcli XADD isolate:jobs '*' id kube-test-1 endpoint exec \
	body '{"lang":"python","source":"print(input()[::-1])","stdin":{"text":"olleh\n"}}' > /dev/null
for _ in $(seq 120); do
	[ -n "$(rcli HGET isolate:result:kube-test-1 status)" ] && break
	sleep 0.5
done
status=$(rcli HGET isolate:result:kube-test-1 status)
body=$(rcli HGET isolate:result:kube-test-1 body)
worker=$(rcli HGET isolate:result:kube-test-1 worker)
[ "$status" = 200 ] || { podman logs "$ctr" | tail -20; fail "queue job: status '$status', body $body"; }
python3 -c '
import json, sys
r = json.loads(sys.argv[1])
assert r["status"] == "OK" and r["run"]["stdout"] == "hello\n", r' "$body" || fail "queue job: $body"
[ "$worker" = kube-test ] || fail "queue job answered by '$worker', want the pod's --queue-name kube-test"

expect_ok() {
	python3 -c '
import json, sys
r = json.loads(sys.argv[1])
r = r["results"][0] if "results" in r else r
assert r.get("status") == "OK" and r.get("stdout") == "hello\n", r' "$1"
}
# In the python image: an image the container may have no /bin of its own.
run='{"commands":[{"image":"python","args":["/bin/sh","-c","echo hello"],"cpu_time_ms":1000,"memory_bytes":67108864}]}'
log "/v1/run on the pod's socket (with the token, as the probes give it)"
expect_ok "$(curl -sS --unix-socket "$sock" -H "Authorization: Bearer $token" http://isolate/v1/run -d "$run")" ||
	fail "POST /v1/run on $sock"
log "/v1/run on the pod's TCP API (the Service's port) with the token"
expect_ok "$(curl -sS -H "Authorization: Bearer $token" "http://127.0.0.1:$api_port/v1/run" -d "$run")" ||
	fail "POST /v1/run on 127.0.0.1:$api_port"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$api_port/v1/run" -d "$run")
[ "$code" = 401 ] || fail "POST /v1/run without the token: HTTP $code, want 401"

# The kubelet runs preStop, then sends SIGTERM (podman kube down).
prestop=$(hook prestop)
[ -n "$prestop" ] || fail "no preStop hook in the manifest"
if eval "podman exec $ctr $prestop" > "$tmp/prestop.log" 2>&1; then
	health=$(curl -sS --unix-socket "$sock" -H "Authorization: Bearer $token" http://isolate/v1/health)
	python3 -c '
import json, sys
h = json.loads(sys.argv[1])
assert h.get("draining") is True and not h.get("ready"), h' "$health" || fail "after preStop, /v1/health: $health"
	if eval "podman exec $ctr $(hook readiness)" > /dev/null 2>&1; then
		fail "after preStop the readiness probe still passes: the Service would send it requests"
	fi
	log "preStop: drained (health: draining, not ready; the readiness probe fails)"
elif grep -q 'unexpected argument "drain"' "$tmp/prestop.log"; then
	echo "kube-test: SKIP preStop: this isolate-serve has no drain command" >&2
else
	cat "$tmp/prestop.log"
	fail "preStop: $prestop"
fi

# Then SIGTERM, waiting terminationGracePeriodSeconds as the kubelet does.
grace=$(sed -n 's/^ *terminationGracePeriodSeconds: *//p' "$tmp/pod.yaml")
log "podman pod stop -t ${grace:?}"
podman pod stop -t "$grace" "$pod" > /dev/null || fail "podman pod stop"
code=$(podman inspect -f '{{.State.ExitCode}}' "$ctr")
[ "$code" = 0 ] || { podman logs "$ctr" | tail -20; fail "the service exited $code on SIGTERM"; }
[ ! -e "$sock" ] || { podman logs "$ctr" | tail -20; fail "the socket $sock is left: the service did not stop cleanly"; }

log "podman kube down"
podman kube down "$tmp/pod.yaml" > "$tmp/down.log" 2>&1 || { cat "$tmp/down.log"; fail "podman kube down"; }
left=()
podman pod exists "$pod" && left+=("pod $pod")
for id in $ids $infra; do
	podman container exists "$id" && left+=("container $id")
	grep -q "$id" /proc/self/mountinfo && left+=("a mount of container $id")
	# find fails on a cgroup another process removes while it reads.
	found=$(find /sys/fs/cgroup -type d -name "*$id*" 2> /dev/null | head -3 || true)
	[ -z "$found" ] || left+=("cgroups $found")
done
found=$(pod_cgroups)
[ -z "$found" ] || left+=("the pod's cgroups, not empty: $found")
grep -q "$tmp" /proc/self/mountinfo && left+=("a mount under $tmp")
[ "$(podman volume ls -q | sort)" = "$volumes_before" ] || left+=("volumes: $(comm -13 <(echo "$volumes_before") <(podman volume ls -q | sort) | tr '\n' ' ')")
[ ${#left[@]} = 0 ] || fail "left after podman kube down: ${left[*]}"
log "1 passed, 0 failed"
