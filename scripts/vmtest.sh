#!/bin/bash
# vmtest: proves isolate's cgroup v2 path on a real kernel. On a hybrid host
# (v1 controllers, as CI's) the host tests never reach memory.max,
# memory.peak, memory.events, pids.max, cpu.max, cpu.stat or the program's
# placement through the v2 cgroup.procs; this boots a stock Debian kernel
# under qemu with only cgroup2 mounted and runs scripts/vmtest/driver there
# against a static isolate binary.
#
# Steps: install qemu, busybox-static, cpio (apt) -> fetch the kernel of
# linux-image-amd64 with apt-get download, unpack only its vmlinuz and
# decompress it to a vmlinux (booted via PVH: twice as fast under emulation
# as the xz bzImage) into a cache reused between runs -> build isolate, the
# driver and the probe statically -> pack an initramfs -> boot it -> print
# the guest's report and exit with its status.
#
# Environment: VMTEST_CACHE (kernel cache, default /var/cache/isolate-vmtest),
# VMTEST_KERNEL (a linux-image-* package instead of linux-image-amd64's),
# VMTEST_TIMEOUT (seconds the VM may run, default 120; it needs about 15).
# GOFLAGS passes to go build as usual.
#
# By hand, not in CI: VMTEST_BENCH (arguments of `isolate bench`, e.g.
# "--handover --runs 60 --ioi /vmtest/ioi-isolate") makes the guest run the
# bench instead of the driver and print its output. VMTEST_IOI (a static
# ioi/isolate built with CONFIGDIR=/vmtest/ioi) puts it at
# /vmtest/ioi-isolate with a config whose cg_root the guest delegates to
# it, as its isolate-cg-keeper would (see docs/VMTEST.md).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${VMTEST_CACHE:-/var/cache/isolate-vmtest}
timeout=${VMTEST_TIMEOUT:-120}
began=$(date +%s.%N)

say() { echo "vmtest: $*" >&2; }
die() {
	say "$*"
	exit 1
}
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# deps.sh installs what is missing and prints the directory of a Go
# toolchain new enough for go.mod.
godir=$(./scripts/deps.sh qemu-system-x86 busybox-static cpio xz-utils uidmap)
if [ -d "$godir" ]; then
	export PATH="$godir:$PATH"
else
	export PATH="$PATH:/usr/local/go/bin"
fi

# kernel_package names the Debian kernel to boot: what the linux-image-amd64
# metapackage of this machine's apt sources depends on now.
kernel_package() {
	if [ -n "${VMTEST_KERNEL:-}" ]; then
		echo "$VMTEST_KERNEL"
		return
	fi
	local pkg
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
	if [ -z "$pkg" ]; then
		apt-get update -qq >/dev/null
		pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
	fi
	[ -n "$pkg" ] || die "cannot find the kernel package of linux-image-amd64 in the apt sources"
	echo "$pkg"
}

# fetch_kernel leaves the package's uncompressed kernel at $cache/$pkg/vmlinux.
fetch_kernel() {
	local pkg=$1 dir=$cache/$1
	[ -s "$dir/vmlinux" ] && return
	say "fetching $pkg"
	local tmp
	tmp=$(mktemp -d "$cache/.fetch-XXXXXX")
	# apt downloads as its sandbox user when that user may write here.
	chown _apt "$tmp" 2>/dev/null || true
	(cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1) || {
		rm -rf "$tmp"
		die "apt-get download $pkg failed"
	}
	dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp" --wildcards './boot/vmlinuz-*'
	local z
	z=$(echo "$tmp"/boot/vmlinuz-*)
	# A bzImage is a decompressor followed by the xz-compressed kernel: find
	# the xz magic, decompress from there (xz then complains about what
	# follows the stream, which is not part of it) and check for an ELF.
	local off
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$z" | head -1 | cut -d: -f1)
	[ -n "$off" ] || {
		rm -rf "$tmp"
		die "no xz stream in $z"
	}
	tail -c +$((off + 1)) "$z" | xz -dc >"$tmp/vmlinux" 2>/dev/null || true
	if [ "$(head -c 4 "$tmp/vmlinux" | od -An -c | tr -d ' ')" != '177ELF' ]; then
		rm -rf "$tmp"
		die "could not extract vmlinux from $z"
	fi
	mkdir -p "$dir"
	mv "$tmp/vmlinux" "$dir/vmlinux"
	rm -rf "$tmp"
	# Kernels the mirror no longer names are not booted again.
	find "$cache" -mindepth 1 -maxdepth 1 -type d -name 'linux-image-*' ! -name "$pkg" -exec rm -rf {} +
}

mkdir -p "$cache"
pkg=$(kernel_package)
fetch_kernel "$pkg"
vmlinux=$cache/$pkg/vmlinux

work=$(mktemp -d /tmp/isolate-vmtest-XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/initramfs
mkdir -p "$root"/{bin,dev,proc,sys,tmp,run,newroot,usr/bin,vmtest/t}

say "building isolate, the driver and the probe (static)"
# A static isolate (libseccomp linked in), as `make build` makes it.
./scripts/build-init.sh
(. scripts/cgo-env.sh && go build -tags urfave_cli_no_docs,netgo,osusergo,initbin -trimpath -o "$root/vmtest/isolate" ./cmd/isolate)
(. scripts/cgo-env.sh && go build -tags urfave_cli_no_docs,netgo,osusergo,initbin -trimpath -o "$root/vmtest/isolate-serve" ./cmd/isolate-serve)
CGO_ENABLED=0 go build -trimpath -o "$root/vmtest/driver" ./scripts/vmtest/driver
gcc -O1 -static -pthread -o "$root/vmtest/t/probe" internal/bench/testdata/probe.c

if [ -n "${VMTEST_BENCH:-}" ]; then
	printf '%s\n' "$VMTEST_BENCH" >"$root/vmtest/bench"
fi
if [ -n "${VMTEST_IOI:-}" ]; then
	install -m 0755 "$VMTEST_IOI" "$root/vmtest/ioi-isolate"
	# Its boxes bind /lib (here empty); its uids are apart from ours.
	mkdir -p "$root/vmtest/ioi" "$root/lib"
	cat >"$root/vmtest/ioi/isolate" <<-EOF
		box_root = /var/lib/ioi-isolate
		lock_root = /run/ioi-isolate/locks
		cg_root = /sys/fs/cgroup/ioi-isolate
		first_uid = 70000
		first_gid = 70000
		num_boxes = 1000
	EOF
fi

cp /bin/busybox "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
	[ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
# The user of the runs without root (uid 1000, scripts/vmtest/driver), and
# uidmap's setuid newuidmap and newgidmap with the libraries they load: its
# runs with subordinate ids. The driver writes /etc/subuid itself.
mkdir -p "$root/etc"
printf 'root:x:0:0:root:/:/bin/sh\nvmuser:x:1000:1000::/:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nvmuser:x:1000:\n' >"$root/etc/group"
for tool in /usr/bin/newuidmap /usr/bin/newgidmap; do
	install -m 4755 "$tool" "$root$tool"
	for lib in $(ldd "$tool" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
		[ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
	done
done
install -m 0755 scripts/vmtest/init "$root/init"
mknod -m 0600 "$root/dev/console" c 5 1
# A user-namespace child can exec nothing under a root it cannot search.
chmod -R go+rX,go-w "$root"
chmod 0755 "$root"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$work/initramfs.gz"

accel=(-accel tcg,thread=multi -cpu max)
# The KVM here is paravirtual: stock kernels fail under it. Use it only
# with hardware virtualization.
if grep -qwE 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ]; then
	accel=(-accel kvm -cpu host)
fi

# The guest's timing checks suffer when the host starves the emulator's
# vCPU threads: run them at a higher priority than ordinary host work, and
# say how much CPU the rest of the host took meanwhile.
# host_busy: CPU ticks the host has spent on anything but idling.
host_busy() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
# children_cpu: CPU ticks of this script's finished children (qemu, once
# timeout has reaped it and exited).
children_cpu() { awk '{ print $16 + $17 }' "/proc/$$/stat"; }
say "booting $pkg (${accel[1]}), at most ${timeout} s"
boot=$(date +%s.%N)
busy0=$(host_busy)
ours0=$(children_cpu)
set +e
timeout -k 5 "$timeout" nice -n -10 qemu-system-x86_64 \
	-nodefaults -no-user-config -display none -no-reboot \
	"${accel[@]}" -m 1024 -smp 2 \
	-kernel "$vmlinux" -initrd "$work/initramfs.gz" \
	-append "console=ttyS0 quiet panic=-1" \
	-serial "file:$work/console.log" -serial "file:$work/report.log" \
	-device isa-debug-exit,iobase=0xf4,iosize=0x04
qrc=$?
set -e
vmtime=$(elapsed "$boot")
ours=$(($(children_cpu) - ours0))
others=$(($(host_busy) - busy0 - ours))
cpu_note=$(awk -v q="$ours" -v o="$others" -v hz="$(getconf CLK_TCK)" -v w="$vmtime" -v n="$(nproc)" \
	'BEGIN { if (o < 0) o = 0; printf "host CPU during the VM: qemu %.1f s, other processes %.1f s, of %.1f s on %d CPUs", q / hz, o / hz, w * n, n }')

cat "$work/report.log"
# The guest ends qemu with status (driver status + 16) << 1 | 1.
if [ "$qrc" -ge 33 ] && [ $((qrc & 1)) -eq 1 ]; then
	rc=$(((qrc >> 1) - 16))
	why="guest status $rc"
else
	rc=1
	why="the VM ended without a status (qemu exit $qrc$([ "$qrc" -eq 124 ] && echo ": timed out after ${timeout} s"))"
	say "kernel console, last lines:"
	tail -n 40 "$work/console.log" >&2
fi
if [ "$rc" -ne 0 ]; then
	say "FAILED ($why) in $(elapsed "$began") s, VM $vmtime s; $cpu_note"
	exit 1
fi
if [ -n "${VMTEST_BENCH:-}" ]; then
	say "bench done in $(elapsed "$began") s (VM $vmtime s; $cpu_note)"
	exit 0
fi
grep -q '^vmtest: [0-9]* passed, 0 failed$' "$work/report.log" || die "the report is incomplete"
say "ok in $(elapsed "$began") s (VM boot + checks $vmtime s; $cpu_note)"
