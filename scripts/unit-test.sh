#!/bin/bash
# The system unit's sandboxing (scripts/isolate.service), where systemd is
# not PID 1: the exposure systemd-analyze rates it at offline, and the
# service run under an equivalent of the unit's confinement, doing what
# it serves: a run handed over by a user of the socket's group (its files
# read and written, a directory of its bound), one by root, a judge's box
# (its network namespace kept between runs), /v1/run (a
# box's loopback, a time limit), a squashfs image on a loop device,
# /v1/exec in a language image, a session.
#
# The equivalent is not systemd: what it reproduces exactly is the mount
# namespace (PrivateMounts=: a slave copy of the host's;
# ProtectKernelModules=: /lib/modules and /usr/lib/modules inaccessible;
# ProtectProc=invisible: a /proc of its own with hidepid=invisible;
# ProtectSystem=full: /usr, /boot, /efi and /etc read-only), NoNewPrivileges=
# and the capability bounding set. The device list
# (DevicePolicy=, DeviceAllow=: a BPF program systemd attaches to the
# unit's cgroup) and the system-call filters (SystemCallFilter=,
# RestrictAddressFamilies=, ...) are not applied.
#
# Usage (root): ISOLATE_BIN=path/to/isolate scripts/unit-test.sh
# (isolate-serve beside it; systemd-analyze, mksquashfs and curl
# installed: scripts/test.sh asks deps.sh for them).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "unit-test: [${SECONDS}s] $*"; }
fail() { echo "unit-test: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "unit-test: run as root" >&2; exit 2; }
bin=$(cd "$(dirname "${ISOLATE_BIN:?ISOLATE_BIN: the isolate binary}")" && pwd)
unit=scripts/isolate.service
# The exposure the unit is rated at, at most (x10: systemd-analyze's
# --threshold); the unit's comments say why each relaxation stays.
max_exposure=49

tmp=$(mktemp -d /tmp/isolate-unit-test.XXXXXX)
chmod 0755 "$tmp"
service_pid=
cleanup() {
	[ -z "$service_pid" ] || { kill -TERM "$service_pid" 2>/dev/null; wait "$service_pid" 2>/dev/null || true; }
	rm -rf "$tmp"
}
trap cleanup EXIT

log "systemd-analyze verify, security (offline)"
# (verify wants ExecStart's binary where it says.)
sed "s,/usr/local/bin/,$bin/,g" "$unit" > "$tmp/isolate.service"
systemd-analyze verify "$tmp/isolate.service" || fail "systemd-analyze verify $unit"
systemd-analyze security --offline=true --threshold="$max_exposure" "$tmp/isolate.service" > "$tmp/security.log" 2>&1 ||
	{ cat "$tmp/security.log"; fail "systemd-analyze security: $unit is exposed more than $((max_exposure / 10)).$((max_exposure % 10))"; }
tail -1 "$tmp/security.log"

# What the equivalent reproduces must be what the unit says, no less.
for want in PrivateMounts=yes ProtectKernelModules=yes ProtectProc=invisible ProtectSystem=full NoNewPrivileges=yes DevicePolicy=closed \
	'DeviceAllow=block-loop rw' 'DeviceAllow=/dev/loop-control rw'; do
	grep -qx "$want" "$unit" || fail "$unit has no $want, which this test reproduces"
done
for unsupported in ProtectHome PrivateTmp ReadWritePaths ReadOnlyPaths InaccessiblePaths TemporaryFileSystem \
	BindPaths ProtectKernelTunables ProtectKernelLogs ProcSubset PrivateDevices ProtectControlGroups PrivateUsers PrivateNetwork; do
	! grep -q "^$unsupported=" "$unit" || fail "$unit sets $unsupported=, which this test does not reproduce"
done
drop=$(sed -n 's/^CapabilityBoundingSet=~//p' "$unit" | tr 'A-Z' 'a-z' | sed -e 's/cap_/-/g' -e 's/ /,/g')
[ -n "$drop" ] || fail "$unit drops no capability"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
exec_start=${exec_start/\/usr\/local\/bin\/isolate/$bin/isolate}
exec_start=${exec_start/--socket-group isolate/--socket-group nogroup}
[[ $exec_start == "$bin/isolate serve "*'--socket-group nogroup'* ]] || fail "ExecStart is not isolate serve with a socket group: $exec_start"

log "the service under the unit's mount namespace, bounding set and no_new_privs"
run=$tmp/run
mkdir -m 0755 "$run"
# (The unit's ProtectKernelModules=: systemd's inaccessible directory,
# bound read-only over each that exists; ProtectProc=invisible: a fresh
# /proc in place of the host's and its submounts; ProtectSystem=full: each
# of its directories, and every mount below it, read-only.)
unshare --mount --propagation slave /bin/bash -c '
set -e
inaccessible=$1; shift
for d in /usr /boot /efi /etc; do
	[ -d "$d" ] || continue
	mount --rbind "$d" "$d"
	for m in $(findmnt -R -n -o TARGET "$d"); do
		mount -o remount,bind,ro "$m"
	done
done
mkdir -m 0000 "$inaccessible"
for d in $(realpath -qe /lib/modules /usr/lib/modules | sort -u); do
	mount --bind "$inaccessible" "$d"
	mount -o remount,bind,ro,nosuid,nodev,noexec "$d"
done
umount -l /proc
mount -t proc -o hidepid=invisible,nosuid,nodev,noexec proc /proc
exec "$@"' sandbox "$tmp/inaccessible" \
	setpriv --no-new-privs --bounding-set="$drop" \
	$exec_start --socket "$run/api.sock" --cli-socket "$run/cli.sock" --store "$run/files" > "$tmp/serve.log" 2>&1 &
service_pid=$!
# (Ready: the self-test made a box; a run handed over before that is
# declined and runs in-process.)
for _ in $(seq 600); do
	[ -S "$run/api.sock" ] && grep -q '^isolate serve: ready' "$tmp/serve.log" && break
	kill -0 "$service_pid" 2>/dev/null || { cat "$tmp/serve.log"; fail "the service exited"; }
	sleep 0.1
done
[ -S "$run/api.sock" ] && [ -S "$run/cli.sock" ] || { cat "$tmp/serve.log"; fail "the service is not ready"; }

member=(setpriv --reuid=65534 --regid=65534 --groups=65534 --inh-caps=-all)
api() { curl -sS --unix-socket "$run/api.sock" "$@"; }
# check JSON PYTHON-EXPRESSION WHAT: r is the report (a run's first
# result), a the whole answer.
check() {
	python3 -c '
import json, sys
a = json.loads(sys.argv[1])
r = a["results"][0] if isinstance(a, dict) and "results" in a else a
try:
    ok = eval(sys.argv[2])
except (KeyError, IndexError, TypeError):
    ok = False
if not ok:
    sys.exit(f"{sys.argv[3]}: {a}")' "$1" "$2" "$3" || fail "$3"
}

# (Any ISOLATE_ variable but the socket's keeps a run in-process: the
# CLI runs with only PATH and the socket, whatever the test command
# exported.)
log "a run handed over by a member of the socket's group: its files, its directory bound"
work=$tmp/work
mkdir -m 0700 "$work" "$work/src"
echo from-stdin > "$work/in"
echo from-bind > "$work/src/f"
chown -R 65534:65534 "$work"
out=$(cd "$work" && "${member[@]}" env -i PATH="$PATH" ISOLATE_SERVICE_SOCKET="$run/cli.sock" \
	"$bin/isolate" run --json --stdin in --stdout out --bind "$work/src:/src:ro" --copy-out "/box/made:$work/made" \
	-- /bin/sh -c 'cat /src/f; cat; echo made > /box/made')
check "$out" 'r["status"] == "OK" and r["sandbox"].get("via") == "service"' "the member's run, handed over"
[ "$(cat "$work/out")" = "$(printf 'from-bind\nfrom-stdin')" ] || fail "the member's run wrote $(cat "$work/out")"
[ "$(cat "$work/made")" = made ] && [ "$(stat -c %u "$work/made")" = 65534 ] || fail "the copy-out is not the member's file"

log "a run handed over by root"
out=$(cd "$tmp" && env -i PATH="$PATH" ISOLATE_SERVICE_SOCKET="$run/cli.sock" \
	"$bin/isolate" run --json --stdout "$tmp/root-out" -- /bin/sh -c 'echo root')
check "$out" 'r["status"] == "OK" and r["sandbox"].get("via") == "service"' "root's run, handed over"
[ "$(cat "$tmp/root-out")" = root ] || fail "root's run wrote $(cat "$tmp/root-out")"
# (ProtectSystem=full: /etc is read-only to the service, root's run too.)
etc_out=/etc/isolate-unit-test-$$
if (cd "$tmp" && env -i PATH="$PATH" ISOLATE_SERVICE_SOCKET="$run/cli.sock" \
	"$bin/isolate" run --stdout "$etc_out" -- /bin/sh -c 'echo root' > /dev/null 2>&1) || [ -e "$etc_out" ]; then
	rm -f "$etc_out"
	fail "a handed-over run wrote $etc_out under ProtectSystem=full"
fi

log "a judge's box, handed over: its runs after the first share a network namespace, loopback up"
# (--init and --cleanup run in-process: in the service's mount namespace,
# where the box root is, as under systemd, whose PrivateMounts= namespace
# receives the host's mounts; the equivalent's may not, where the host's
# root mount is not shared.)
judge_box() { nsenter -t "$service_pid" -m -- env -i PATH="$PATH" "$bin/isolate" --box-id=913 "$@"; }
judge() { (cd "$tmp" && env -i PATH="$PATH" ISOLATE_SERVICE_SOCKET="$run/cli.sock" "$bin/isolate" --box-id=913 "$@"); }
judge_box --cleanup > /dev/null 2>&1 || true
judge_box --init > /dev/null || fail "isolate --init of a judge's box"
nets=$(for i in 1 2 3; do judge --run -- /bin/readlink /proc/self/ns/net 2>> "$tmp/judge.err"; done) ||
	{ cat "$tmp/judge.err"; fail "the judge's runs"; }
loop=$(judge --run -- /usr/bin/python3 -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname()); print("loopback")' 2>> "$tmp/judge.err")
judge_box --cleanup > /dev/null || fail "isolate --cleanup of a judge's box"
[ "$(echo "$nets" | sed -n 2p)" = "$(echo "$nets" | sed -n 3p)" ] && [ -n "$(echo "$nets" | sed -n 3p)" ] &&
	[ "$(echo "$nets" | sed -n 3p)" != "$(readlink /proc/self/ns/net)" ] || fail "the judge's runs were in network namespaces $nets"
[ "$loop" = loopback ] || { cat "$tmp/judge.err"; fail "the judge's box in its kept namespace: $loop"; }

log "/v1/run: the box's loopback, a time limit"
out=$(cd / && "${member[@]}" curl -sS --unix-socket "$run/api.sock" http://isolate/v1/run -d '{"commands":[{"args":["/usr/bin/python3","-c",
"import socket\ns = socket.socket()\ns.bind((\"127.0.0.1\", 0))\ns.listen()\nc = socket.create_connection(s.getsockname())\nprint(\"loopback\")"]}]}')
check "$out" 'r["status"] == "OK" and r["stdout"] == "loopback\n"' "/v1/run on the box's loopback"
out=$(api http://isolate/v1/run -d '{"commands":[{"args":["/bin/sh","-c","while :; do :; done"],"cpu_time_ms":200}]}')
check "$out" 'r["status"] == "TO"' "/v1/run past its time limit"

log "/v1/run with a network allowlist: the box's listener taken from its PID 1"
python3 -c '
import http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"allowed")
    def log_message(self, *a): pass
s = socketserver.TCPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.timeout = 30
s.handle_request()' > "$tmp/http.port" &
http_pid=$!
for _ in $(seq 100); do [ -s "$tmp/http.port" ] && break; sleep 0.1; done
http_port=$(cat "$tmp/http.port")
out=$(api http://isolate/v1/run -d '{"commands":[{"args":["/usr/bin/python3","-c",
"import urllib.request\nprint(urllib.request.urlopen(\"http://127.0.0.1:'"$http_port"'/\").read().decode())"],
"network":{"allow":["127.0.0.1:'"$http_port"'"]}}]}')
wait "$http_pid" || true
check "$out" 'r["status"] == "OK" and r["stdout"] == "allowed\n"' "/v1/run through the allowlist's proxy"

log "a squashfs image, on a loop device"
mkdir -p "$tmp/sq/bin" "$tmp/sq/usr" "$tmp/sq/lib" "$tmp/sq/tmp"
cp "$bin/isolate" "$tmp/sq/bin/"
mksquashfs "$tmp/sq" "$tmp/img.squashfs" -noappend -quiet > /dev/null
out=$(api http://isolate/v1/run -d '{"commands":[{"image":"'"$tmp/img.squashfs"'","args":["/bin/isolate","--version"]}]}')
check "$out" 'r["status"] == "OK" and r["stdout"].startswith("The process isolator")' "/v1/run in a squashfs image"

if "$bin/isolate" image list 2> /dev/null | grep -q '^python '; then
	log "/v1/exec in the python image; a session"
	out=$(api http://isolate/v1/exec -d '{"lang":"python","source":"print(6 * 7)"}')
	check "$out" 'a["status"] == "OK" and a["run"]["stdout"] == "42\n"' "/v1/exec in python"
	out=$(api http://isolate/v1/sessions -d '{"lang":"python"}')
	check "$out" '"id" in a' "POST /v1/sessions"
	session=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["id"])' "$out")
	out=$(api "http://isolate/v1/sessions/$session/commands" -d '{"args":["sh","-c","echo 41 > n"]}')
	check "$out" 'a["status"] == "OK"' "a command in the session"
	[ "$(api "http://isolate/v1/sessions/$session/files/n")" = 41 ] || fail "the session's file"
	[ "$(api -o /dev/null -w '%{http_code}' -X DELETE "http://isolate/v1/sessions/$session")" = 204 ] || fail "DELETE the session"
else
	log "no python image built here: /v1/exec and the session not tried (scripts/images.sh builds it)"
fi

kill -TERM "$service_pid"
wait "$service_pid" || { cat "$tmp/serve.log"; fail "the service did not stop cleanly on SIGTERM"; }
service_pid=
[ ! -e "$run/api.sock" ] && [ ! -e "$run/cli.sock" ] || fail "the service left its sockets"

log "the unit's sandboxing: exposure at most $((max_exposure / 10)).$((max_exposure % 10)), the service works in its equivalent"
