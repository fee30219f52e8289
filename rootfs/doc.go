// Package rootfs assembles the file system a box sees, and holds the
// built images: looked up, unpacked, mounted (imagebuild builds them).
//
// Plan describes, and the box's init carries out in its new mount namespace,
// a tmpfs root holding read-only binds of an image's /usr, /bin, /lib*
// (the host's own for the image "host"), a generated /etc, a fresh /proc, a
// minimal /dev and writable size-limited /box and /tmp, then pivots into it.
// Nothing it mounts is visible outside the box, so nothing can leak: the
// kernel drops every mount with the namespace.
package rootfs
