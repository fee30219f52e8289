#!/bin/bash
# The Debian package end to end on this machine, as root (CI runs it):
# builds it twice (an older version first, for the upgrade) and lints it,
# installs the older one and uses it (isolate check, a sandboxed run, man
# pages and completion, the unit verified with systemd-analyze and its
# ExecStart started by hand on private sockets, a member of the group
# isolate and a non-member through both sockets), upgrades, uses it
# again, removes and purges it; then checks that nothing it made is left:
# no file, group, process, mount or cgroup.
#
# Install to purge runs in a mount namespace of its own, with an empty
# tmpfs over /run/isolate, /var/lib/isolate and /var/local where they
# exist: this host's images, boxes and sockets (its own tests', other
# services') stay out of reach of the package's scripts, and what the
# package leaves there is seen. The package itself is installed for real.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --installed ]; then
	phase=installed
	tmp=$2
else
	phase=build
fi

log() { echo "package-test: [${SECONDS}s] $*"; }
fail() { echo "package-test: FAIL: $*" >&2; exit 1; }

# state prints what the package may make or leave on this host; its
# boxes' cgroups are all in the subtree made for this test (below).
state() {
	# (dpkg may remember a purged package as "un": not installed.)
	dpkg-query -W -f='package ${db:Status-Abbrev} ${Version}\n' isolate 2>/dev/null | grep '^package [ic]' || echo "package absent"
	getent group isolate | cut -d: -f1,3 || echo "group absent"
	ls -d /usr/bin/isolate* /lib/systemd/system/isolate* /usr/lib/sysusers.d/isolate.conf \
		/usr/lib/tmpfiles.d/isolate.conf /usr/share/man/man1/isolate* /usr/share/doc/isolate \
		/usr/share/bash-completion/completions/isolate /usr/share/fish/vendor_completions.d/isolate.fish \
		/etc/isolate 2>/dev/null || true
	find /etc/systemd/system /var/lib/systemd/deb-systemd-helper-enabled /var/lib/systemd/deb-systemd-helper-masked \
		-name '*isolate*' 2>/dev/null || true
	find /run/isolate /var/lib/isolate /var/local 2>/dev/null || true
	awk '{print $5}' /proc/self/mountinfo | grep -E "^(/run/isolate|/var/lib/isolate|/var/local|$tmp)" | sort || true
	local exe
	for exe in /proc/[0-9]*/exe; do
		case $(readlink "$exe" 2>/dev/null) in /usr/bin/isolate*) echo "process ${exe%/exe}" ;; esac
	done
}

if [ "$phase" = build ]; then
	if dpkg-query -W -f='${db:Status-Abbrev}' isolate 2>/dev/null | grep -q '^i'; then
		fail "the isolate package is installed on this host: this test would replace and purge it"
	fi
	export PATH="$(./scripts/deps.sh dpkg-dev debhelper lintian systemd man-db curl):$PATH"
	# The build reads modules from the module cache only (debian/README.source).
	go mod download
	tmp=$(mktemp -d /tmp/isolate-package.XXXXXX)
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$tmp/old/src" "$tmp/new/src"
	git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$tmp/new/src"
	cp -a "$tmp/new/src/." "$tmp/old/src"
	version=$(cd "$tmp/new/src" && dpkg-parsechangelog -S Version)
	{
		printf 'isolate (%s~old) unstable; urgency=medium\n\n  * The version package-test.sh upgrades from.\n\n' "$version"
		printf ' -- package-test <root@localhost>  %s\n\n' "$(date -R)"
		cat "$tmp/old/src/debian/changelog"
	} > "$tmp/changelog" && mv "$tmp/changelog" "$tmp/old/src/debian/changelog"
	for v in old new; do
		log "building the $v package"
		(cd "$tmp/$v/src" && dpkg-buildpackage -us -uc -b) > "$tmp/$v/build.log" 2>&1 ||
			{ tail -40 "$tmp/$v/build.log"; fail "dpkg-buildpackage ($v)"; }
	done
	log "lintian"
	lintian --fail-on warning "$tmp"/new/isolate_*.changes > "$tmp/lintian.log" 2>&1 ||
		{ cat "$tmp/lintian.log"; fail "lintian"; }
	grep -v 'running with root privileges' "$tmp/lintian.log" || true
	chmod 0711 "$tmp"
	unshare --mount --propagation private "$0" --installed "$tmp"
	log "1 passed, 0 failed"
	exit 0
fi

# ---- install to purge, in this mount namespace ----------------------------

for dir in /run/isolate /var/lib/isolate /var/local; do
	if [ -d "$dir" ]; then mount -t tmpfs -o mode=0755 isolate-package-test "$dir"; fi
done
# Boxes get cgroups under a subtree of the test's own: box ids are locked
# in /run/isolate/locks, which the tmpfs hides from other runs on this
# host, so their cgroups must not meet under one parent.
cgroot=isolate-package-test-$$
deploy/cgroup-subtree.sh make "$cgroot" > /dev/null
export ISOLATE_CGROUP_ROOT=/$cgroot
before=$(state)
service_pid=
finish() {
	[ -z "$service_pid" ] || kill -KILL "$service_pid" 2>/dev/null || true
	if dpkg-query -W -f='${db:Status-Abbrev}' isolate 2>/dev/null | grep -q '^[ic]'; then
		apt-get purge -y -qq isolate >/dev/null 2>&1 || dpkg --purge isolate || true
	fi
	deploy/cgroup-subtree.sh remove "$cgroot" > /dev/null 2>&1 || true
}
trap finish EXIT
export DEBIAN_FRONTEND=noninteractive
old_deb=$(ls "$tmp"/old/isolate_*.deb)
new_deb=$(ls "$tmp"/new/isolate_*.deb)

# expect_ok RUN_JSON: a report of status OK whose stdout is "hello".
expect_ok() {
	python3 -c '
import json, sys
r = json.loads(sys.argv[1])
r = r["results"][0] if "results" in r else r
assert r["status"] == "OK" and r["stdout"] == "hello\n", r
print(r["sandbox"].get("via", ""))' "$1"
}

# uses runs the installed package: version, check, a run, docs.
uses() {
	local want=$1
	[ "$(isolate version)" = "isolate ${want%%-*}" ] || fail "isolate version: $(isolate version), want $want"
	getent group isolate >/dev/null || fail "no group isolate"
	isolate check > "$tmp/check.log" || { cat "$tmp/check.log"; fail "isolate check"; }
	via=$(expect_ok "$(isolate run --json -t 1 -m 64M -- /bin/sh -c 'echo hello')") || fail "isolate run"
	[ "$via" = in-process ] || fail "isolate run ran $via"
}

log "installing $(basename "$old_deb")"
apt-get install -y -qq --no-install-recommends "$old_deb" > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "install"; }
grep -q 'isolate image build --all' "$tmp/install.log" || fail "install said nothing of the images"
uses "$(dpkg-deb -f "$old_deb" Version)"
man -w isolate isolate-serve > /dev/null || fail "man pages"
bash -c '. /usr/share/bash-completion/completions/isolate; COMP_WORDS=(isolate image b); COMP_CWORD=2; _isolate; [ "${COMPREPLY[*]}" = build ]' ||
	fail "bash completion of 'isolate image b'"

log "systemd-analyze verify"
unit=/lib/systemd/system/isolate.service
systemd-analyze verify "$unit" || fail "systemd-analyze verify $unit"
grep -qx 'Delegate=yes' "$unit" && grep -qx 'RuntimeDirectory=isolate' "$unit" || fail "$unit: Delegate= or RuntimeDirectory="

log "the unit's ExecStart, by hand, on private sockets"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[[ $exec_start == *'--socket-group isolate'* ]] || fail "ExecStart names no socket group: $exec_start"
run=$tmp/run
mkdir -m 0755 "$run"
# Go's flags: the last of a repeated flag wins.
$exec_start --socket "$run/api.sock" --cli-socket "$run/cli.sock" --store "$run/files" > "$tmp/serve.log" 2>&1 &
service_pid=$!
for _ in $(seq 300); do
	[ -S "$run/api.sock" ] && [ -S "$run/cli.sock" ] && break
	kill -0 "$service_pid" 2>/dev/null || { cat "$tmp/serve.log"; fail "the service exited"; }
	sleep 0.1
done
[ -S "$run/cli.sock" ] || { cat "$tmp/serve.log"; fail "no sockets"; }
gid=$(getent group isolate | cut -d: -f3)
member=(setpriv --reuid=65534 --regid=65534 --groups="$gid" --inh-caps=-all)
stranger=(setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all)
body='{"commands":[{"args":["/bin/sh","-c","echo hello"]}]}'
via=$(expect_ok "$(cd / && "${member[@]}" curl -sS --unix-socket "$run/api.sock" http://isolate/v1/run -d "$body")") ||
	fail "POST /v1/run as a member of the group"
[ "$via" = service ] || fail "POST /v1/run ran $via"
# (An ISOLATE_ variable but the socket's would keep the run in-process.)
via=$(expect_ok "$(cd / && "${member[@]}" env -u ISOLATE_CGROUP_ROOT ISOLATE_SERVICE_SOCKET="$run/cli.sock" isolate run --json -- /bin/sh -c 'echo hello')") ||
	fail "isolate run as a member of the group, handed over"
[ "$via" = service ] || fail "isolate run by a member of the group ran $via, not through the service"
if (cd / && "${stranger[@]}" curl -sS --unix-socket "$run/api.sock" http://isolate/v1/health) 2>/dev/null; then
	fail "a user outside the group isolate reached the API"
fi
kill -TERM "$service_pid"
wait "$service_pid" || { cat "$tmp/serve.log"; fail "the service did not stop cleanly on SIGTERM"; }
service_pid=
[ ! -e "$run/api.sock" ] && [ ! -e "$run/cli.sock" ] || fail "the service left its sockets"

log "the user unit's ExecStart, by hand, as a user who is not root"
user_unit=/usr/lib/systemd/user/isolate.service
grep -qx 'Delegate=yes' "$user_unit" || fail "$user_unit: no Delegate=yes"
[ ! -e /etc/systemd/user/default.target.wants/isolate.service ] || fail "the user unit is enabled for every user"
user_start=$(sed -n 's/^ExecStart=//p' "$user_unit")
xdg=$tmp/xdg
mkdir -m 0700 "$xdg"
chown 65534:65534 "$xdg"
# The host's cgroups are not delegated to the user here: rlimits alone.
"${stranger[@]}" env -i PATH=/usr/bin:/bin XDG_RUNTIME_DIR="$xdg" $user_start --allow-rlimit-only > "$tmp/user-serve.log" 2>&1 &
service_pid=$!
for _ in $(seq 300); do
	[ -S "$xdg/isolate/cli.sock" ] && break
	kill -0 "$service_pid" 2>/dev/null || { cat "$tmp/user-serve.log"; fail "the user's service exited"; }
	sleep 0.1
done
[ -S "$xdg/isolate/cli.sock" ] || { cat "$tmp/user-serve.log"; fail "the user's service made no socket"; }
via=$(expect_ok "$(cd / && "${stranger[@]}" env -i PATH=/usr/bin:/bin XDG_RUNTIME_DIR="$xdg" isolate run --allow-rlimit-only --json -- /bin/sh -c 'echo hello')") ||
	fail "isolate run by the user, with its own service"
[ "$via" = service ] || fail "the user's isolate run ran $via, not through its own service"
kill -TERM "$service_pid"
wait "$service_pid" || { cat "$tmp/user-serve.log"; fail "the user's service did not stop cleanly on SIGTERM"; }
service_pid=
[ ! -e "$xdg/isolate/cli.sock" ] && [ ! -e "$xdg/isolate/api.sock" ] || fail "the user's service left its sockets"

log "upgrading to $(basename "$new_deb")"
apt-get install -y -qq --no-install-recommends "$new_deb" > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "upgrade"; }
uses "$(dpkg-deb -f "$new_deb" Version)"

log "remove, purge"
apt-get remove -y -qq isolate > /dev/null
[ ! -e /usr/bin/isolate ] || fail "remove left /usr/bin/isolate"
apt-get purge -y -qq isolate > /dev/null
deploy/cgroup-subtree.sh remove "$cgroot" > /dev/null || fail "cgroups left (above)"
after=$(state)
if [ "$before" != "$after" ]; then
	diff <(echo "$before") <(echo "$after") >&2 || true
	fail "the host is not as it was before the install (above)"
fi
log "installed, used, upgraded, removed, purged: nothing left"
