# Sourced by every script that builds isolate: cgo compiles and links
# against musl, statically. glibc probes the CPU with cpuid at every
# start-up, a VM exit each, about 0.5 ms per process on a KVM guest;
# isolate starts twice per run (the supervisor, then the box's init), so
# the binary carries musl instead (see docs/DESIGN.md).
#
# musl-gcc sees only musl's headers: build/musl/include adds the kernel's
# (linux-libc-dev) and libseccomp's, build/musl/lib holds libseccomp.a
# alone, so that no glibc archive beside it can be picked up. Needs
# musl-tools, linux-libc-dev and libseccomp-dev (scripts/deps.sh).
_cgo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/musl
_cgo_arch=$(gcc -print-multiarch)
_cgo_kernel=/usr/include
export CC=musl-gcc
# GOARCH=arm64 on another host cross-compiles (make release): Debian's
# aarch64 cross gcc with the arm64 musl (musl-dev:arm64), the cross
# kernel headers and libseccomp-dev:arm64's archive.
if [ "${GOARCH:-}" = arm64 ] && [ "$_cgo_arch" != aarch64-linux-gnu ]; then
	_cgo_arch=aarch64-linux-gnu
	_cgo_root=$_cgo_root-arm64
	_cgo_kernel=/usr/aarch64-linux-gnu/include
	CC="aarch64-linux-gnu-gcc -specs /usr/lib/aarch64-linux-musl/musl-gcc.specs"
fi
mkdir -p "$_cgo_root/include" "$_cgo_root/lib"
ln -sfn "$_cgo_kernel/linux" "$_cgo_root/include/linux"
ln -sfn "$_cgo_kernel/asm-generic" "$_cgo_root/include/asm-generic"
if [ -d "$_cgo_kernel/asm" ]; then
	ln -sfn "$_cgo_kernel/asm" "$_cgo_root/include/asm"
else
	ln -sfn "/usr/include/$_cgo_arch/asm" "$_cgo_root/include/asm"
fi
ln -sfn /usr/include/seccomp.h "$_cgo_root/include/seccomp.h"
ln -sfn /usr/include/seccomp-syscalls.h "$_cgo_root/include/seccomp-syscalls.h"
ln -sfn "/usr/lib/$_cgo_arch/libseccomp.a" "$_cgo_root/lib/libseccomp.a"
export CGO_ENABLED=1
export CGO_CFLAGS="-O2 -g -idirafter $_cgo_root/include"
export CGO_LDFLAGS="-L$_cgo_root/lib -static"
unset _cgo_root _cgo_arch _cgo_kernel
