package imagebuild

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/rootfs"
)

// BuilderVersion changes when the way images are built changes: every
// image is then rebuilt on its next build.
const BuilderVersion = "1"

// BuildSpec is what one image is made of.
type BuildSpec struct {
	Name     string
	Suite    string
	Packages []string
	// Kind is what the image is for, recorded in its manifest: "" (a
	// language) or "template".
	Kind string
	// Files maps absolute paths in the image to their content, written
	// (mode 0644) after the packages are installed.
	Files map[string]string
	// Setup are shell commands run in the image (as root) after the
	// packages are installed and the files written.
	Setup []string
	// Env is the environment of Setup and Version (on top of the
	// build's): the one the language's programs get, so that what setup
	// prepares (a warm build cache) matches what they look for.
	Env []string
	// Version is a command whose first line of output is recorded
	// (none: nothing is).
	Version []string
	// Hash identifies the definition: an image built from the same hash
	// is not built again unless Force.
	Hash   string
	Mirror string // overrides the apt configuration's mirror
	Force  bool
	// Progress receives one line per stage; nil: quiet.
	Progress func(line string)
}

// buildEnv is the environment of every build command: nothing of the
// caller's but proxy settings.
func buildEnv() []string {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8", "HOME=/root"}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// inUserNamespace tells whether this process runs in a user namespace
// other than the host's: its uid_map maps not every id to itself.
func inUserNamespace() bool {
	data, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	f := strings.Fields(string(data))
	return len(f) != 3 || f[0] != "0" || f[1] != "0" || f[2] != "4294967295"
}

// DefaultCacheDir holds what every build shares: the debootstrapped
// base of each suite and the downloaded packages. ISOLATE_CACHE_DIR
// overrides it. Builds in progress work beside it, in build/.
const DefaultCacheDir = "/var/lib/isolate/cache"

func cacheDir() string {
	if d := os.Getenv("ISOLATE_CACHE_DIR"); d != "" {
		return d
	}
	return DefaultCacheDir
}

func buildDir() string { return filepath.Join(filepath.Dir(cacheDir()), "build") }

// builder is one build in progress.
type builder struct {
	spec    *BuildSpec
	mirrors *Mirrors
	log     *os.File
	start   time.Time
}

func (b *builder) progress(format string, a ...any) {
	if b.spec.Progress != nil {
		b.spec.Progress(fmt.Sprintf("[%s] ", b.spec.Name) + fmt.Sprintf(format, a...))
	}
}

// BuildImage builds the image of spec unless the one there was built from
// the same definition. It reports whether it built anything.
func BuildImage(spec *BuildSpec) (*rootfs.Manifest, bool, error) {
	if !rootfs.ValidImageName(spec.Name) {
		return nil, false, fmt.Errorf("%q is not an image name", spec.Name)
	}
	if old, err := rootfs.LookupImage(spec.Name); err == nil && old.DefinitionHash == spec.Hash && !spec.Force {
		// Up to date; built before trees, it gets its tree now.
		return old, false, rootfs.EnsureTree(spec.Name)
	}
	for _, d := range []string{rootfs.ImagesDir(), cacheDir(), buildDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, false, fmt.Errorf("create %s: %w", d, err)
		}
	}
	// One build at a time on a host: they share the base and the caches.
	lock, err := os.OpenFile(filepath.Join(cacheDir(), ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if spec.Progress != nil {
			spec.Progress("[" + spec.Name + "] waiting for another image build")
		}
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
			return nil, false, fmt.Errorf("lock the image builds: %w", err)
		}
	}
	// Another build may have made it while we waited.
	if old, err := rootfs.LookupImage(spec.Name); err == nil && old.DefinitionHash == spec.Hash && !spec.Force {
		return old, false, rootfs.EnsureTree(spec.Name)
	}
	if err := ensureTools(); err != nil {
		return nil, false, err
	}
	mirrors, err := FindMirrors(spec.Suite, spec.Mirror)
	if err != nil {
		return nil, false, err
	}
	logPath := filepath.Join(rootfs.ImagesDir(), spec.Name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, false, err
	}
	defer logf.Close()
	b := &builder{spec: spec, mirrors: mirrors, log: logf, start: time.Now()}
	m, err := b.build()
	if err != nil {
		return nil, false, fmt.Errorf("build image %s: %w (log: %s)", spec.Name, err, logPath)
	}
	return m, true, nil
}

// ensureTools installs debootstrap and mksquashfs when they are missing.
func ensureTools() error {
	_, e1 := exec.LookPath("debootstrap")
	_, e2 := exec.LookPath("mksquashfs")
	if e1 == nil && e2 == nil {
		return nil
	}
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "--no-install-recommends", "debootstrap", "squashfs-tools"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = buildEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("install debootstrap and squashfs-tools: apt-get %s: %v\n%s", args[0], err, tail(out, 10))
		}
	}
	return nil
}

func (b *builder) build() (*rootfs.Manifest, error) {
	base, err := b.base()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(buildDir(), b.spec.Name+".")
	if err != nil {
		return nil, err
	}
	// The build tree never holds a mount (they live in the build
	// commands' own mount namespaces), so removing it is always safe.
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")
	b.progress("copying the base system")
	if err := b.run("copy the base", exec.Command("cp", "-a", "--reflink=auto", base, root)); err != nil {
		return nil, err
	}
	if err := b.writeSources(root); err != nil {
		return nil, err
	}
	if err := b.chroot(root, "update the package lists", "apt-get update -qq"); err != nil {
		return nil, err
	}
	if len(b.spec.Packages) > 0 {
		pkgs := strings.Join(b.spec.Packages, " ")
		var sim bytes.Buffer
		if err := b.chrootOut(root, "resolve packages", "apt-get install -s "+pkgs, &sim); err != nil {
			return nil, err
		}
		b.progress("installing %s (%d packages with dependencies)", pkgs, strings.Count(sim.String(), "\nInst ")+boolInt(strings.HasPrefix(sim.String(), "Inst ")))
		if err := b.chroot(root, "install "+pkgs, "apt-get install -y -q "+pkgs); err != nil {
			return nil, err
		}
	}
	if err := writeFiles(root, b.spec.Files); err != nil {
		return nil, err
	}
	for _, s := range b.spec.Setup {
		b.progress("setup: %s", s)
		if err := b.chroot(root, "setup: "+s, b.withEnv(s)); err != nil {
			return nil, err
		}
	}
	var version, installed bytes.Buffer
	if len(b.spec.Version) > 0 {
		if err := b.chrootOut(root, "run the version command", b.withEnv(shellQuote(b.spec.Version)+" 2>&1"), &version); err != nil {
			return nil, err
		}
	}
	if err := b.chrootOut(root, "list the packages", `dpkg-query -W -f '${Package}\t${Version}\n'`, &installed); err != nil {
		return nil, err
	}
	if err := addBoxUser(root); err != nil {
		return nil, err
	}
	b.progress("stripping docs, caches and locales")
	if err := strip(root); err != nil {
		return nil, err
	}
	b.progress("packing squashfs (zstd)")
	tmp := rootfs.ImagePath(b.spec.Name) + ".tmp"
	defer os.Remove(tmp)
	squash := exec.Command("mksquashfs", root, tmp, "-comp", "zstd", "-Xcompression-level", "9",
		"-noappend", "-no-progress", "-quiet", "-no-xattrs", "-all-root")
	if err := b.run("pack the squashfs", squash); err != nil {
		return nil, err
	}
	sum, size, err := hashFile(tmp)
	if err != nil {
		return nil, err
	}
	m := &rootfs.Manifest{
		Name:           b.spec.Name,
		Kind:           b.spec.Kind,
		Suite:          b.spec.Suite,
		Packages:       b.spec.Packages,
		Installed:      parseInstalled(installed.String()),
		Version:        firstLine(version.String()),
		Size:           size,
		SHA256:         sum,
		BuiltAt:        time.Now().UTC().Truncate(time.Second),
		DefinitionHash: b.spec.Hash,
	}
	m.BuildTime = time.Since(b.start).Seconds()
	b.progress("unpacking the tree runs use")
	if err := rootfs.InstallImage(m, tmp); err != nil {
		return nil, err
	}
	b.progress("done: %.1f MiB in %.0f s", float64(size)/(1<<20), m.BuildTime)
	return m, nil
}

// base returns the shared minimal system of the suite, made once with
// debootstrap (minbase) and kept in the cache until the builder changes.
func (b *builder) base() (string, error) {
	cache := cacheDir()
	dir := filepath.Join(cache, "base-"+b.spec.Suite)
	stamp := dir + ".stamp"
	key := "builder " + BuilderVersion + " suite " + b.spec.Suite + "\n"
	if old, err := os.ReadFile(stamp); err == nil && string(old) == key {
		if _, err := os.Stat(dir); err == nil {
			return dir, nil
		}
	}
	b.progress("debootstrap %s (minbase): the base every image shares", b.spec.Suite)
	os.Remove(stamp)
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	tmp := dir + ".new"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	archives := filepath.Join(cache, "apt-archives")
	if err := os.MkdirAll(archives, 0o755); err != nil {
		return "", err
	}
	ds := exec.Command("debootstrap", "--variant=minbase", "--components=main", "--cache-dir="+archives, b.spec.Suite, tmp, b.mirrors.Archive)
	if inUserNamespace() {
		// debootstrap makes the tree's device nodes, which the kernel
		// refuses in a user namespace that is not the host's (a
		// container's). Told it runs in a container ("lxc"), it binds
		// the namespace's own /dev nodes instead, on a tmpfs it mounts
		// for the time it runs: no image keeps them (boxes have a /dev
		// of their own).
		ds.Env = []string{"container=lxc"}
	}
	if err := b.run("debootstrap "+b.spec.Suite, ds); err != nil {
		return "", err
	}
	// Never docs, man pages or translations: dpkg skips them from now
	// on; apt never installs recommends; dpkg does not fsync.
	files := map[string]string{
		"etc/dpkg/dpkg.cfg.d/01-isolate-nodoc": "path-exclude=/usr/share/doc/*\npath-exclude=/usr/share/man/*\npath-exclude=/usr/share/info/*\n" +
			"path-exclude=/usr/share/locale/*\npath-include=/usr/share/locale/locale.alias\npath-exclude=/usr/share/lintian/*\n",
		"etc/dpkg/dpkg.cfg.d/02-isolate-unsafe-io": "force-unsafe-io\n",
		"etc/apt/apt.conf.d/01-isolate":            "APT::Install-Recommends \"false\";\nAPT::Install-Suggests \"false\";\nAcquire::Languages \"none\";\n",
		"usr/sbin/policy-rc.d":                     "#!/bin/sh\nexit 101\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(content), 0o755); err != nil {
			return "", err
		}
	}
	if err := b.writeSources(tmp); err != nil {
		return "", err
	}
	b.progress("updating the base")
	if err := b.chroot(tmp, "update the base", "apt-get update -qq && apt-get dist-upgrade -y -q"); err != nil {
		return "", err
	}
	if err := strip(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, os.WriteFile(stamp, []byte(key), 0o644)
}

// writeSources points the tree's apt at this machine's mirrors.
func (b *builder) writeSources(root string) error {
	os.RemoveAll(filepath.Join(root, "etc/apt/sources.list.d"))
	os.MkdirAll(filepath.Join(root, "etc/apt/sources.list.d"), 0o755)
	return os.WriteFile(filepath.Join(root, "etc/apt/sources.list"), []byte(strings.Join(b.mirrors.Lines, "\n")+"\n"), 0o644)
}

// chrootScript runs a command in the tree with /proc, /dev, the host's
// resolv.conf and the shared package cache mounted, in a mount namespace
// of its own: every mount goes with the process, whatever happens.
const chrootScript = `set -e
R="$1"; ARCHIVES="$2"; shift 2
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mkdir -p "$R/var/cache/apt/archives"
# update-alternatives links man pages, which dpkg no longer installs.
for i in 1 2 3 4 5 6 7 8; do mkdir -p "$R/usr/share/man/man$i"; done
mount --bind "$ARCHIVES" "$R/var/cache/apt/archives"
cp -L /etc/resolv.conf "$R/etc/resolv.conf" 2>/dev/null || true
exec chroot "$R" /bin/sh -c "$1"
`

func (b *builder) chrootCmd(root, command string) *exec.Cmd {
	archives := filepath.Join(cacheDir(), "apt-archives")
	cmd := exec.Command("/bin/sh", "-c", chrootScript, "chroot", root, archives, command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// withEnv prefixes a shell command with the spec's environment.
func (b *builder) withEnv(command string) string {
	if len(b.spec.Env) == 0 {
		return command
	}
	return "export " + shellQuote(b.spec.Env) + "; " + command
}

func (b *builder) chroot(root, step, command string) error {
	return b.run(step, b.chrootCmd(root, command))
}

// chrootOut runs command in the tree and collects its standard output.
func (b *builder) chrootOut(root, step, command string, out *bytes.Buffer) error {
	cmd := b.chrootCmd(root, command)
	cmd.Stdout = io.MultiWriter(out, b.log)
	return b.run(step, cmd)
}

// run runs one build step, its output going to the log; an error carries
// the end of the log.
func (b *builder) run(step string, cmd *exec.Cmd) error {
	fmt.Fprintf(b.log, "== %s\n", step)
	cmd.Env = append(buildEnv(), cmd.Env...)
	if cmd.Stdout == nil {
		cmd.Stdout = b.log
	}
	cmd.Stderr = b.log
	t := time.Now()
	err := cmd.Run()
	fmt.Fprintf(b.log, "== %s: %.1f s\n", step, time.Since(t).Seconds())
	if err != nil {
		b.log.Sync()
		data, _ := os.ReadFile(b.log.Name())
		return fmt.Errorf("%s: %v\n%s", step, err, tail(data, 15))
	}
	return nil
}

// writeFiles writes files into the tree: through an os.Root, so that no
// link in the tree leads a write out of it.
func writeFiles(root string, files map[string]string) error {
	if len(files) == 0 {
		return nil
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel := strings.TrimPrefix(p, "/")
		if err := r.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		if err := r.WriteFile(rel, []byte(files[p]), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		if err := r.Chmod(rel, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}

// addBoxUser gives the image's own passwd and group the box user (boxes
// get a generated /etc, but tools run in the image at build time, and
// directory images, see it).
func addBoxUser(root string) error {
	for _, f := range []struct{ name, line string }{
		{"etc/passwd", "box:x:1000:1000:box:/box:/bin/sh\n"},
		{"etc/group", "box:x:1000:\n"},
	} {
		p := filepath.Join(root, f.name)
		data, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("add the box user: %w", err)
		}
		if bytes.Contains(data, []byte("\nbox:")) || bytes.HasPrefix(data, []byte("box:")) {
			continue
		}
		if err := os.WriteFile(p, append(data, f.line...), 0o644); err != nil {
			return fmt.Errorf("add the box user: %w", err)
		}
	}
	return nil
}

// strippable are what an image never needs: documentation, translations,
// package lists and caches, logs, the build's own apt settings.
var strippable = []string{
	"usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "usr/share/lintian", "usr/share/linda",
	"usr/share/locale/*", "var/lib/apt/lists/*", "var/cache/apt/*", "var/cache/debconf/*-old",
	"var/lib/dpkg/*-old", "var/log/*", "tmp/*", "var/tmp/*", "root/.cache", "root/.config", "root/go", "etc/apt/sources.list",
	"etc/apt/sources.list.d/*", "etc/resolv.conf", "etc/machine-id", "etc/hostname",
}

func strip(root string) error {
	for _, pattern := range strippable {
		matches, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, m := range matches {
			if filepath.Base(m) == "locale.alias" {
				continue
			}
			if err := os.RemoveAll(m); err != nil {
				return fmt.Errorf("strip %s: %w", m, err)
			}
		}
	}
	return nil
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func parseInstalled(s string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if name, ver, ok := strings.Cut(sc.Text(), "\t"); ok && name != "" {
			out[name] = ver
		}
	}
	return out
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(line)
}

// shellQuote makes a command line for sh -c.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func tail(data []byte, lines int) string {
	s := strings.TrimRight(string(data), "\n")
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return "  " + strings.Join(parts, "\n  ")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
