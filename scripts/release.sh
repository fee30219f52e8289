#!/bin/bash
# make release: static isolate and isolate-serve for amd64 and arm64
# (musl, libseccomp linked in; arm64 cross-compiled with Debian's aarch64
# gcc, musl-dev:arm64 and libseccomp-dev:arm64), one tarball per
# architecture in dist/ and their SHA-256 sums in dist/SHA256SUMS, named by
# the version from git (git describe). Each tarball unpacks into a prefix
# (tar -C /usr/local -xzf ...):
#   bin/isolate, bin/isolate-serve
#   share/man/man1/isolate.1, isolate-serve.1
#   share/bash-completion/completions/isolate
#   share/fish/vendor_completions.d/isolate.fish
#   share/doc/isolate/LICENSE, README.md, SECURITY.md, MIGRATING.md,
#     docs/*.md, docs/openapi.yaml, clients/python/README.md
#   share/isolate/systemd/isolate.service (system), isolate-user.service
#   share/isolate/python/isolate_sandbox (the Python client, standard
#     library only: on PYTHONPATH, or copied into site-packages)
# Then scripts/release-check.sh checks every tarball and runs every
# binary: the arm64 ones under qemu-user.
#
# It changes nothing on the host unless asked: what it needs and lacks
# (Debian packages, the arm64 dpkg architecture) it lists, and stops;
# RELEASE_INSTALL=1 installs them (CI passes it).
set -euo pipefail
cd "$(dirname "$0")/.."

# What the build needs (scripts/deps.sh's own list), and for arm64 the
# cross compiler, the arm64 libraries and qemu-user to check the result.
native=(libseccomp-dev musl-tools linux-libc-dev gcc libc6-dev make pkg-config ca-certificates curl unzip)
cross=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross musl-dev:arm64 libseccomp-dev:arm64 qemu-user-static)
missing=()
for pkg in "${native[@]}" "${cross[@]}"; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
no_arch=
dpkg --print-foreign-architectures | grep -qx arm64 || no_arch=1
if [ ${#missing[@]} -gt 0 ] || [ -n "$no_arch" ]; then
	if [ "${RELEASE_INSTALL:-}" != 1 ]; then
		echo "make release needs what this host lacks:" >&2
		[ -z "$no_arch" ] || echo "  the arm64 dpkg architecture (dpkg --add-architecture arm64; apt-get update)" >&2
		[ ${#missing[@]} -eq 0 ] || echo "  Debian packages: ${missing[*]}" >&2
		echo "install them yourself, or run: make release RELEASE_INSTALL=1 (as root: it does the above)" >&2
		exit 1
	fi
	if [ -n "$no_arch" ]; then
		echo "release: adding the arm64 dpkg architecture" >&2
		dpkg --add-architecture arm64
	fi
	# (deps.sh updates the package lists before installing.)
	echo "release: installing ${missing[*]}" >&2
fi
# With everything present this installs nothing: it prints the Go
# toolchain's directory (GODIR=... names one).
if [ -n "${GODIR:-}" ]; then
	export PATH="$GODIR:$PATH"
else
	godir=$(./scripts/deps.sh "${cross[@]}") # (a failure stops here)
	export PATH="$godir:$PATH"
fi

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
tags=urfave_cli_no_docs,netgo,osusergo,initbin
ldflags="-s -w -X main.version=$version -X github.com/isolate-sandbox/isolate/cli.Version=$version"
rm -rf dist
mkdir -p dist

# The architecture-independent part, written once (man pages and
# completions by this host's own build: make docs).
share=build/release/share
rm -rf "$share"
make docs GODIR="$(dirname "$(command -v go)")" VERSION="$version" > /dev/null
install -D -m 0644 build/doc/isolate.1 "$share/man/man1/isolate.1"
install -D -m 0644 build/doc/isolate-serve.1 "$share/man/man1/isolate-serve.1"
install -D -m 0644 build/doc/bash/isolate "$share/bash-completion/completions/isolate"
install -D -m 0644 build/doc/fish/isolate.fish "$share/fish/vendor_completions.d/isolate.fish"
# The docs keep the source tree's layout, so that their links resolve.
for doc in LICENSE README.md SECURITY.md MIGRATING.md docs/*.md docs/openapi.yaml clients/python/README.md; do
	install -D -m 0644 "$doc" "$share/doc/isolate/$doc"
done
install -D -m 0644 scripts/isolate.service "$share/isolate/systemd/isolate.service"
install -D -m 0644 scripts/isolate-user.service "$share/isolate/systemd/isolate-user.service"
mkdir -p "$share/isolate/python"
(cd clients/python/src && find isolate_sandbox -name '*.py' -o -name py.typed) | sort |
	while read -r f; do install -D -m 0644 "clients/python/src/$f" "$share/isolate/python/$f"; done

for arch in amd64 arm64; do
	out=build/release/$arch
	rm -rf "$out"
	mkdir -p "$out/bin"
	# The box's init is embedded (initbin): built for the same architecture.
	(export GOARCH=$arch GOOS=linux
	 . ./scripts/cgo-env.sh
	 ./scripts/build-init.sh
	 go build -tags "$tags" -trimpath -ldflags "$ldflags" -o "$out/bin/isolate" ./cmd/isolate
	 go build -tags "$tags" -trimpath -ldflags "$ldflags" -o "$out/bin/isolate-serve" ./cmd/isolate-serve)
	cp -a "$share" "$out/share"
	tar -C "$out" --owner=0 --group=0 --numeric-owner --sort=name -czf "dist/isolate-$version-linux-$arch.tar.gz" bin share
done
# The tree's init is this host's again, for the builds and tests after this.
(. ./scripts/cgo-env.sh; ./scripts/build-init.sh)
(cd dist && sha256sum -- *.tar.gz > SHA256SUMS)
./scripts/release-check.sh "$version"
ls -l dist
