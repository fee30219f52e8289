#!/bin/bash
# What each chosen dependency adds to the start of every isolate process
# (docs/PERFORMANCE.md): tiny static programs built like isolate (cgo,
# musl) that import one dependency and exit at once, timed interleaved
# against an empty one and against `isolate version` (scripts/ab.py).
# Package initialisers run whatever command the binary runs, so this is a
# floor every `isolate run` pays.
#
#   scripts/dep-costs.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-200}
export PATH="$(./scripts/deps.sh):$PATH"
. scripts/cgo-env.sh
[ -x bin/isolate ] || make build >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$PWD
module=$(go list -m)
{
	echo "module depcosts"
	sed -n '/^go /p' go.mod
	echo "require $module v0.0.0"
	echo "replace $module => $root"
} >"$work/go.mod"
cp go.sum "$work/"
# name: imports (space-separated)
cases=(
	"empty:"
	"containerd-cgroups-root:github.com/containerd/cgroups/v3"
	"containerd-cgroup1:github.com/containerd/cgroups/v3/cgroup1"
	"containerd-cgroup2:github.com/containerd/cgroups/v3/cgroup2"
	"containerd-cgroup1+2:github.com/containerd/cgroups/v3/cgroup1 github.com/containerd/cgroups/v3/cgroup2"
	"urfave-cli:github.com/urfave/cli/v2"
	"seccomp-pkg(libseccomp+libcontainer):$module/seccomp"
)
cmds=()
for c in "${cases[@]}"; do
	name=${c%%:*}
	dir="$work/$(echo "$name" | tr -c 'a-z0-9\n' '_')"
	mkdir -p "$dir"
	{
		echo "package main"
		echo '// #include <stdlib.h>'
		echo 'import "C"'
		echo 'import "os"'
		for imp in ${c#*:}; do echo "import _ \"$imp\""; done
		echo "func main() { os.Exit(0) }"
	} >"$dir/main.go"
	(cd "$work" && GOFLAGS=-mod=mod go build -tags urfave_cli_no_docs,netgo,osusergo -trimpath -ldflags '-s -w' -o "$dir/bin" "./$(basename "$dir")") 2>"$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
	cmds+=("$dir/bin")
	echo "$name: $(stat -c %s "$dir/bin") bytes" >&2
done
python3 scripts/ab.py --rounds "$rounds" "${cmds[@]}" "$root/bin/isolate version" | sed "s#$work/##; s#/bin\$##"
