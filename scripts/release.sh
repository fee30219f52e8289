#!/bin/bash
# make release: static isolate and isolate-serve for amd64 and arm64
# (musl, libseccomp linked in; arm64 cross-compiled with Debian's aarch64
# gcc, musl-dev:arm64 and libseccomp-dev:arm64), one tarball per
# architecture in dist/ and their SHA-256 sums in dist/SHA256SUMS, named by
# the version from git (git describe). Then scripts/release-check.sh runs
# every binary: the arm64 ones under qemu-user.
set -euo pipefail
cd "$(dirname "$0")/.."

# The arm64 libraries are Debian's own packages for that architecture
# (deps.sh updates the package lists before installing them).
dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
export PATH="$(./scripts/deps.sh gcc-aarch64-linux-gnu libc6-dev-arm64-cross musl-dev:arm64 libseccomp-dev:arm64 qemu-user-static):$PATH"

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
tags=urfave_cli_no_docs,netgo,osusergo,initbin
ldflags="-s -w -X main.version=$version -X github.com/isolate-sandbox/isolate/cmdline.Version=$version"
rm -rf dist
mkdir -p dist
for arch in amd64 arm64; do
	out=build/release/$arch
	rm -rf "$out"
	mkdir -p "$out"
	# The box's init is embedded (initbin): built for the same architecture.
	(export GOARCH=$arch GOOS=linux
	 . ./scripts/cgo-env.sh
	 ./scripts/build-init.sh
	 go build -tags "$tags" -trimpath -ldflags "$ldflags" -o "$out/isolate" ./cmd/isolate
	 go build -tags "$tags" -trimpath -ldflags "$ldflags" -o "$out/isolate-serve" ./cmd/isolate-serve)
	tar -C "$out" --owner=0 --group=0 --numeric-owner -czf "dist/isolate-$version-linux-$arch.tar.gz" isolate isolate-serve
done
# The tree's init is this host's again, for the builds and tests after this.
(. ./scripts/cgo-env.sh; ./scripts/build-init.sh)
(cd dist && sha256sum -- *.tar.gz > SHA256SUMS)
./scripts/release-check.sh "$version"
ls -l dist
