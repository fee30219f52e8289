#!/bin/bash
# The Debian package end to end on this machine, as root (CI runs it):
# builds it twice (an older version first, for the upgrade) and lints it
# (isolate, and python3-isolate-sandbox, the Python client), then, on a
# host already in use, installs the older one and uses it
# (isolate check, a sandboxed run, man pages and completion, the shipped
# docs and their links, the Python client's import, the unit verified with systemd-analyze, enabled
# as the docs say, and its ExecStart started by hand on private sockets,
# a member of the group isolate and a non-member through both sockets),
# upgrades, uses it again, removes and purges it; then checks that
# nothing it made is left (no file, group, process, mount or cgroup) and
# that nothing of the host's was touched.
#
# The host in use is made first, with the build's own binaries (isolate
# installed by hand): a built image (its unpacked tree holds empty
# directories), a persistent box, a service running on sockets of its
# own with its pool of boxes built ahead (their locks held), and a run in
# progress holding its box's lock through the install, the upgrade, the
# removal and the purge. The run then finishes normally, its lock still
# keeping a second run out meanwhile; the image's tree and the box are as
# they were; the service still answers and stops cleanly. The service is
# of the new version, the first package the old one: a member's isolate
# run of the old package hands over to it and is told that the versions
# differ.
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
	local pkg
	for pkg in isolate python3-isolate-sandbox; do
		dpkg-query -W -f='${Package} ${db:Status-Abbrev} ${Version}\n' "$pkg" 2>/dev/null | grep "^$pkg [ic]" || echo "$pkg absent"
	done
	getent group isolate | cut -d: -f1,3 || echo "group absent"
	ls -d /usr/bin/isolate* /lib/systemd/system/isolate* /usr/lib/sysusers.d/isolate.conf \
		/usr/lib/tmpfiles.d/isolate.conf /usr/share/man/man1/isolate* /usr/share/doc/isolate \
		/usr/share/bash-completion/completions/isolate /usr/share/fish/vendor_completions.d/isolate.fish \
		/etc/isolate /usr/lib/python3/dist-packages/isolate_sandbox /usr/share/doc/python3-isolate-sandbox 2>/dev/null || true
	find /etc/systemd/system /var/lib/systemd/deb-systemd-helper-enabled /var/lib/systemd/deb-systemd-helper-masked \
		-name '*isolate*' 2>/dev/null || true
	# (The box locks are the runs': each run leaves its box's lock file,
	# and the runs here pick free ids. locks() lists them.)
	find /run/isolate /var/lib/isolate /var/local -path /run/isolate/locks/'*' -prune -o -print 2>/dev/null || true
	awk '{print $5}' /proc/self/mountinfo | grep -E "^(/run/isolate|/var/lib/isolate|/var/local|$tmp)" | sort || true
	local exe
	for exe in /proc/[0-9]*/exe; do
		case $(readlink "$exe" 2>/dev/null) in /usr/bin/isolate*) echo "process ${exe%/exe}" ;; esac
	done
}

# locks lists the box locks' files.
locks() { ls /run/isolate/locks 2>/dev/null | sort; }

if [ "$phase" = build ]; then
	for pkg in isolate python3-isolate-sandbox; do
		if dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null | grep -q '^i'; then
			fail "the $pkg package is installed on this host: this test would replace and purge it"
		fi
	done
	godir=$(./scripts/deps.sh dpkg-dev debhelper dh-python lintian systemd man-db curl squashfs-tools) # (a failure stops here)
	export PATH="$godir:$PATH"
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
	lintian --fail-on error,warning "$tmp"/new/isolate_*.changes > "$tmp/lintian.log" 2>&1 ||
		{ cat "$tmp/lintian.log"; fail "lintian"; }
	grep -v 'running with root privileges' "$tmp/lintian.log" || true
	chmod 0711 "$tmp"
	unshare --mount --propagation private "$0" --installed "$tmp"
	log "1 passed, 0 failed"
	exit 0
fi

# ---- install to purge, in this mount namespace ----------------------------

made_dirs=()
for dir in /run/isolate /var/lib/isolate /var/local; do
	if [ ! -d "$dir" ]; then mkdir -m 0755 "$dir" && made_dirs+=("$dir"); fi
	mount -t tmpfs -o mode=0755 isolate-package-test "$dir"
done
# Boxes get cgroups under a subtree of the test's own: box ids are locked
# in /run/isolate/locks, which the tmpfs hides from other runs on this
# host, so their cgroups must not meet under one parent.
cgroot=isolate-package-test-$$
deploy/cgroup-subtree.sh make "$cgroot" > /dev/null
export ISOLATE_CGROUP_ROOT=/$cgroot
service_pid= used_pid= run_pid=
bin=$tmp/new/src/bin
finish() {
	local pid
	for pid in $service_pid $used_pid $run_pid; do kill -KILL "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if dpkg-query -W -f='${db:Status-Abbrev}' isolate python3-isolate-sandbox 2>/dev/null | grep -q '^[ic]'; then
		apt-get purge -y -qq isolate python3-isolate-sandbox >/dev/null 2>&1 || dpkg --purge isolate python3-isolate-sandbox || true
	fi
	"$bin/isolate" cleanup --box-id 7 > /dev/null 2>&1 || true
	# After a failure: the boxes' cgroups that the processes killed above
	# left, all in this test's own subtree (their processes die with
	# their init, within moments).
	local try d
	for try in 1 2 3 4 5 6 7 8 9 10; do
		for d in $(find /sys/fs/cgroup/"$cgroot" /sys/fs/cgroup/*/"$cgroot" -mindepth 1 -depth -type d 2>/dev/null); do
			rmdir "$d" 2>/dev/null || true
		done
		[ -z "$(find /sys/fs/cgroup/"$cgroot" /sys/fs/cgroup/*/"$cgroot" -mindepth 1 -type d 2>/dev/null)" ] && break
		sleep 0.2
	done
	deploy/cgroup-subtree.sh remove "$cgroot" > /dev/null 2>&1 || true
	for dir in /run/isolate /var/lib/isolate /var/local; do umount "$dir" 2>/dev/null || true; done
	for dir in "${made_dirs[@]}"; do rmdir "$dir" 2>/dev/null || true; done
}
trap finish EXIT

# ---- the host in use: isolate installed by hand (the build's binaries) ----

log "a host in use: an image, a persistent box, a service, a run in progress"
used=$tmp/used
mkdir -m 0755 "$used"
# The smallest image: a squashfs with a few empty directories, as every
# image's tree has (tmp, home, dev/pts ...), exported as isolate image
# export writes it (manifest.json, then image.sqfs), and imported.
img=$used/img
mkdir -p "$img/usr/bin" "$img/tmp" "$img/home" "$img/dev/pts" "$img/var/empty" "$img/etc"
ln -s usr/bin "$img/bin"
echo package-test > "$img/etc/hostname"
mksquashfs "$img" "$used/image.sqfs" -quiet -no-progress -all-root -noappend > /dev/null
printf '{"name":"pkgtest","suite":"none","size":%s,"sha256":"%s"}\n' \
	"$(stat -c %s "$used/image.sqfs")" "$(sha256sum < "$used/image.sqfs" | cut -d' ' -f1)" > "$used/manifest.json"
tar -C "$used" -cf "$used/pkgtest.image" manifest.json image.sqfs
"$bin/isolate" image import "$used/pkgtest.image" > "$used/import.log" 2>&1 || { cat "$used/import.log"; fail "isolate image import"; }
tree=$(ls -d /var/lib/isolate/images/trees/pkgtest-*)
[ -d "$tree/dev/pts" ] && [ -d "$tree/tmp" ] && [ -d "$tree/var/empty" ] || fail "the image's tree $tree lacks its empty directories"
# A persistent box: its box/ is empty.
box=$("$bin/isolate" init --box-id 7) || fail "isolate init --box-id 7"
[ -d "$box/box" ] || fail "isolate init made no $box/box"
# A service on sockets of its own, its pool of boxes built ahead, for
# the members of a group of its own.
used_gid=64123
"$bin/isolate-serve" --socket "$used/api.sock" --cli-socket "$used/cli.sock" --store "$used/files" \
	--socket-group "$used_gid" > "$used/serve.log" 2>&1 &
used_pid=$!
for _ in $(seq 300); do
	[ -S "$used/api.sock" ] && [ -S "$used/cli.sock" ] && break
	kill -0 "$used_pid" 2>/dev/null || { cat "$used/serve.log"; fail "the host's service exited"; }
	sleep 0.1
done
[ -S "$used/cli.sock" ] || { cat "$used/serve.log"; fail "the host's service made no sockets"; }
# A run in progress in box 77: it waits for a line on a FIFO, which the
# test holds open (read-write: opening it never blocks) until the end.
mkfifo -m 0600 "$used/go"
exec 7<>"$used/go"
ISOLATE_NO_SERVICE=1 "$bin/isolate" run --json -b 77 -w 1h --stdin "$used/go" -- /bin/sh -c 'read line; echo "$line"' \
	> "$used/run.json" 2> "$used/run.err" &
run_pid=$!
# box_held: box 77's lock is taken (flock -n fails on it).
box_held() { [ -e /run/isolate/locks/box-77 ] && ! flock -n /run/isolate/locks/box-77 true; }
for _ in $(seq 300); do
	box_held && break
	kill -0 "$run_pid" 2>/dev/null || { cat "$used/run.err"; fail "the run in progress ended"; }
	sleep 0.1
done
box_held || fail "the run in progress holds no lock on box 77"
tree_files=$(find "$tree" "$box" | sort)
before=$(state)
locks_before=$(locks)
export DEBIAN_FRONTEND=noninteractive
old_deb=$(ls "$tmp"/old/isolate_*.deb)
new_deb=$(ls "$tmp"/new/isolate_*.deb)
old_py=$(ls "$tmp"/old/python3-isolate-sandbox_*.deb)
new_py=$(ls "$tmp"/new/python3-isolate-sandbox_*.deb)

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
apt-get install -y -qq --no-install-recommends "$old_deb" "$old_py" > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "install"; }
grep -q 'isolate image build --all' "$tmp/install.log" || fail "install said nothing of the images"
# Enabled at install, as Debian's convention and the docs say (started
# too where systemd runs, which this host may not: deb-systemd-helper's
# state is what is checked).
grep -q 'isolate.service is enabled' "$tmp/install.log" || fail "install did not say the service is enabled"
wants=/etc/systemd/system/multi-user.target.wants/isolate.service
[ "$(readlink "$wants")" = /lib/systemd/system/isolate.service ] || [ "$(readlink "$wants")" = /usr/lib/systemd/system/isolate.service ] ||
	fail "isolate.service is not enabled ($wants: $(readlink "$wants"))"
[ -e /var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/isolate.service ] ||
	fail "deb-systemd-helper's state: isolate.service was not enabled"
old_version=$(dpkg-deb -f "$old_deb" Version)
uses "$old_version"

log "a member's isolate run of the old package, to the host's service of the new version"
# As after an upgrade before the service restarts: the service declines
# the other build, and the member, who cannot run in-process, is told so.
(cd / && setpriv --reuid=65534 --regid=65534 --groups="$used_gid" --inh-caps=-all \
	env -u ISOLATE_CGROUP_ROOT ISOLATE_SERVICE_SOCKET="$used/cli.sock" isolate run -- /bin/true) > /dev/null 2> "$tmp/other.err" &&
	fail "a run of another version than the service's went through"
want="the service on $used/cli.sock did not take this run of isolate ${old_version%%-*}: it runs isolate $("$bin/isolate-serve" --version | cut -d' ' -f2)"
grep -qF "$want" "$tmp/other.err" && grep -qF 'restart it (systemctl restart isolate)' "$tmp/other.err" ||
	{ cat "$tmp/other.err"; fail "the refusal does not say that the versions differ (want: $want)"; }
man -w isolate isolate-serve > /dev/null || fail "man pages"
bash -c '. /usr/share/bash-completion/completions/isolate; COMP_WORDS=(isolate image b); COMP_CWORD=2; _isolate; [ "${COMPREPLY[*]}" = build ]' ||
	fail "bash completion of 'isolate image b'"

log "the shipped docs, their links, the Python client"
doc=/usr/share/doc/isolate
src=$tmp/new/src
while read -r f; do
	[ -e "$src/$f" ] && [ -e "$doc/$(basename "$f")" ] || fail "debian/isolate.docs: $f is not shipped"
done < "$src/debian/isolate.docs"
# Every relative link in a shipped doc resolves among the shipped docs
# (they keep the source tree's layout), or names a file of the source
# tree that is not a doc (a script, a manifest: the docs point readers
# of the source at them).
python3 - "$doc" "$src" <<'PY' || fail "links in the shipped docs that lead nowhere (above)"
import os, re, sys
doc, src = sys.argv[1:]
bad = []
for d, _, files in os.walk(doc):
    for f in files:
        if not f.endswith(".md"):
            continue
        path = os.path.join(d, f)
        text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            target = link.split("#")[0]
            if not target or re.match(r"[a-z]+:", target):
                continue
            shipped = os.path.normpath(os.path.join(d, target))
            source = os.path.normpath(os.path.join(src, os.path.relpath(d, doc), target))
            if os.path.exists(shipped):
                continue
            if os.path.exists(source) and not re.search(r"\.(md|yaml)$|^LICENSE$", os.path.basename(source)):
                continue
            bad.append(f"{os.path.relpath(path, doc)}: {link}")
if bad:
    sys.exit("\n".join(bad))
PY
documentation=$(sed -n 's,^Documentation=file://,,p' /lib/systemd/system/isolate.service)
[ -e "$documentation" ] || fail "isolate.service's Documentation= names $documentation, which is not there"
(cd / && env -i PATH=/usr/bin:/bin python3 -c 'import isolate_sandbox, isolate_sandbox.runner') ||
	fail "the Python client (python3-isolate-sandbox) does not import (python3 -c 'import isolate_sandbox')"

log "systemd-analyze verify"
unit=/lib/systemd/system/isolate.service
systemd-analyze verify "$unit" || fail "systemd-analyze verify $unit"
grep -qx 'Delegate=yes' "$unit" && grep -qx 'RuntimeDirectory=isolate' "$unit" || fail "$unit: Delegate= or RuntimeDirectory="
grep -qx 'Type=notify' "$unit" || fail "$unit: not Type=notify"
# (Its exposure is scripts/unit-test.sh's to check: the package's unit is
# scripts/isolate.service without its install comment.)

log "the unit's ExecStart, by hand, on private sockets"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[[ $exec_start == *'--socket-group isolate'* ]] || fail "ExecStart names no socket group: $exec_start"
run=$tmp/run
mkdir -m 0755 "$run"
# As the unit confines it: no new privileges, the capabilities it keeps
# (its system-call filter is not applied here). Go's flags: the last of a
# repeated flag wins. $NOTIFY_SOCKET is a socket of the test's, which the
# service tells READY=1 once it listens.
drop=$(sed -n 's/^CapabilityBoundingSet=~//p' "$unit" | tr 'A-Z' 'a-z' | sed -e 's/cap_/-/g' -e 's/ /,/g')
grep -qx 'NoNewPrivileges=yes' "$unit" && [ -n "$drop" ] || fail "$unit: no NoNewPrivileges=yes, or no capabilities dropped"
python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(300)
print(s.recv(4096).decode(), flush=True)' "$run/notify" > "$tmp/notify.log" &
notify_pid=$!
for _ in $(seq 300); do [ -S "$run/notify" ] && break; sleep 0.1; done
NOTIFY_SOCKET=$run/notify setpriv --no-new-privs --bounding-set="$drop" \
	$exec_start --socket "$run/api.sock" --cli-socket "$run/cli.sock" --store "$run/files" > "$tmp/serve.log" 2>&1 &
service_pid=$!
wait "$notify_pid" || fail "no notification from the service"
[ "$(cat "$tmp/notify.log")" = READY=1 ] || fail "the service notified $(cat "$tmp/notify.log"), not READY=1"
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
apt-get install -y -qq --no-install-recommends "$new_deb" "$new_py" > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "upgrade"; }
uses "$(dpkg-deb -f "$new_deb" Version)"

log "remove, purge"
apt-get remove -y -qq isolate python3-isolate-sandbox > /dev/null
[ ! -e /usr/bin/isolate ] || fail "remove left /usr/bin/isolate"
[ ! -e /usr/lib/python3/dist-packages/isolate_sandbox ] || fail "remove left the Python client"
apt-get purge -y -qq isolate python3-isolate-sandbox > /dev/null
after=$(state)
if [ "$before" != "$after" ]; then
	diff <(echo "$before") <(echo "$after") >&2 || true
	fail "the host is not as it was before the install (above)"
fi
missing=$(comm -23 <(echo "$locks_before") <(locks))
[ -z "$missing" ] || fail "purge removed the box locks $missing"

log "the host in use, after the purge: its image, box, service and run"
[ "$(find "$tree" "$box" | sort)" = "$tree_files" ] || fail "the image's tree or the persistent box changed"
box_held || fail "box 77's lock is not held any more"
ISOLATE_NO_SERVICE=1 "$bin/isolate" run -b 77 -- /bin/true > /dev/null 2> "$used/second.err" &&
	fail "a second run took box 77 while the first held it"
grep -q 'in use' "$used/second.err" || { cat "$used/second.err"; fail "a second run in box 77: not refused as in use"; }
curl -sS --unix-socket "$used/api.sock" http://isolate/v1/health > /dev/null || fail "the host's service does not answer"
echo finish >&7
exec 7>&-
wait "$run_pid" || { cat "$used/run.err"; fail "the run in progress failed (exit $?)"; }
run_pid=
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "OK" and r["stdout"] == "finish\n", r' "$used/run.json" || fail "the run in progress did not finish normally"
kill -TERM "$used_pid"
wait "$used_pid" || { cat "$used/serve.log"; fail "the host's service did not stop cleanly on SIGTERM"; }
used_pid=
"$bin/isolate" cleanup --box-id 7 > /dev/null || fail "isolate cleanup --box-id 7"
deploy/cgroup-subtree.sh remove "$cgroot" > /dev/null || fail "cgroups left (above)"
log "installed, used, upgraded, removed, purged on a host in use: nothing left, nothing of the host's touched"
