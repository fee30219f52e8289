package main

// Tests of the image cache: the unpacked trees runs bind. An image of the
// test's own (the host's sh, cat and sleep, and marker files that say which
// version it is), made with mksquashfs and installed with image import
// into a temporary images directory: rebuilt during runs, removed during a
// run, imported tampered.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// markerFiles are how many files say the image's version: a run that
// read some from one version and some from another would show it.
const markerFiles = 40

// makeExportedImage makes an exported image named name whose marker files
// all hold version, and returns the file.
func makeExportedImage(t *testing.T, name, version string) string {
	t.Helper()
	dir := shareDir(t)
	root := filepath.Join(dir, "root")
	for _, d := range []string{"usr/bin", "usr/lib64", "usr/share/marker"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range [][2]string{{"bin", "usr/bin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"}} {
		os.Symlink(l[1], filepath.Join(root, l[0]))
	}
	for _, prog := range []string{"/bin/sh", "/bin/cat", "/bin/sleep"} {
		copyHostFile(t, prog, filepath.Join(root, "usr/bin", filepath.Base(prog)))
		out, err := exec.Command("ldd", prog).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", prog, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			for _, f := range strings.Fields(sc.Text()) {
				if !strings.HasPrefix(f, "/") {
					continue
				}
				// The path the program asks for, under usr/ (bin, lib,
				// lib64 are links to it in the image).
				dst := filepath.Join(root, "usr", strings.TrimPrefix(f, "/usr"))
				os.MkdirAll(filepath.Dir(dst), 0o755)
				copyHostFile(t, f, dst)
			}
		}
	}
	for i := 0; i < markerFiles; i++ {
		if err := os.WriteFile(filepath.Join(root, "usr/share/marker", fmt.Sprint(i)), []byte(version+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sqfs := filepath.Join(dir, "image.sqfs")
	if out, err := exec.Command("mksquashfs", root, sqfs, "-comp", "gzip", "-noappend", "-quiet", "-no-progress", "-all-root").CombinedOutput(); err != nil {
		t.Fatalf("mksquashfs: %v\n%s", err, out)
	}
	payload, err := os.ReadFile(sqfs)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(payload)
	m, _ := json.Marshal(rootfs.Manifest{Name: name, Suite: "test", Version: version, Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:])})
	var exported bytes.Buffer
	tw := tar.NewWriter(&exported)
	for _, member := range []struct {
		name string
		data []byte
	}{{"manifest.json", m}, {"image.sqfs", payload}} {
		tw.WriteHeader(&tar.Header{Name: member.name, Mode: 0o644, Size: int64(len(member.data))})
		tw.Write(member.data)
	}
	tw.Close()
	file := filepath.Join(dir, name+"-"+version+".img")
	if err := os.WriteFile(file, exported.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func copyHostFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func importImage(t *testing.T, file string) {
	t.Helper()
	if res := isolateCmd(t, "", "image", "import", file); res.Code != 0 {
		t.Fatalf("image import %s: exit %d\n%s", file, res.Code, res.Stderr)
	}
}

// readMarkers is a run that reads every marker file twice, with a pause
// between: a tree changing under it would show as two versions.
var readMarkers = []string{"/usr/bin/sh", "-c", "cat /usr/share/marker/*; sleep 0.02; cat /usr/share/marker/*"}

// uniformVersion returns the one version a run's output names, or "".
func uniformVersion(out string) string {
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2*markerFiles {
		return ""
	}
	for _, l := range lines {
		if l != lines[0] {
			return ""
		}
	}
	return lines[0]
}

func TestImageRebuildDuringRuns(t *testing.T) {
	needRoot(t)
	images, _ := withImagesDir(t)
	v1, v2 := makeExportedImage(t, "mix", "v1"), makeExportedImage(t, "mix", "v2")
	importImage(t, v1)
	rep, _ := runBox(t, append([]string{"--image", "mix", "--"}, readMarkers...)...)
	expectStatus(t, rep, isolate.StatusOK)
	if v := uniformVersion(rep.Stdout); v != "v1" {
		t.Fatalf("first run: %q", rep.Stdout)
	}

	// Runs go on while the image is replaced, back and forth.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]int{}
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res := isolateCmd(t, "", append([]string{"run", "--image", "mix", "--"}, readMarkers...)...)
				v := uniformVersion(res.Stdout)
				mu.Lock()
				seen[v]++
				mu.Unlock()
				if res.Code != 0 || v == "" {
					t.Errorf("run during a rebuild: exit %d, stdout %q, stderr %q", res.Code, res.Stdout, res.Stderr)
				}
			}
		}()
	}
	for i := 0; i < 6; i++ {
		importImage(t, []string{v2, v1}[i%2])
	}
	close(stop)
	wg.Wait()
	t.Logf("runs during the rebuilds, by version: %v", seen)
	rep, _ = runBox(t, append([]string{"--image", "mix", "--"}, readMarkers...)...)
	if v := uniformVersion(rep.Stdout); v != "v1" {
		t.Errorf("after the last import (v1): %q", rep.Stdout)
	}
	// The old trees went with their last run: one tree, the current one.
	rootfs.RemoveTrees("mix", true, nil) // one a run still held at the last import
	trees, _ := rootfs.ListTrees()
	if len(trees) != 1 || !trees[0].Current || trees[0].InUse {
		t.Errorf("cache after the rebuilds: %+v", trees)
	}

	// Export gives back what was imported.
	out := filepath.Join(shareDir(t), "mix.img")
	if res := isolateCmd(t, "", "image", "export", "mix", out); res.Code != 0 {
		t.Fatalf("image export: exit %d\n%s", res.Code, res.Stderr)
	}
	importImage(t, out)
	res := isolateCmd(t, "", "image", "list", "--json")
	var listed []struct {
		Name    string              `json:"name"`
		Version string              `json:"version"`
		Trees   []rootfs.CachedTree `json:"trees"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &listed); err != nil || len(listed) != 1 || listed[0].Version != "v1" || len(listed[0].Trees) != 1 {
		t.Errorf("image list --json: %v\n%s", err, res.Stdout)
	}
	if res := isolateCmd(t, "", "check"); !strings.Contains(res.Stdout, "image cache") || !strings.Contains(res.Stdout, filepath.Join(images, "trees")) {
		t.Errorf("check does not list the image cache:\n%s", res.Stdout)
	}
	checkNoImageLeaks(t)
}

func TestImageRemoveWaitsForItsRuns(t *testing.T) {
	needRoot(t)
	images, _ := withImagesDir(t)
	importImage(t, makeExportedImage(t, "held", "v1"))
	// The run blocks on a fifo of the test's until told to go on.
	dir := shareDir(t)
	fifo := filepath.Join(dir, "go")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(fifo, 0o666)
	run := exec.Command(isolateBin, "run", "--image", "held", "--bind", dir+":/sync", "--",
		"/usr/bin/sh", "-c", "read x < /sync/go; cat /usr/share/marker/0")
	var runOut bytes.Buffer
	run.Stdout = &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- run.Wait() }()
	// Opening the fifo for writing returns once the box opened it: the
	// run holds its tree by then.
	release := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
		}
		release <- f
	}()
	var w *os.File
	select {
	case w = <-release:
	case err := <-runDone:
		t.Fatalf("the run ended before reading the fifo: %v", err)
	}

	rm := exec.Command(isolateBin, "image", "rm", "held")
	stderr, _ := rm.StderrPipe()
	if err := rm.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stderr).ReadString('\n')
	if !strings.Contains(line, "waiting for the runs that use") {
		t.Errorf("image rm during a run says %q, want that it waits", line)
	}
	// rm waits: the image is gone for new runs, the running one still
	// has its tree.
	if res := isolateCmd(t, "", "run", "--image", "held", "--", "/usr/bin/cat", "/usr/share/marker/0"); res.Code != 2 || !strings.Contains(res.Stderr, "not built") {
		t.Errorf("new run while rm waits: exit %d, %q", res.Code, res.Stderr)
	}
	select {
	case err := <-runDone:
		t.Fatalf("the run ended early: %v", err)
	default:
	}
	w.WriteString("go\n")
	w.Close()
	if err := <-runDone; err != nil || runOut.String() != "v1\n" {
		t.Errorf("the run: %v, stdout %q", err, runOut.String())
	}
	if err := rm.Wait(); err != nil {
		t.Errorf("image rm: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(images, "trees", "held*")); len(left) != 0 {
		t.Errorf("left after rm: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(images, "held*")); len(left) != 0 {
		t.Errorf("left after rm: %v", left)
	}
	checkNoImageLeaks(t)

	// cleanup --images removes the cache; a run unpacks its image again.
	importImage(t, makeExportedImage(t, "held", "v2"))
	if res := isolateCmd(t, "", "cleanup", "--images"); res.Code != 0 {
		t.Fatalf("cleanup --images: exit %d\n%s", res.Code, res.Stderr)
	}
	if trees, _ := rootfs.ListTrees(); len(trees) != 0 {
		t.Errorf("cache after cleanup --images: %+v", trees)
	}
	rep, _ := runBox(t, "--image", "held", "--", "/usr/bin/cat", "/usr/share/marker/0")
	if expectStatus(t, rep, isolate.StatusOK); rep.Stdout != "v2\n" {
		t.Errorf("run after cleanup --images: %q", rep.Stdout)
	}
}

func TestImageImportRefusesTampered(t *testing.T) {
	needRoot(t)
	images, _ := withImagesDir(t)
	good := makeExportedImage(t, "sealed", "v1")
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	dir := shareDir(t)
	bad := map[string][]byte{}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 0x40 // in the squashfs, past the manifest
	bad["altered"] = flipped
	bad["cut short"] = data[:len(data)/2]
	bad["not an image"] = []byte("hello\n")
	for what, content := range bad {
		file := filepath.Join(dir, strings.ReplaceAll(what, " ", "-"))
		os.WriteFile(file, content, 0o644)
		res := isolateCmd(t, "", "image", "import", file)
		if res.Code != 2 || !strings.Contains(res.Stderr, "not a valid exported image") || strings.Count(res.Stderr, "\n") != 1 {
			t.Errorf("import %s: exit %d, %q", what, res.Code, res.Stderr)
		}
		if what == "altered" && !strings.Contains(res.Stderr, "altered or damaged") {
			t.Errorf("import altered: %q does not say why", res.Stderr)
		}
		ents, _ := os.ReadDir(images)
		for _, e := range ents {
			if e.Name() != "trees" {
				t.Errorf("import %s left %s", what, e.Name())
			}
		}
		if trees, _ := os.ReadDir(filepath.Join(images, "trees")); len(trees) > 1 {
			t.Errorf("import %s left a tree: %v", what, trees)
		}
	}
	if res := isolateCmd(t, "", "image", "import", filepath.Join(dir, "missing")); res.Code != 2 {
		t.Errorf("import of a missing file: exit %d, %q", res.Code, res.Stderr)
	}
	importImage(t, good)
	rep, _ := runBox(t, "--image", "sealed", "--", "/usr/bin/cat", "/usr/share/marker/0")
	if expectStatus(t, rep, isolate.StatusOK); rep.Stdout != "v1\n" {
		t.Errorf("run on the imported image: %q", rep.Stdout)
	}
}

// An image imported where the kernel mounts no squashfs (a user namespace
// that is not the host's, as in a container) is unpacked by unsquashfs,
// and runs from it as from one unpacked through a mount.
func TestImageImportWithoutMounting(t *testing.T) {
	needRoot(t)
	withImagesDir(t)
	file := makeExportedImage(t, "unmounted", "v1")
	cmd := exec.Command(isolateBin, "image", "import", file)
	cmd.Env = os.Environ()
	// Root, mapped to itself, in a user namespace of its own: it may
	// write the images directory but mount no squashfs.
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
	}
	if res := runResult(t, cmd); res.Code != 0 {
		t.Fatalf("image import in a user namespace: exit %d\n%s", res.Code, res.Stderr)
	}
	rep, _ := runBox(t, "--image", "unmounted", "--", "/usr/bin/cat", "/usr/share/marker/0")
	if expectStatus(t, rep, isolate.StatusOK); rep.Stdout != "v1\n" {
		t.Errorf("run on the image unpacked without mounting: %q", rep.Stdout)
	}
}

// The host's images bound into a container: the trees' directory (root's,
// mode 0711) belongs to a user not mapped there, so it cannot be listed;
// runs need no listing, and check says so instead of failing.
func TestCheckImageCacheNotListable(t *testing.T) {
	needRoot(t)
	withImagesDir(t)
	importImage(t, makeExportedImage(t, "bound", "v1"))
	cmd := exec.Command(isolateBin, "check")
	cmd.Env = os.Environ()
	// Root of a user namespace of 65536 ids from 200000, as deploy/run.sh
	// starts the container.
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 200000, Size: 65536}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 200000, Size: 65536}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0},
	}
	res := runResult(t, cmd)
	if !strings.Contains(res.Stdout, "image cache") || strings.Contains(res.Stdout, "FAIL image cache") {
		t.Errorf("check where the trees cannot be listed:\n%s%s", res.Stdout, res.Stderr)
	}
}
