package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An image's own links never make the plan read or bind a host file: its
// resolv.conf is read with its links resolved inside the image, and an
// /etc entry reached through a link is not bound.
func TestPlanKeepsImageLinksInside(t *testing.T) {
	host := t.TempDir()
	secret := filepath.Join(host, "shadow")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	image := t.TempDir()
	for _, d := range []string{"etc", "usr"} {
		os.Mkdir(filepath.Join(image, d), 0o755)
	}
	for _, name := range []string{"resolv.conf", "ld.so.cache", "alternatives"} {
		if err := os.Symlink(secret, filepath.Join(image, "etc", name)); err != nil {
			t.Fatal(err)
		}
	}
	// The image's own file, where its absolute link points inside it.
	os.MkdirAll(filepath.Join(image, filepath.Dir(secret)), 0o755)
	os.WriteFile(filepath.Join(image, secret), []byte("nameserver 10.0.0.1\n"), 0o644)
	ops, err := Plan(&Layout{Image: image, HostNet: true, UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var resolv string
	for _, op := range ops {
		switch op := op.(type) {
		case WriteFile:
			if strings.HasSuffix(op.Path, "etc/resolv.conf") {
				resolv = op.Content
			}
		case Mount:
			if strings.Contains(op.Source, "/etc/") {
				t.Errorf("bound an /etc entry reached through a link: %s", op.Step)
			}
		}
	}
	if resolv != "nameserver 10.0.0.1\n" {
		t.Errorf("resolv.conf: %q, want the image's own file", resolv)
	}
}
