#!/bin/bash
# Checks the tarballs make release wrote in dist/: their SHA-256 sums,
# that each binary is static and for its architecture, `isolate version`,
# and that every command and subcommand parses --help; on amd64 (this
# host) also one sandboxed run. The arm64 binaries run under qemu-user
# (qemu-aarch64-static), which cannot run a box: namespaces, cgroups and
# the arm64 seccomp filter are checked only on arm64 hardware.
#   scripts/release-check.sh VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
version=$1
tmp=$(mktemp -d /tmp/isolate-release.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
(cd dist && sha256sum --quiet -c SHA256SUMS)

fail() { echo "release-check: $arch: $*" >&2; exit 1; }

# commands lists the commands a --help output on stdin names.
commands() { awk '/^COMMANDS:/{on=1; next} on && /^$/{on=0} on {sub(",", "", $1); print $1}'; }

# check_help RUN CMD...: `CMD --help` exits 0 with its own help, and so
# does every subcommand that help lists.
check_help() {
	local out
	out=$("${run[@]}" "$dir/isolate" "$@" --help) || fail "isolate $* --help: exit $?"
	grep -q "^   isolate $* - " <<<"$out" || fail "isolate $* --help: not its help: $out"
	checked=$((checked + 1))
	local sub
	for sub in $(commands <<<"$out"); do
		[ "$sub" = help ] || check_help "$@" "$sub"
	done
}

for arch in amd64 arm64; do
	dir=$tmp/$arch
	mkdir -p "$dir"
	tar -C "$dir" -xzf "dist/isolate-$version-linux-$arch.tar.gz"
	case $arch in
	amd64) run=(env); machine='Advanced Micro Devices X86-64' ;;
	arm64) run=(qemu-aarch64-static); machine=AArch64 ;;
	esac
	for bin in isolate isolate-serve; do
		readelf -h "$dir/$bin" | grep -q "Machine: *$machine" || fail "$bin is not for $machine"
		! readelf -lW "$dir/$bin" | grep -q 'program interpreter' || fail "$bin is not static"
	done
	got=$("${run[@]}" "$dir/isolate" version)
	[ "$got" = "isolate $version" ] || fail "isolate version says '$got', not 'isolate $version'"
	checked=0
	top=$("${run[@]}" "$dir/isolate" --help)
	for cmd in $(commands <<<"$top"); do
		# serve execs isolate-serve, checked below (qemu-user cannot
		# exec a foreign binary from inside a foreign one).
		case $cmd in help | serve) ;; *) check_help "$cmd" ;; esac
	done
	[ "$checked" -ge 10 ] || fail "only $checked commands found in isolate --help"
	# The service's flags: Go's flag package answers --help with exit 2.
	serve=$("${run[@]}" "$dir/isolate-serve" --help 2>&1) || true
	grep -q -- '-socket-group' <<<"$serve" || fail "isolate-serve --help: $serve"
	if [ "$arch" = amd64 ]; then
		serve=$("$dir/isolate" serve --help 2>&1) || true
		grep -q -- '-socket-group' <<<"$serve" || fail "isolate serve --help: $serve"
	fi
	if [ "$arch" = amd64 ] && [ "$(id -u)" = 0 ]; then
		"$dir/isolate" run --json -- /bin/true | grep -q '"status": *"OK"' || fail "a run of /bin/true is not OK"
	fi
	echo "release-check: $arch: static, version $version, --help of $checked commands parsed"
done
