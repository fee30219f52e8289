#!/bin/bash
# Starts the isolate service container with the privileges it needs and no
# others (docs/INSTALL.md, "Container image", says why each):
#   deploy/run.sh IMAGE NAME SOCKET_DIR [isolate-serve flags...]
# SOCKET_DIR (on the host) gets api.sock. The container's root is host uid
# $ISOLATE_CONTAINER_UID (default 200000), in a user namespace of 65536
# ids; the cgroup subtree isolate-container-NAME, made here and owned by
# that uid, is the only cgroup it may write (after podman rm:
# deploy/cgroup-subtree.sh remove isolate-container-NAME).
#
# The images: $ISOLATE_CONTAINER_IMAGES (default /var/lib/isolate/images,
# where `isolate image build` and scripts/images.sh put them on the host)
# is bound on /var/lib/isolate/images, read-only. With
# ISOLATE_CONTAINER_IMAGES_RW=1 it is bound read-write and must be the
# container root's (it is made so when it does not exist): `isolate image
# import` in the container then installs there (the image of the tools
# target only, which has unsquashfs).
#
# The runtime: $ISOLATE_CONTAINER_RUNTIME, else podman's own, except on a
# hybrid cgroup host whose v2 hierarchy holds a controller, which crun
# refuses ("cgroups in hybrid mode not supported"): runc there.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 IMAGE NAME SOCKET_DIR [isolate-serve flags...]" >&2; exit 2; }
image=$1 name=$2 sockets=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
root_id=${ISOLATE_CONTAINER_UID:-200000}
cgroup=isolate-container-$name
images=${ISOLATE_CONTAINER_IMAGES:-/var/lib/isolate/images}

runtime=${ISOLATE_CONTAINER_RUNTIME:-}
if [ -z "$runtime" ] && [ -s /sys/fs/cgroup/unified/cgroup.controllers ]; then
	command -v runc > /dev/null || {
		echo "run.sh: this host's cgroup v2 hierarchy holds controllers ($(cat /sys/fs/cgroup/unified/cgroup.controllers)) beside v1: crun refuses it; install runc" >&2
		exit 1
	}
	runtime=runc
fi

images_mode=ro
if [ "${ISOLATE_CONTAINER_IMAGES_RW:-}" = 1 ]; then
	images_mode=rw
	[ -e "$images" ] || install -d -o "$root_id" -g "$root_id" -m 0755 "$images"
	[ "$(stat -c %u "$images")" = "$root_id" ] || {
		echo "run.sh: $images is not the container root's (uid $root_id): it cannot write there" >&2
		exit 1
	}
fi
[ -d "$images" ] || { echo "run.sh: no images directory $images (build or import images on the host first)" >&2; exit 1; }

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

# Each in one line (docs/INSTALL.md says more): the user namespace makes
# the container's root uid $root_id on the host; SYS_ADMIN, held in that
# namespace only, lets the service mount exec's tmpfs (fsopen); the
# seccomp profile allows the box's sethostname, setdomainname and setns
# and refuses what SYS_ADMIN would unlock besides; /proc unmasked so a box
# may mount its own; the cgroup subtree is the only cgroup it may write.
podman run -d --name "$name" ${runtime:+--runtime "$runtime"} \
	--uidmap "0:$root_id:65536" --gidmap "0:$root_id:65536" \
	--cap-add SYS_ADMIN \
	--security-opt seccomp="$profile" --security-opt 'unmask=/proc/*' \
	-v /sys/fs/cgroup:/sys/fs/cgroup:rw -e ISOLATE_CGROUP_ROOT="/$cgroup" \
	-v "$sockets:/run/isolate" -v "$images:/var/lib/isolate/images:$images_mode" \
	--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" \
	"$image" --socket /run/isolate/api.sock --cli-socket none "$@"
