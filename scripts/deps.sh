#!/bin/bash
# Installs what building and testing isolate needs and is missing, then
# prints the directory of a Go toolchain new enough for go.mod:
#   - Debian packages (from the mirror in this machine's apt configuration),
#     plus any package names given as arguments;
#   - Go: /usr/local/go if new enough, else the `go` on PATH if it can fetch
#     the toolchain go.mod asks for (Go >= 1.21), else Debian's golang-go
#     only to learn the module proxy, then the toolchain module go.mod names,
#     fetched from that proxy (the same thing `go` itself does with
#     GOTOOLCHAIN=auto).
# Safe to run again: it installs only what is absent. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { [ "${CI:-}" = true ] || echo "deps: $*" >&2; }

need=()
for pkg in libseccomp-dev musl-tools linux-libc-dev gcc libc6-dev make pkg-config ca-certificates curl unzip "$@"; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
apt_updated=
apt_install() {
	export DEBIAN_FRONTEND=noninteractive
	if [ -z "$apt_updated" ]; then apt-get update -qq >/dev/null; apt_updated=1; fi
	apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	apt_install "${need[@]}"
fi

want=$(awk '/^go /{print $2}' go.mod)        # e.g. 1.26.8
wantminor=$(echo "$want" | cut -d. -f2)
minor_of() { "$1" env GOVERSION 2>/dev/null | sed -E 's/^go1\.([0-9]+).*/\1/'; }

for cand in /usr/local/go/bin/go "$(command -v go || true)"; do
	[ -x "$cand" ] || continue
	m=$(minor_of "$cand" || echo 0)
	if [ "${m:-0}" -ge "$wantminor" ]; then dirname "$cand"; exit 0; fi
	if [ "${m:-0}" -ge 21 ]; then
		# Go >= 1.21 fetches the toolchain go.mod names by itself.
		GOTOOLCHAIN=auto "$cand" version >/dev/null && { dirname "$cand"; exit 0; }
	fi
done

# Bootstrap: Debian's Go is too old to fetch toolchains; fetch the toolchain
# module from the module proxy it is configured with.
cache=/var/cache/isolate-go
if [ ! -x "$cache/go/bin/go" ]; then
	command -v go >/dev/null || { log "installing golang-go"; apt_install golang-go; }
	proxy=$(go env GOPROXY | tr ',|' '\n\n' | grep -E '^https?://' | head -1)
	[ -n "$proxy" ] || { echo "deps: no Go module proxy configured (go env GOPROXY)" >&2; exit 1; }
	log "fetching Go $want toolchain module from the Go module proxy"
	mkdir -p "$cache"
	tmp=$(mktemp -d)
	curl -fsSL -o "$tmp/go.zip" "$proxy/golang.org/toolchain/@v/v0.0.1-go$want.linux-amd64.zip"
	unzip -q "$tmp/go.zip" -d "$tmp"
	rm -rf "$cache/go"
	mv "$tmp/golang.org/toolchain@v0.0.1-go$want.linux-amd64" "$cache/go"
	rm -rf "$tmp"
	chmod -R a+rX "$cache/go"
	chmod a+x "$cache/go/bin/"* "$cache/go/pkg/tool/"*/* 2>/dev/null || true
fi
echo "$cache/go/bin"
