#!/bin/bash
# Builds every language image that is missing or whose definition changed
# (debootstrap + squashfs, no Docker), from the Debian mirror in this
# machine's apt configuration, and unpacks each into the tree runs bind
# (an image built before trees is unpacked, not rebuilt: a few seconds).
# Images and the shared base stay cached in /var/lib/isolate between runs,
# so on a machine that has them this takes a second. Quiet when CI=true,
# except on failure. Needs root.
#   scripts/images.sh                  every language
#   scripts/images.sh c python         some
#   ISOLATE_BIN=path scripts/images.sh use an isolate binary already built
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "images: run as root (debootstrap, chroot, mounts)" >&2; exit 2; }
godir=$(./scripts/deps.sh debootstrap squashfs-tools) # (a failure stops here)
export PATH="$godir:$PATH"
bin=${ISOLATE_BIN:-}
if [ -z "$bin" ]; then
	work=$(mktemp -d /tmp/isolate-images.XXXXXX)
	trap 'rm -rf "$work"' EXIT
	bin="$work/isolate"
	. scripts/cgo-env.sh
	go build -tags urfave_cli_no_docs,netgo,osusergo -o "$bin" ./cmd/isolate
fi
if [ $# -gt 0 ]; then
	"$bin" image build "$@"
else
	"$bin" image build --all
fi
[ "${CI:-}" = true ] || "$bin" image list
