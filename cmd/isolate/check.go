package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// checkCommand diagnoses the host: what a run needs and whether it is
// there.
func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "diagnose the host: kernel features, cgroup mode, images",
		Action: func(c *cli.Context) error {
			if os.Geteuid() != 0 {
				return checkWithoutRoot()
			}
			fails := 0
			line := func(ok bool, what, detail, fix string) {
				mark := "ok  "
				if !ok {
					mark = "FAIL"
					fails++
				}
				fmt.Printf("%s %-22s %s\n", mark, what, detail)
				if !ok && fix != "" {
					fmt.Printf("     fix: %s\n", fix)
				}
			}
			var uts unix.Utsname
			unix.Uname(&uts)
			release := unix.ByteSliceToString(uts.Release[:])
			line(kernelAtLeast(release, 5, 10), "kernel", release, "isolate needs Linux 5.10 or newer (openat2, pidfd_getfd, clone3)")

			mode := cgroup.DetectMode()
			// The host as runs see it: the configuration file's cg_root,
			// or ISOLATE_CGROUP_ROOT.
			host, err := isolate.NewHost(nil)
			if err != nil {
				line(false, "configuration", err.Error(), `fix the line it names (every key: MIGRATING.md, "Setting up")`)
				host, _ = isolate.NewHost(&isolate.Config{BoxRoot: isolate.DefaultBoxRoot, NumBoxes: isolate.DefaultNumBoxes})
			} else if host.Config.Path != "" {
				line(true, "configuration", host.Config.Path, "")
			}
			for _, n := range host.Config.Notes {
				fmt.Printf("note %-22s %s\n", "configuration", n)
			}
			first, count := host.Config.AutoBoxes()
			fmt.Printf("note %-22s callers name 0-%d (num_boxes); isolate picks %d-%d itself (auto_first_box, auto_num_boxes)\n",
				"box ids", host.Config.NumBoxes-1, first, first+count-1)
			mgr, err := host.Cgroups()
			if err != nil {
				line(false, "cgroups", string(mode)+": "+err.Error(), "mount cgroup2 at /sys/fs/cgroup, or the v1 memory, pids, cpu and cpuacct hierarchies")
			} else {
				var dirs []string
				for c, d := range mgr.Parents() {
					if c == "" {
						c = "unified"
					}
					dirs = append(dirs, c+"="+d)
				}
				box, err := mgr.Create("box-check", cgroup.Limits{Memory: 64 << 20, Pids: 8, CPUs: 1})
				if err == nil {
					box.Destroy()
					line(true, "cgroups", string(mode)+", boxes under "+strings.Join(dirs, " "), "")
				} else {
					line(false, "cgroups", string(mode)+": "+err.Error(), "see docs/INSTALL.md: cgroups on a pure v2 host")
				}
			}
			max, _ := os.ReadFile("/proc/sys/user/max_user_namespaces")
			n := strings.TrimSpace(string(max))
			line(n != "" && n != "0", "user namespaces", "max_user_namespaces="+n, "sysctl -w user.max_user_namespaces=15000")
			status, _ := os.ReadFile("/proc/self/status")
			line(strings.Contains(string(status), "Seccomp_filters"), "seccomp", "filter mode available", "a kernel with CONFIG_SECCOMP_FILTER")
			fs, _ := os.ReadFile("/proc/filesystems")
			for _, name := range []string{"squashfs", "overlay", "tmpfs"} {
				ok := strings.Contains(string(fs), "\t"+name+"\n")
				if !ok && name != "tmpfs" {
					// modules load on first mount; only report
					fmt.Printf("note %-22s %s\n", name, "not loaded (modprobe "+name+" for images)")
					continue
				}
				line(ok, name, "supported", "")
			}
			_, err = os.Stat("/dev/loop-control")
			if err == nil {
				line(true, "loop devices", "/dev/loop-control", "")
			} else {
				fmt.Printf("note %-22s %s\n", "loop devices", "no /dev/loop-control (needed only for squashfs images)")
			}
			checkImages(line)
			checkBoxes(host.Config.BoxRoot)
			if fails > 0 {
				return failure(fmt.Sprintf("%d check(s) failed: runs will not work on this host", fails))
			}
			return nil
		},
	}
}

// checkBoxes lists the persistent boxes (`isolate init`, ioi's --init):
// state a caller asked to keep, until `isolate cleanup` removes it.
func checkBoxes(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return // none made yet
	}
	var ids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	if len(ids) > 0 {
		fmt.Printf("note %-22s %s in %s (isolate cleanup --box-id N removes one)\n", "persistent boxes", strings.Join(ids, " "), root)
	}
}

// checkImages lists the built images and the image cache (their unpacked
// trees, the only state of ours that stays between runs).
func checkImages(line func(ok bool, what, detail, fix string)) {
	ms, err := rootfs.ListImages()
	if err != nil {
		line(false, "images", err.Error(), "")
		return
	}
	names := make([]string, 0, len(ms))
	for _, m := range ms {
		names = append(names, m.Name)
	}
	if len(names) == 0 {
		fmt.Printf("note %-22s %s\n", "images", "none built in "+rootfs.ImagesDir()+" (isolate image build --all)")
	} else {
		line(true, "images", strings.Join(names, " ")+" in "+rootfs.ImagesDir(), "")
	}
	trees, err := rootfs.ListTrees()
	if errors.Is(err, fs.ErrPermission) {
		// Its owner is another user, or one not mapped into this user
		// namespace (the host's images bound into a container): runs
		// open their trees by name, which needs no listing.
		fmt.Printf("note %-22s %s is not listable here (runs open trees by name)\n", "image cache", rootfs.TreesDir())
		return
	}
	if err != nil {
		line(false, "image cache", err.Error(), "isolate cleanup --images")
		return
	}
	var bytes int64
	old, inUse := 0, 0
	for _, t := range trees {
		bytes += t.Bytes
		if !t.Current {
			old++
		}
		if t.InUse {
			inUse++
		}
	}
	fmt.Printf("note %-22s %d trees, %.1f MiB in %s (%d old, %d in use; isolate cleanup --images removes them)\n",
		"image cache", len(trees), float64(bytes)/(1<<20), rootfs.TreesDir(), old, inUse)
}

func kernelAtLeast(release string, major, minor int) bool {
	var a, b int
	fmt.Sscanf(release, "%d.%d", &a, &b)
	return a > major || (a == major && b >= minor)
}
