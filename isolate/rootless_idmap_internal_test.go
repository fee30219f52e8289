package isolate

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// idmapUserns maps the caller's uid and gid to the box user's and
// nothing else: through a copy idmapped by it, the caller's file is the
// box user's and root's is nobody's.
func TestIdmapUserns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: maps a user namespace, copies a mount")
	}
	dir := t.TempDir()
	for name, uid := range map[string]int{"caller": 1234, "root": 0, "box": FirstUID + 7} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, nil, 0o600)
		os.Chown(p, uid, uid)
	}
	ns, err := idmapUserns(Cred{UID: 1234, GID: 1234}, boxCred(7))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{"caller": FirstUID + 7, "root": 65534, "box": 65534} {
		var st unix.Stat_t
		if err := unix.Fstatat(tree, name, &st, 0); err != nil || st.Uid != want || st.Gid != want {
			t.Errorf("%s's file through the idmapped copy: %v, uid %d gid %d, want %d", name, err, st.Uid, st.Gid, want)
		}
	}
}
