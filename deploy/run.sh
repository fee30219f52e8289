#!/bin/bash
# Starts the isolate service container with the privileges it needs and no
# others (docs/INSTALL.md, "Container image", says why each):
#   deploy/run.sh IMAGE NAME SOCKET_DIR [isolate-serve flags...]
# SOCKET_DIR (on the host) gets api.sock. The container's root is host uid
# $ISOLATE_CONTAINER_UID (default 200000), in a user namespace of 65536
# ids; the cgroup subtree isolate-container-NAME, made here and owned by
# that uid, is the only cgroup it may write (after podman rm:
# deploy/cgroup-subtree.sh remove isolate-container-NAME).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 IMAGE NAME SOCKET_DIR [isolate-serve flags...]" >&2; exit 2; }
image=$1 name=$2 sockets=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
root_id=${ISOLATE_CONTAINER_UID:-200000}
cgroup=isolate-container-$name

"$here/cgroup-subtree.sh" make "$cgroup" "$root_id" > /dev/null
mkdir -p "$sockets"
chown "$root_id:$root_id" "$sockets"

profile=$(mktemp)
trap 'rm -f "$profile"' EXIT
python3 "$here/seccomp.py" > "$profile"

# podman's default rlimits (nofile 1048576) may exceed what this host
# allows; ask for its own hard limits.
nproc=$(ulimit -Hu)
[ "$nproc" = unlimited ] || [ "$nproc" -le 32768 ] || nproc=32768
nofile=$(ulimit -Hn)

# runc: crun refuses cgroup hybrid hosts ("cgroups in hybrid mode not
# supported"); runc runs on v1, hybrid and v2.
podman run -d --name "$name" --runtime runc \
	--uidmap "0:$root_id:65536" --gidmap "0:$root_id:65536" \
	--security-opt seccomp="$profile" --security-opt 'unmask=/proc/*' \
	-v /sys/fs/cgroup:/sys/fs/cgroup:rw -e ISOLATE_CGROUP_ROOT="/$cgroup" \
	-v "$sockets:/run/isolate" \
	--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" \
	"$image" --socket /run/isolate/api.sock --cli-socket none "$@"
