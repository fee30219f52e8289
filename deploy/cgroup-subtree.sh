#!/bin/bash
# Makes or removes a cgroup subtree for isolate's boxes (ISOLATE_CGROUP_ROOT
# names it): /NAME in each v1 controller isolate uses (memory, pids, cpu,
# cpuacct) on v1 and hybrid hosts, or /NAME in the v2 tree with those
# controllers enabled for its children. Prints the directories.
#   deploy/cgroup-subtree.sh make NAME [OWNER]   (OWNER: a uid that may write it)
#   deploy/cgroup-subtree.sh remove NAME         (fails if a cgroup is left in it)
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 make|remove NAME [OWNER]" >&2; exit 2; }
action=$1 name=$2 owner=${3:-}
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
	dirs=("/sys/fs/cgroup/$name")
else
	dirs=()
	for c in memory pids cpu cpuacct; do dirs+=("/sys/fs/cgroup/$c/$name"); done
fi
for d in "${dirs[@]}"; do
	case $action in
	make)
		mkdir -p "$d"
		if [ -e "$d/cgroup.subtree_control" ]; then echo "+cpu +memory +pids" > "$d/cgroup.subtree_control"; fi
		if [ -n "$owner" ]; then chown -R "$owner:$owner" "$d"; fi
		;;
	remove)
		[ -d "$d" ] || continue
		if find "$d" -mindepth 1 -type d | grep . >&2; then
			echo "cgroup-subtree: cgroups left in $d (above)" >&2
			exit 1
		fi
		rmdir "$d"
		;;
	*) echo "usage: $0 make|remove NAME [OWNER]" >&2; exit 2 ;;
	esac
	echo "$d"
done
