#!/bin/bash
# Checks the tarballs make release wrote in dist/: their SHA-256 sums,
# their contents (exactly the files scripts/release.sh lists: binaries,
# man pages, completions, units, docs with LICENSE, the Python client),
# that each binary is static and for its architecture, `isolate version`,
# and that every command and subcommand parses --help; that the Python
# client imports from where the tarball puts it, with the standard
# library alone; on amd64 (this host) also one sandboxed run. The arm64 binaries run under qemu-user
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

# The files each tarball holds, beside the Python client's modules.
want_files="bin/isolate
bin/isolate-serve
share/bash-completion/completions/isolate
share/doc/isolate/LICENSE
share/doc/isolate/MIGRATING.md
share/doc/isolate/README.md
share/doc/isolate/SECURITY.md
share/doc/isolate/clients/python/README.md
share/doc/isolate/docs/openapi.yaml
share/fish/vendor_completions.d/isolate.fish
share/isolate/systemd/isolate-user.service
share/isolate/systemd/isolate.service
share/man/man1/isolate-serve.1
share/man/man1/isolate.1"
want_docs=$(cd docs && ls *.md | sed 's,^,share/doc/isolate/docs/,')
want_python=$( (cd clients/python/src && find isolate_sandbox -name '*.py' -o -name py.typed) | sed 's,^,share/isolate/python/,' | sort)

for arch in amd64 arm64; do
	dir=$tmp/$arch
	mkdir -p "$dir"
	tarball=dist/isolate-$version-linux-$arch.tar.gz
	got=$(tar -tzf "$tarball" | grep -v '/$' | sort)
	want=$(printf '%s\n%s\n%s\n' "$want_files" "$want_docs" "$want_python" | sort)
	[ "$got" = "$want" ] || { diff <(echo "$want") <(echo "$got") >&2; fail "$tarball: not the files it should hold (above: - missing, + extra)"; }
	tar -C "$dir" -xzf "$tarball"
	grep -q 'Apache License' "$dir/share/doc/isolate/LICENSE" && grep -q 'Version 2.0' "$dir/share/doc/isolate/LICENSE" || fail "LICENSE is not Apache-2.0's"
	grep -qx 'ExecStart=/usr/local/bin/isolate serve.*' "$dir/share/isolate/systemd/isolate.service" || fail "isolate.service does not start /usr/local/bin/isolate"
	grep -q '^\.TH' "$dir/share/man/man1/isolate.1" && grep -q '^\.TH' "$dir/share/man/man1/isolate-serve.1" || fail "man pages"
	bash -n "$dir/share/bash-completion/completions/isolate" || fail "bash completion"
	# The client where the tarball puts it, a Python with no site
	# packages (no pip, no wheel): the standard library alone.
	env -i PATH=/usr/bin:/bin PYTHONPATH="$dir/share/isolate/python" python3 -S -c 'import isolate_sandbox, isolate_sandbox.runner' ||
		fail "the Python client does not import from share/isolate/python"
	dir=$dir/bin
	case $arch in
	amd64) run=(env); machine='Advanced Micro Devices X86-64' ;;
	arm64) run=(qemu-aarch64-static); machine=AArch64 ;;
	esac
	for bin in isolate isolate-serve; do
		readelf -h "$dir/$bin" | grep -q "Machine: *$machine" || fail "$bin is not for $machine"
		! readelf -lW "$dir/$bin" | grep -q 'program interpreter' || fail "$bin is not static"
	done
	got=$("${run[@]}" "$dir/isolate-serve" --version)
	[ "$got" = "isolate-serve $version" ] || fail "isolate-serve --version says '$got', not 'isolate-serve $version'"
	got=$("${run[@]}" "$dir/isolate" version)
	[ "$got" = "isolate $version" ] || fail "isolate version says '$got', not 'isolate $version'"
	checked=0
	top=$("${run[@]}" "$dir/isolate" --help)
	for cmd in $(commands <<<"$top"); do
		# serve execs isolate-serve, checked below (qemu-user cannot
		# exec a foreign binary from inside a foreign one).
		# serve and mcp are isolate-serve's: their flags below.
		case $cmd in help | serve | mcp) ;; *) check_help "$cmd" ;; esac
	done
	[ "$checked" -ge 10 ] || fail "only $checked commands found in isolate --help"
	# The service's flags: Go's flag package answers --help with exit 2.
	serve=$("${run[@]}" "$dir/isolate-serve" --help 2>&1) || true
	grep -q -- '-socket-group' <<<"$serve" || fail "isolate-serve --help: $serve"
	mcp=$("${run[@]}" "$dir/isolate-serve" mcp --help 2>&1) || fail "isolate-serve mcp --help: exit $?: $mcp"
	grep -q -- '-allow-rlimit-only' <<<"$mcp" || fail "isolate-serve mcp --help: $mcp"
	if [ "$arch" = amd64 ]; then
		serve=$("$dir/isolate" serve --help 2>&1) || true
		grep -q -- '-socket-group' <<<"$serve" || fail "isolate serve --help: $serve"
	fi
	if [ "$arch" = amd64 ] && [ "$(id -u)" = 0 ]; then
		"$dir/isolate" run --json -- /bin/true | grep -q '"status": *"OK"' || fail "a run of /bin/true is not OK"
	fi
	echo "release-check: $arch: static, version $version, --help of $checked commands parsed"
done
