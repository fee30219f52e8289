package rootfs

// StagingDir is where the box's new root is mounted before pivot_root. It
// exists on the host (empty); each box mounts its own tmpfs over it inside
// its own mount namespace, so boxes never see each other's.
const StagingDir = "/run/isolate/root"

// Bind is a host path bound into the box.
type Bind struct {
	Host     string
	Box      string
	Writable bool
	// Optional binds are skipped when the host path does not exist.
	Optional bool
	// Dev allows devices (binds are nodev otherwise), NoExec forbids
	// executing, NoRec leaves out the mounts below Host.
	Dev, NoExec, NoRec bool
	// FS, when set, mounts a new file system of this type (proc, sysfs,
	// tmpfs, ...) at Box instead of binding Host.
	FS string
	// Opened, when set, is Host as the supervisor opened it (with the
	// caller's rights, never through a symlink): init moves that
	// detached copy into place instead of binding Host by its path.
	Opened *OpenedSource
}

// OpenedSource is a bind's source opened by the supervisor.
type OpenedSource struct {
	// Tree is init's descriptor of a detached copy of the source
	// (open_tree(OPEN_TREE_CLONE)).
	Tree int
	Dir  bool // the source is a directory
	// Path, when set, is bound by init instead of Tree: a run without
	// root, where the supervisor may not copy a mount and the caller is
	// the user the box already runs as.
	Path string
}

// Layout says what a box's file system holds.
type Layout struct {
	// Image is the directory whose /usr, /bin, /lib* the box gets ("/" for
	// the host).
	Image string
	// ImageSource, when set, is where init finds Image's files: an image
	// mounted detached is /proc/self/fd/N, N differing between the
	// supervisor and init.
	ImageSource string
	// TmpSize is the size of /box and of /tmp, in bytes (0: no limit
	// beyond the memory cgroup).
	TmpSize int64
	// UID and GID own /box (inside the box's user namespace).
	UID, GID int
	// HandOver: a fresh /box is uid 0's until init hands it to UID and
	// GID as the program starts (a supervisor that cannot act as the box
	// user fills it as the box's uid 0).
	HandOver bool
	// Binds are extra binds, applied last, in order.
	Binds []Bind
	// BoxDir, when set, is a host directory bound as /box instead of a
	// fresh tmpfs (persistent boxes).
	BoxDir string
	// HostNet adds the host's resolv.conf, which only makes sense when
	// the box shares the host's network.
	HostNet bool
	// Staging, when set, is the empty host directory the new root is
	// mounted on instead of StagingDir (a user who is not root cannot
	// create that one).
	Staging string
}

// SystemDirs are the box paths every box gets read-only from its image
// (/usr, /bin, /lib*): the plan's own list, for front ends that must know
// the layout (the ioi form's directory rules).
func SystemDirs() []string { return boxPaths("/", systemDirs) }

// Devices are the device nodes of the box's minimal /dev.
func Devices() []string { return boxPaths("/dev/", devNodes) }

func boxPaths(prefix string, names []string) []string {
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = prefix + n
	}
	return paths
}
