package main

// Tests of images: building one from a definition of the test's own (into
// a temporary images directory, on the shared base), skipping an
// unchanged build, running on it by name, path and --lang, listing and
// removing it; and the built language images' manifests.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// tinyLang is a language of GNU hello: a small image to build in a test.
const tinyLang = `{
  "name": "tiny",
  "aliases": ["tiny-alias"],
  "title": "GNU hello",
  "packages": ["hello"],
  "version": ["hello", "--version"],
  "source": "greeting.txt",
  "run": ["/bin/sh", "-c", "hello -g \"$(cat greeting.txt) {pids}\""],
  "env": ["TINY=yes"]
}
`

// withImagesDir points the isolate commands of this test at a temporary
// images directory and language directory.
func withImagesDir(t *testing.T) (images, defs string) {
	t.Helper()
	images, defs = shareDir(t), shareDir(t)
	t.Setenv("ISOLATE_IMAGES_DIR", images)
	t.Setenv("ISOLATE_LANGS_DIR", defs)
	return images, defs
}

func TestImageBuildRunListRemove(t *testing.T) {
	needRoot(t)
	images, defs := withImagesDir(t)
	if err := os.WriteFile(filepath.Join(defs, "tiny.json"), []byte(tinyLang), 0o644); err != nil {
		t.Fatal(err)
	}
	res := isolateCmd(t, "", "image", "build", "tiny")
	if res.Code != 0 {
		t.Fatalf("image build tiny: exit %d\n%s", res.Code, res.Stderr)
	}
	m := readManifest(t, filepath.Join(images, "tiny.json"))
	if m.Suite == "" || m.Installed["hello"] == "" || !strings.Contains(m.Version, "hello") || m.BuildTime <= 0 || m.DefinitionHash == "" {
		t.Errorf("manifest: %+v", m)
	}
	if sum := sha256File(t, filepath.Join(images, "tiny.sqfs")); sum != m.SHA256 {
		t.Errorf("sha256 %s, manifest says %s", sum, m.SHA256)
	}
	if _, ok := m.Installed["man-db"]; ok {
		t.Error("recommended packages were installed")
	}

	// Unchanged definition: nothing is built again.
	res = isolateCmd(t, "", "image", "build", "tiny-alias")
	if again := readManifest(t, filepath.Join(images, "tiny.json")); res.Code != 0 || again.BuiltAt != m.BuiltAt || again.SHA256 != m.SHA256 {
		t.Errorf("second build: exit %d, built at %v (first %v)\n%s", res.Code, again.BuiltAt, m.BuiltAt, res.Stderr)
	}

	// The image's tree, stripped, with the box user.
	rep, _ := runBox(t, "--image", "tiny", "--box-id", strconv.Itoa(execFirstBox+50), "--", "/bin/sh", "-c",
		"hello; ls /usr/share/doc | wc -l; ls /usr/share/man | wc -l; id -un")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.Stdout != "Hello, world!\n0\n0\nbox\n" || rep.Sandbox.Image != "tiny" {
		t.Errorf("stdout %q (image %q)", rep.Stdout, rep.Sandbox.Image)
	}
	// By path, and through the language.
	rep, _ = runBox(t, "--image", filepath.Join(images, "tiny.sqfs"), "--", "hello", "-g", "by path")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.Stdout != "by path\n" {
		t.Errorf("by path: stdout %q", rep.Stdout)
	}
	rep, _ = runBox(t, "--lang", "tiny", "--", "/bin/sh", "-c", "echo $TINY; hello -g lang")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.Stdout != "yes\nlang\n" {
		t.Errorf("--lang: stdout %q", rep.Stdout)
	}
	checkNoImageLeaks(t)

	// exec of a language without a compile step; placeholders expanded.
	dir := shareDir(t)
	os.WriteFile(filepath.Join(dir, "g.txt"), []byte("hi"), 0o644)
	res = isolateCmd(t, "", "exec", "--lang", "tiny", "--pids", "7", filepath.Join(dir, "g.txt"))
	if res.Code != 0 || res.Stdout != "hi 7\n" {
		t.Errorf("exec: exit %d, stdout %q, stderr %q", res.Code, res.Stdout, res.Stderr)
	}
	checkNoImageLeaks(t)

	res = isolateCmd(t, "", "langs", "--json")
	var infos []langInfo
	if err := json.Unmarshal([]byte(res.Stdout), &infos); err != nil {
		t.Fatalf("langs --json: %v\n%s", err, res.Stdout)
	}
	found := false
	for _, i := range infos {
		if i.Name == "tiny" {
			found = i.Built && !i.Stale && i.Version == m.Version && i.Origin == filepath.Join(defs, "tiny.json")
		}
	}
	if !found || len(infos) != len(langCases)+1 {
		t.Errorf("langs: %+v", infos)
	}
	res = isolateCmd(t, "", "image", "list")
	table, cache, _ := strings.Cut(res.Stdout, "\n\n")
	if res.Code != 0 || !strings.Contains(table, "tiny") || strings.Count(table, "\n") != 1 || !strings.Contains(cache, "tiny-") {
		t.Errorf("image list: exit %d\n%s", res.Code, res.Stdout)
	}

	// A changed definition makes the image stale.
	os.WriteFile(filepath.Join(defs, "tiny.json"), []byte(strings.Replace(tinyLang, `["hello"]`, `["hello", "libc-bin"]`, 1)), 0o644)
	res = isolateCmd(t, "", "langs")
	if !strings.Contains(res.Stdout, "stale") {
		t.Errorf("langs after a change:\n%s", res.Stdout)
	}

	res = isolateCmd(t, "", "image", "rm", "tiny")
	if res.Code != 0 {
		t.Fatalf("image rm: exit %d\n%s", res.Code, res.Stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(images, "tiny*")); len(left) != 0 {
		t.Errorf("left after rm: %v", left)
	}
	checkNoImageLeaks(t) // rm released the holder
	res = isolateCmd(t, "", "image", "rm", "tiny")
	if res.Code != 2 || !strings.Contains(res.Stderr, "not built") {
		t.Errorf("second rm: exit %d, %q", res.Code, res.Stderr)
	}
	res = isolateCmd(t, "", "run", "--image", "tiny", "--", "/bin/true")
	if res.Code != 2 || !strings.Contains(res.Stderr, "not built") {
		t.Errorf("run on a removed image: exit %d, %q", res.Code, res.Stderr)
	}
}

// The language images CI builds: one per language, each described.
func TestLanguageImagesHaveManifests(t *testing.T) {
	needRoot(t)
	for _, c := range langCases {
		needImage(t, c.lang)
		m, err := rootfs.LookupImage(c.lang)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(rootfs.ImagePath(c.lang))
		if err != nil || fi.Size() != m.Size || !rootfs.IsSquashfs(rootfs.ImagePath(c.lang)) {
			t.Errorf("%s: file %v (%v), manifest size %d", c.lang, fi, err, m.Size)
		}
		if m.Version == "" || m.Suite != "trixie" || len(m.Installed) < 50 {
			t.Errorf("%s: manifest %q %q %d packages", c.lang, m.Version, m.Suite, len(m.Installed))
		}
	}
	res := isolateCmd(t, "", "langs")
	for _, c := range langCases {
		if !strings.Contains(res.Stdout, c.lang) {
			t.Errorf("langs does not list %s:\n%s", c.lang, res.Stdout)
		}
	}
}

func TestImageUsageErrors(t *testing.T) {
	needRoot(t)
	withImagesDir(t)
	for _, args := range [][]string{
		{"image"},
		{"image", "build"},
		{"image", "build", "--all", "c"},
		{"image", "build", "cobol"},
		{"image", "build", "--mirror", "not-a-url", "c"},
		{"image", "rm"},
		{"image", "rm", "c"}, // not built in this images directory
		{"run", "--image", "no-such-image", "--", "/bin/true"},
		{"run", "--image", "/etc/passwd", "--", "/bin/true"},
		{"run", "--lang", "cobol", "--", "/bin/true"},
	} {
		res := isolateCmd(t, "", args...)
		lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
		if res.Code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "isolate: ") {
			t.Errorf("%v: exit %d, stderr %q: want 2 and one line", args, res.Code, res.Stderr)
		}
	}
}

// A definition of the host's replaces the built-in one of the same name;
// a broken one is an error that names its file.
func TestLangsOverride(t *testing.T) {
	needRoot(t)
	_, defs := withImagesDir(t)
	over := strings.Replace(strings.Replace(tinyLang, `"tiny"`, `"c"`, 1), "GNU hello", "C from the host", 1)
	os.WriteFile(filepath.Join(defs, "c.json"), []byte(over), 0o644)
	res := isolateCmd(t, "", "langs", "--json")
	var infos []langInfo
	json.Unmarshal([]byte(res.Stdout), &infos)
	for _, i := range infos {
		if i.Name == "c" && i.Title != "C from the host" {
			t.Errorf("c not replaced: %+v", i)
		}
	}
	if len(infos) != len(langCases) {
		t.Errorf("%d languages, want %d", len(infos), len(langCases))
	}
	os.WriteFile(filepath.Join(defs, "bad.json"), []byte(`{"name": "bad", "packages": []}`), 0o644)
	res = isolateCmd(t, "", "langs")
	if res.Code != 2 || !strings.Contains(res.Stderr, "bad.json") {
		t.Errorf("broken definition: exit %d, %q", res.Code, res.Stderr)
	}
}

func readManifest(t *testing.T, path string) *rootfs.Manifest {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m rootfs.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}
