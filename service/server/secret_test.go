package server

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// kubeletSecret lays out dir as the kubelet lays out a Secret volume:
// each key a symlink through ..data to a file in a timestamped directory.
func kubeletSecret(t *testing.T, dir, stamp string, files map[string]string, mode os.FileMode) {
	t.Helper()
	ts := filepath.Join(dir, stamp)
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		p := filepath.Join(ts, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	// The swap: a new link to the new directory, renamed over ..data.
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(stamp, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
}

const goodToken = "Zx8dQ2vN7rT4kP1mW9sL3bY6"

// A Secret volume as the kubelet makes it is read through its links, and
// again after the kubelet swaps in a new version.
func TestReadSecretKubeletLayout(t *testing.T) {
	dir := t.TempDir()
	kubeletSecret(t, dir, "..2026_11_29_06_00_00.123456789",
		map[string]string{"token": goodToken + "\n", "queue-url": "redis://:pw@redis:6379/0\n"}, 0o400)
	if tok, err := ReadToken(filepath.Join(dir, "token")); err != nil || tok != goodToken {
		t.Fatalf("token through the kubelet's links: %q %v", tok, err)
	}
	if u, err := ReadSecret(filepath.Join(dir, "queue-url")); err != nil || u != "redis://:pw@redis:6379/0" {
		t.Fatalf("queue-url through the kubelet's links: %q %v", u, err)
	}
	// A relative path works as an absolute one.
	wd, _ := os.Getwd()
	defer os.Chdir(wd)
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	if tok, err := ReadToken("token"); err != nil || tok != goodToken {
		t.Fatalf("token by a relative name: %q %v", tok, err)
	}
	os.Chdir(wd)

	// The atomic swap: a new timestamped directory, ..data renamed to
	// it, the old one removed.
	newer := goodToken + "NEW"
	kubeletSecret(t, dir, "..2026_11_29_07_00_00.987654321", map[string]string{"token": newer + "\n"}, 0o400)
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_29_06_00_00.123456789")); err != nil {
		t.Fatal(err)
	}
	if tok, err := ReadToken(filepath.Join(dir, "token")); err != nil || tok != newer {
		t.Fatalf("token after the kubelet's swap: %q %v", tok, err)
	}
	// The mode is the file's, not the links' (0777).
	kubeletSecret(t, dir, "..2026_11_29_08_00_00.000000001", map[string]string{"token": goodToken + "\n"}, 0o644)
	if _, err := ReadToken(filepath.Join(dir, "token")); err == nil || !strings.Contains(err.Error(), "mode 0644") {
		t.Fatalf("a target others may read: %v", err)
	}
}

// A link that leads out of the secret's directory is refused, whatever
// it points at and however it gets there.
func TestReadSecretRefusesEscapes(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "secret")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "token"), []byte(goodToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"dotdot":   "../outside/token",
		"absolute": filepath.Join(outside, "token"),
		"proc":     "/proc/self/root" + filepath.Join(outside, "token"),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// ..data itself leading out.
	if err := os.Symlink(outside, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/token", filepath.Join(dir, "viadata")); err != nil {
		t.Fatal(err)
	}
	links["viadata"] = "..data/token"
	for name := range links {
		if tok, err := ReadSecret(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s: a link out of the directory was followed: %q", name, tok)
		}
	}
	// The plain file beside them still reads.
	if err := os.WriteFile(filepath.Join(dir, "plain"), []byte(goodToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := ReadSecret(filepath.Join(dir, "plain")); err != nil || tok != goodToken {
		t.Errorf("a plain file: %q %v", tok, err)
	}
}

// The file must be a regular one, of this process's user or root.
func TestReadSecretOwnerAndType(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSecret(filepath.Join(dir, "adir")); err == nil {
		t.Error("a directory accepted as a secret")
	}
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root")
	}
	p := filepath.Join(dir, "theirs")
	if err := os.WriteFile(p, []byte(goodToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSecret(p); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("a file of another user: %v", err)
	}
	// Behind a link, the target's owner counts.
	if err := os.Symlink("theirs", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSecret(filepath.Join(dir, "link")); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("a link to a file of another user: %v", err)
	}
}

// A token too short, or a placeholder (the shipped Secret's among them),
// is refused.
func TestCheckToken(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/secret.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*token:\s*"?([^"\s]+)"?`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no token in deploy/kubernetes/secret.yaml")
	}
	for _, tok := range []string{string(m[1]), "CHANGE-ME-a-long-random-token", "changeme-changeme-changeme",
		"replace_me_with_a_real_token", "<your-token-goes-here>", "aaaaaaaaaaaaaaaaaaaaaaaa", "your-token-here-0123", "short-token"} {
		if err := CheckToken(tok); err == nil {
			t.Errorf("token %q accepted", tok)
		}
	}
	for _, tok := range []string{goodToken, "boundary-token-0123456789", "s3cret-session-token"} {
		if err := CheckToken(tok); err != nil {
			t.Errorf("token %q refused: %v", tok, err)
		}
	}
}
