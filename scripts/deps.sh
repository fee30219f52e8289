#!/bin/sh
# Installs what building and testing isolate needs and is missing: Debian
# packages (from the mirror in this machine's apt configuration) and the Go
# module downloads. Safe to run again: it installs only what is absent.
set -eu
need=""
for pkg in libseccomp-dev gcc make pkg-config; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need="$need $pkg"
done
for pkg in $*; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need="$need $pkg"
done
if [ -n "$need" ]; then
	echo "deps: installing$need" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
if ! command -v go >/dev/null 2>&1; then
	if [ -x /usr/local/go/bin/go ]; then
		echo "deps: go is at /usr/local/go/bin; add it to PATH" >&2
	else
		echo "deps: installing golang-go" >&2
		apt-get install -y -qq golang-go >/dev/null
	fi
fi
