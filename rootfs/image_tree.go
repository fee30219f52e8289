package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Runs do not mount an image's squashfs: each built image is also kept
// unpacked, once, in a tree of its own, and a box binds that tree's /usr,
// /bin, /lib* read-only (nosuid, nodev). A bind costs the same whatever the
// image, and every run reads the toolchain through the host's page cache,
// shared with every other run: nothing is decompressed per run (measured in
// docs/LANGUAGES.md against a squashfs mounted per run, and one kept
// mounted).
//
// The cache's rules:
//
//   - A tree is named by its squashfs's content, TREES/NAME-HASH, and never
//     changes once in place. The manifest NAME.json, replaced by rename,
//     is the pointer: a run resolves it once and binds that tree, so a
//     rebuild or an import during runs gives each run the old or the new
//     image, never a mix.
//   - A run holds a shared flock on its tree's directory while it runs (and
//     the kernel drops it when the run's process goes, however it ends).
//     Removing a tree takes the exclusive lock first: `isolate image rm`
//     and `cleanup --images` wait for the runs on it and say so, a rebuild
//     removes the old tree only when no run holds it (else the next
//     removal does).
//   - The trees are root's, readable by anyone (a user who is not root
//     runs boxes from them too), but TREES is not listable (mode 0711),
//     and setuid and setgid bits are dropped on unpacking, so no host user
//     runs an image's programs with privileges. A user's run holds its
//     tree's shared lock as root's runs do.

// TreesDir holds the unpacked images.
func TreesDir() string { return filepath.Join(ImagesDir(), "trees") }

// treeName is the directory name of the tree of an image whose squashfs
// has the sha256 sum.
func treeName(name, sum string) string {
	if len(sum) > 16 {
		sum = sum[:16]
	}
	return name + "-" + sum
}

// Tree is the unpacked tree of an image that a run uses: it stays as it
// is until Close.
type Tree struct {
	Name string
	Dir  string
	lock *os.File
}

// Close releases the tree (nil-safe).
func (t *Tree) Close() error {
	if t == nil || t.lock == nil {
		return nil
	}
	return t.lock.Close()
}

// OpenTree resolves image name to its current tree and holds it for a run.
// An image without a tree (built before trees, or whose tree was removed by
// `cleanup --images`) is unpacked first.
func OpenTree(name string) (*Tree, error) {
	for try := 0; try < 8; try++ {
		m, err := LookupImage(name)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(TreesDir(), treeName(name, m.SHA256))
		f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, os.ErrNotExist) {
			if err := unpackCurrent(name, m); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", name, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock the tree of image %s: %w", name, err)
		}
		// A removal renames the tree away while it holds the exclusive
		// lock: the tree still under its name is the one we locked.
		if sameFile(f, dir) {
			return &Tree{Name: name, Dir: dir, lock: f}, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("image %s: it keeps changing (rebuilt or removed); try again", name)
}

func sameFile(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Lstat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// lockTrees serialises the changes to the cache (unpacking, sweeping the
// debris of crashed ones): runs never take it.
func lockTrees() (*os.File, error) {
	if err := os.MkdirAll(TreesDir(), 0o711); err != nil {
		return nil, fmt.Errorf("create %s: %w", TreesDir(), err)
	}
	if err := os.Chmod(TreesDir(), 0o711); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(TreesDir(), ".lock"), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", TreesDir(), err)
	}
	return f, nil
}

// unpackCurrent makes the tree of the image's squashfs in place, if the
// squashfs is still the one m describes (a rebuild may have replaced it:
// the caller then reads the manifest again).
func unpackCurrent(name string, m *Manifest) error {
	f, err := os.Open(ImagePath(name))
	if err != nil {
		return fmt.Errorf("image %s: %w", name, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("image %s: %w", name, err)
	}
	if hex.EncodeToString(h.Sum(nil)) != m.SHA256 {
		return nil // replaced meanwhile
	}
	return unpackTree(name, m.SHA256, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())))
}

// unpackTree unpacks squashfs (whose sum is sum) into the tree of image
// name, unless it is there. The tree appears whole or not at all.
func unpackTree(name, sum, squashfs string) error {
	lock, err := lockTrees()
	if err != nil {
		return err
	}
	defer lock.Close()
	dir := filepath.Join(TreesDir(), treeName(name, sum))
	if _, err := os.Lstat(dir); err == nil {
		return nil
	}
	tmp, err := os.MkdirTemp(TreesDir(), ".new-"+name+".")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if mnt, err := MountSquashfs(squashfs); err == nil {
		// cp reads the detached mount through its descriptor: nothing is
		// mounted anywhere, and the mount goes when cp and we close it.
		cp := exec.Command("cp", "-a", "/proc/self/fd/3/.", tmp)
		cp.ExtraFiles = []*os.File{mnt.File()}
		out, err := cp.CombinedOutput()
		mnt.Close()
		if err != nil {
			return fmt.Errorf("unpack image %s: cp: %v: %s", name, err, strings.TrimSpace(string(out)))
		}
	} else if uerr := unsquash(squashfs, tmp); uerr != nil {
		return fmt.Errorf("unpack image %s: %w; without mounting it: %v", name, err, uerr)
	}
	if err := dropSetID(tmp); err != nil {
		return fmt.Errorf("unpack image %s: %w", name, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// unsquash unpacks squashfs into dir with unsquashfs, for where no image
// can be mounted: no loop device, or a user namespace that is not the
// host's (a container), in which the kernel mounts no squashfs. The image's
// /dev is left empty: its device nodes could not be made there, and no box
// binds it (each box has its own /dev).
func unsquash(squashfs, dir string) error {
	if _, err := exec.LookPath("unsquashfs"); err != nil {
		return errors.New("no unsquashfs (Debian's squashfs-tools) to unpack it with")
	}
	f, err := os.Open(squashfs)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command("unsquashfs", "-no-progress", "-quiet", "-no-xattrs", "-force", "-dest", dir,
		"-excludes", "/proc/self/fd/3", "dev")
	cmd.ExtraFiles = []*os.File{f}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("unsquashfs: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Mkdir(filepath.Join(dir, "dev"), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// dropSetID clears the setuid and setgid bits under root (boxes bind the
// tree nosuid anyway; this is for the host's users).
func dropSetID(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 && !fi.IsDir() {
			return os.Chmod(p, fi.Mode().Perm())
		}
		return nil
	})
}

// CachedTree is one unpacked image in the cache.
type CachedTree struct {
	Image string `json:"image"`
	Dir   string `json:"dir"`
	// Bytes is the disk the tree takes (allocated blocks).
	Bytes int64 `json:"bytes"`
	// Current: the image's manifest points at it; else it is an old
	// version that runs still used when it was replaced.
	Current bool `json:"current"`
	InUse   bool `json:"in_use"`
}

// ListTrees returns the image cache, by image.
func ListTrees() ([]CachedTree, error) {
	ents, err := os.ReadDir(TreesDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []CachedTree
	for _, e := range ents {
		i := strings.LastIndexByte(e.Name(), '-')
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || i <= 0 {
			continue
		}
		t := CachedTree{Image: e.Name()[:i], Dir: filepath.Join(TreesDir(), e.Name())}
		if m, err := LookupImage(t.Image); err == nil {
			t.Current = treeName(t.Image, m.SHA256) == e.Name()
		}
		t.InUse = treeInUse(t.Dir)
		t.Bytes = diskUsage(t.Dir)
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Image < out[j].Image })
	return out, nil
}

func treeInUse(dir string) bool {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
}

// diskUsage is what the files under dir occupy, hard links once.
func diskUsage(dir string) int64 {
	var total int64
	seen := map[uint64]bool{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || seen[st.Ino] {
			return nil
		}
		if st.Nlink > 1 {
			seen[st.Ino] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total
}

// RemoveTrees removes the trees of image name (every image: ""), except
// the current one when keepCurrent. A tree runs use is waited for when
// wait is set (waiting says so first, with the tree), else left for a
// later removal.
func RemoveTrees(name string, keepCurrent bool, waiting func(dir string)) error {
	ts, err := ListTrees()
	if err != nil {
		return err
	}
	for _, t := range ts {
		if (name != "" && t.Image != name) || (keepCurrent && t.Current) {
			continue
		}
		if err := removeTree(t.Dir, waiting); err != nil {
			return err
		}
	}
	sweepTrees()
	return nil
}

// removeTree takes the tree's exclusive lock (waiting for its runs when
// waiting is set, else giving up at once), renames it out of the runs'
// reach and removes it.
func removeTree(dir string, waiting func(dir string)) error {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if waiting == nil {
			return nil // in use: a later removal takes it
		}
		waiting(dir)
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			return fmt.Errorf("lock %s: %w", dir, err)
		}
	}
	if !sameFile(f, dir) {
		return nil // another removal took it
	}
	gone, err := os.MkdirTemp(TreesDir(), ".rm-")
	if err != nil {
		return err
	}
	if err := os.Rename(dir, filepath.Join(gone, "tree")); err != nil {
		os.Remove(gone)
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return os.RemoveAll(gone)
}

// sweepTrees removes what crashed unpackings and removals left.
func sweepTrees() {
	lock, err := lockTrees()
	if err != nil {
		return
	}
	defer lock.Close()
	for _, pattern := range []string{".new-*", ".rm-*"} {
		left, _ := filepath.Glob(filepath.Join(TreesDir(), pattern))
		for _, p := range left {
			os.RemoveAll(p)
		}
	}
}
