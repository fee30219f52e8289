// Package imagebuild builds the language images (isolate image build):
// a Debian tree from the host's mirrors with debootstrap, the language's
// packages installed in it, the box user added, stripped and packed as
// squashfs, then installed through rootfs.InstallImage. Only root builds
// images; the runtime (rootfs, isolate) only reads them.
package imagebuild
