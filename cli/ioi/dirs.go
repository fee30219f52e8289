package ioi

// ioi/isolate's directory rules (-d IN=OUT:OPTIONS) and how they map onto
// the box our runtime builds.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// dirRule is one directory rule: in is the path inside the box (no
// leading slash), out the host directory (absolute, or "./x" relative to
// the box's directory), a file system type with fs, or "" when the rule
// removes what was bound there.
type dirRule struct {
	in    string
	out   string
	opts  dirOpts
	isDef bool // one of the default rules, which -D drops
}

type dirOpts struct{ rw, noexec, fs, maybe, dev, tmp, norec bool }

type dirRules struct{ list []*dirRule }

// newDirRules starts with ioi/isolate 2.x's default rules.
func newDirRules() *dirRules {
	d := &dirRules{}
	for _, r := range []string{"box=./box:rw", "bin", "dev:dev", "lib", "lib64:maybe", "proc=proc:fs", "tmp:tmp", "usr"} {
		if err := d.set(r, true); err != nil {
			panic(err)
		}
	}
	return d
}

// set adds (or replaces, keeping its place) the rule for one inside path.
func (d *dirRules) set(arg string, isDef bool) error {
	bad := fmt.Errorf("invalid directory rule specified: %s", arg)
	spec, optList, _ := strings.Cut(arg, ":")
	var o dirOpts
	if optList != "" || strings.HasSuffix(arg, ":") {
		for _, name := range strings.Split(optList, ":") {
			flag := map[string]*bool{"rw": &o.rw, "noexec": &o.noexec, "fs": &o.fs, "maybe": &o.maybe, "dev": &o.dev, "tmp": &o.tmp, "norec": &o.norec}[name]
			if flag == nil {
				return fmt.Errorf("unknown directory option %q in %s", name, arg)
			}
			*flag = true
		}
	}
	in, out, hasEq := strings.Cut(spec, "=")
	switch {
	case o.fs && o.tmp:
		return bad
	case o.fs:
		if !hasEq || out == "" || strings.Contains(out, "/") {
			return bad
		}
	case o.tmp:
		if hasEq {
			return bad
		}
		o.rw = true
		out = "tmp" // the directory comes from the box (see apply)
	case hasEq:
		if out != "" && out[0] != '/' && !strings.HasPrefix(out, "./") {
			return bad
		}
	default:
		out = "/" + strings.TrimLeft(in, "/")
	}
	in = strings.TrimLeft(in, "/")
	if in == "" {
		return bad
	}
	for _, part := range strings.Split(in, "/") {
		if part == ".." {
			return bad
		}
	}
	in = filepath.Clean(in)
	for _, r := range d.list {
		if r.in == in {
			r.out, r.opts, r.isDef = out, o, isDef
			return nil
		}
	}
	d.list = append(d.list, &dirRule{in: in, out: out, opts: o, isDef: isDef})
	return nil
}

// mountPoint is where a host directory (or device) appears in the box,
// for finding the files -i, -o and -r name.
type mountPoint struct {
	box      string // absolute path inside the box
	host     string
	writable bool
	dev      bool // devices may be opened there (the rule's dev option)
}

// The runtime binds rootfs.SystemDirs read-only from the image into every
// box, as ioi/isolate's default rules bind bin, lib, lib64 and usr, and
// gives it a minimal /dev of rootfs.Devices.
var systemDirs, boxDevices = rootfs.SystemDirs(), rootfs.Devices()

// apply turns the rules into binds of spec, and lists where host paths
// appear in the box. pb is the persistent box ("./" paths, tmp rules).
func (d *dirRules) apply(spec *isolate.Spec, pb *isolate.PersistentBox, noDefaults bool) ([]mountPoint, error) {
	var mounts []mountPoint
	for _, r := range d.list {
		if (noDefaults && r.isDef) || r.out == "" {
			continue
		}
		in := "/" + r.in
		o := r.opts
		switch {
		case o.fs:
			if in == "/proc" && r.out == "proc" {
				continue // the runtime's own /proc (hidepid, only the box's processes)
			}
			// A file system type has no host path; "/" satisfies the
			// runtime's check that a bind's host path exists.
			spec.Binds = append(spec.Binds, isolate.Bind{Host: "/", Box: in, FS: r.out, Writable: o.rw, Dev: o.dev, NoExec: o.noexec})
			continue
		case o.tmp:
			host, err := pb.TmpDir(r.in)
			if err != nil {
				return nil, err
			}
			spec.Binds = append(spec.Binds, isolate.Bind{Host: host, Box: in, Writable: true, Dev: o.dev, NoExec: o.noexec})
			mounts = append(mounts, mountPoint{in, host, true, o.dev})
			continue
		}
		host := r.out
		if strings.HasPrefix(host, "./") {
			host = filepath.Join(pb.Dir, host)
		}
		if fi, err := os.Stat(host); o.maybe && (err != nil || !fi.IsDir()) {
			continue
		}
		plain := !o.rw && !o.dev && !o.noexec
		switch {
		case in == "/box" && host == pb.BoxDir():
			spec.BoxDir = host
			mounts = append(mounts, mountPoint{in, host, true, false})
			continue
		case in == "/dev" && host == "/dev":
			continue // the runtime's minimal /dev, never the host's
		case in == "/proc":
			continue // the box's own procfs, never the host's (-d /proc)
		case host == "/proc" || strings.HasPrefix(host, "/proc/"):
			return nil, fmt.Errorf("-d %s=%s: the host's /proc is never bound into a box", in, host)
		case plain && host == in && contains(systemDirs, in):
			continue // the runtime binds it read-only already
		}
		spec.Binds = append(spec.Binds, isolate.Bind{Host: host, Box: in, Writable: o.rw, Dev: o.dev, NoExec: o.noexec, NoRec: o.norec, Optional: o.maybe})
		mounts = append(mounts, mountPoint{in, host, o.rw, o.dev})
	}
	for _, dir := range systemDirs {
		mounts = append(mounts, mountPoint{dir, dir, false, false})
	}
	for _, dev := range boxDevices {
		mounts = append(mounts, mountPoint{dev, dev, true, true})
	}
	return mounts, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
