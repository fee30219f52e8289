#!/bin/bash
# The kernel's share of a run, measured directly (scripts/kernel-costs.c):
# creating each namespace, a fresh process joining cgroups through
# cgroup.procs against v1's tasks, and what page faults, system calls and
# fork against vfork cost here. Root; makes its cgroups below its own
# (one per hierarchy) and removes them.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "kernel-costs: run as root" >&2; exit 2; }
work=$(mktemp -d)
made=()
cleanup() {
	for d in "${made[@]}"; do rmdir "$d" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
gcc -O2 -Wall -o "$work/kernel-costs" scripts/kernel-costs.c
"$work/kernel-costs" ns
"$work/kernel-costs" faults

# One probe cgroup below this shell's own cgroup in each hierarchy.
procs=() tasks=()
while IFS=: read -r _ ctrl path; do
	case "$ctrl" in
	"") mnt=/sys/fs/cgroup; [ -d /sys/fs/cgroup/unified ] && mnt=/sys/fs/cgroup/unified ;;
	memory|pids|cpu|cpuacct) mnt=/sys/fs/cgroup/$ctrl ;;
	*) continue ;;
	esac
	[ -f "$mnt$path/cgroup.procs" ] || continue
	d="$mnt$path/kernel-costs-$$"
	mkdir "$d" 2>/dev/null || continue
	made+=("$d")
	procs+=("$d/cgroup.procs")
	[ -f "$d/tasks" ] && tasks+=("$d/tasks")
done < /proc/self/cgroup
[ ${#procs[@]} -gt 0 ] && "$work/kernel-costs" cgroup "${procs[@]}"
[ ${#tasks[@]} -gt 0 ] && "$work/kernel-costs" cgroup "${tasks[@]}"
exit 0
