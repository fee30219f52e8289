#!/bin/bash
# Builds isolate/boxinit/initbin/isolate-init, the box's init as a small static
# executable (isolate/boxinit/initbin/doc.go), from the same C files, flags and
# headers that cgo compiles into isolate. Builds with the `initbin` tag
# embed it; run this first (make build and scripts/test.sh do).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cgo-env.sh
out=isolate/boxinit/initbin/isolate-init
# (The -Wall flags are init.go's #cgo CFLAGS.)
$CC $CGO_CFLAGS -Wall -Wno-unused-result $CGO_LDFLAGS -s \
	-o "$out" isolate/boxinit/init_*.c isolate/boxinit/procs.c isolate/boxinit/initbin/main.c
