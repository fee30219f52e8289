package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A container on a cgroup v2 host, as runc, crun and the kubelet's
// runtimes make one: a cgroup of the container's own, in which its
// process starts, and a cgroup namespace rooted there with cgroup2
// mounted at /sys/fs/cgroup. The service, the container's process, is in
// the namespace root, a cgroup that holds processes and so cannot enable
// controllers for its children until the service moves itself into a
// leaf (cgroup/container.go).
var containerCgroup = filepath.Join(cgroupRoot, "container.scope")

// containerInitArg makes the driver the container runtime's last step:
// `driver container-init PROGRAM ARGS...`, started in the container's
// cgroup, enters a new cgroup namespace (rooted at that cgroup) and a
// mount namespace with cgroup2 mounted afresh at /sys/fs/cgroup, then
// executes PROGRAM, as runc's init does.
const containerInitArg = "container-init"

func containerInit(argv []string) {
	// The namespaces are the thread's; exec keeps the thread's.
	runtime.LockOSThread()
	fail := func(step string, err error) {
		fmt.Fprintf(os.Stderr, "container-init: %s: %v\n", step, err)
		os.Exit(125)
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP | unix.CLONE_NEWNS); err != nil {
		fail("unshare", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fail("make / private", err)
	}
	if err := unix.Unmount("/sys/fs/cgroup", unix.MNT_DETACH); err != nil {
		fail("unmount the host's cgroup2", err)
	}
	if err := unix.Mount("cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		fail("mount cgroup2", err)
	}
	fail("exec "+argv[0], unix.Exec(argv[0], argv, os.Environ()))
}

// container: the service started as a container runtime starts it. With
// another process in the container's cgroup (not the service's), the
// service leaves it where it is, makes nothing and answers XX saying
// why; once that process is gone, the next run moves the service into
// its leaf and runs: the box in the namespace's isolate/box-N, its memory
// limit enforced, a box built ahead too. On SIGTERM it stops and leaves
// nothing in the container's cgroup but its own empty leaf, which the
// runtime removes with the container's cgroup.
func (d *driver) container() {
	defer func() {
		for _, dir := range []string{filepath.Join(containerCgroup, "isolate-supervisor"), containerCgroup} {
			if err := syscall.Rmdir(dir); err != nil && err != syscall.ENOENT {
				d.check("container: removed", false, "rmdir %s: %v", dir, err)
			}
		}
	}()
	if err := os.Mkdir(containerCgroup, 0o755); err != nil {
		d.check("container: foreign process", false, "set up: %v", err)
		return
	}
	cg, err := os.Open(containerCgroup)
	if err != nil {
		d.check("container: foreign process", false, "set up: %v", err)
		return
	}
	defer cg.Close()
	// Another process of the container, as a wrapper shell or an exec'd
	// command would be.
	other := exec.Command("/bin/sleep", "1000")
	other.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if err := other.Start(); err != nil {
		d.check("container: foreign process", false, "start a process in %s: %v", containerCgroup, err)
		return
	}
	otherDone := false
	stopOther := func() {
		if !otherDone {
			other.Process.Kill()
			other.Wait()
			otherDone = true
		}
	}
	defer stopOther()

	self, _ := os.Executable()
	sock := "/tmp/isolate-container.sock"
	serve := exec.Command(self, containerInitArg, filepath.Join(filepath.Dir(d.bin), "isolate-serve"),
		"--socket", sock, "--store", "/tmp/isolate-container-files", "--parallel", "2")
	serve.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	serve.Stderr = os.Stderr
	if err := serve.Start(); err != nil {
		d.check("container: foreign process", false, "start the service: %v", err)
		return
	}
	stopped := false
	defer func() {
		if !stopped {
			serve.Process.Kill()
			serve.Wait()
		}
	}()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "unix", sock)
	}}}
	if !waitFor(20*time.Second, func() bool {
		resp, err := client.Get("http://isolate/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}) {
		d.check("container: foreign process", false, "no service on %s", sock)
		return
	}
	fmt.Printf("container: the service's cgroup %s; the other process's %s\n",
		procCgroup(serve.Process.Pid), procCgroup(other.Process.Pid))

	cat := `{"args":["/bin/cat","/proc/self/cgroup"],"memory_bytes":67108864}`
	r, err := postRun(client, cat)
	entries, _ := os.ReadDir(containerCgroup)
	var made []string
	for _, e := range entries {
		if e.IsDir() {
			made = append(made, e.Name())
		}
	}
	d.check("container: foreign process", err == nil && r.Status == "XX" && strings.Contains(r.Message, "not isolate's") &&
		procCgroup(other.Process.Pid) == "0::/container.scope" && procCgroup(serve.Process.Pid) == "0::/container.scope" && len(made) == 0,
		"%s %q (%v); the other process in %q, the service in %q, cgroups made in %s: %v", statusOf(r), messageOf(r), err,
		procCgroup(other.Process.Pid), procCgroup(serve.Process.Pid), containerCgroup, made)

	stopOther()
	r, err = postRun(client, cat)
	want := "0::/isolate/box-"
	ok := err == nil && r.Status == "OK" && r.Sandbox.Cgroup == "v2" && strings.HasPrefix(strings.TrimSpace(r.Stdout), want)
	d.check("container: service alone", ok && procCgroup(serve.Process.Pid) == "0::/container.scope/isolate-supervisor" &&
		readTrim(filepath.Join(containerCgroup, "cgroup.subtree_control")) == "cpu memory pids",
		"%s %q (%v), the program in %q (want %sN); the service in %q; %s/cgroup.subtree_control %q",
		statusOf(r), messageOf(r), err, strings.TrimSpace(stdoutOf(r)), want, procCgroup(serve.Process.Pid),
		containerCgroup, readTrim(filepath.Join(containerCgroup, "cgroup.subtree_control")))
	r, err = postRun(client, `{"args":["/bin/sh","-c","x=xxxxxxxxxxxxxxxx; while true; do x=\"$x$x\"; done"],"memory_bytes":16777216}`)
	d.check("container: memory limit", err == nil && r.Status == "ML", "16 MiB: %s %q (%v)", statusOf(r), messageOf(r), err)
	d.pooled(client, "container: pooled box", `{"args":["/bin/true"],"pids":3}`, func(r *report) bool { return r.Status == "OK" })

	serve.Process.Signal(syscall.SIGTERM)
	werr := serve.Wait()
	stopped = true
	entries, _ = os.ReadDir(containerCgroup)
	made = made[:0]
	for _, e := range entries {
		if e.IsDir() {
			made = append(made, e.Name())
		}
	}
	leafProcs := readTrim(filepath.Join(containerCgroup, "isolate-supervisor", "cgroup.procs"))
	d.check("container: stops clean", werr == nil && len(made) == 1 && made[0] == "isolate-supervisor" && leafProcs == "" && len(boxProcesses(-1)) == 0,
		"SIGTERM: %v; cgroups left in %s: %v (want the empty leaf alone; it holds %q); box processes %v",
		werr, containerCgroup, made, leafProcs, boxProcesses(-1))
}

// postRun posts one command to /v1/run and returns its result.
func postRun(client *http.Client, command string) (*report, error) {
	resp, err := client.Post("http://isolate/v1/run", "application/json", strings.NewReader(`{"commands":[`+command+`]}`))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Results []report `json:"results"`
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Results) != 1 {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return &out.Results[0], nil
}

// procCgroup is process pid's v2 cgroup line, as the driver sees it.
func procCgroup(pid int) string {
	return readTrim(fmt.Sprintf("/proc/%d/cgroup", pid))
}

func statusOf(r *report) string {
	if r == nil {
		return "no report"
	}
	return string(r.Status)
}

func messageOf(r *report) string {
	if r == nil {
		return ""
	}
	return r.Message
}

func stdoutOf(r *report) string {
	if r == nil {
		return ""
	}
	return r.Stdout
}

// A unit systemd started with Delegate=yes (the shipped isolate.service):
// its cgroup, below a slice that enables the controllers for it, marked
// with the trusted.delegate attribute "1" as systemd marks one.
var (
	systemSlice = filepath.Join(cgroupRoot, "system.slice")
	unitCgroup  = filepath.Join(systemSlice, "isolate.service")
)

// systemdUnit: the service started in a delegated unit's cgroup moves
// itself into its leaf and runs boxes there (the program in the unit's
// isolate/box-N, its memory limit enforced); on SIGTERM only the empty
// leaf is left. A cgroup not marked delegated is never prepared (the
// session scope's refusal, systemdLayout).
func (d *driver) systemdUnit() {
	defer func() {
		for _, dir := range []string{filepath.Join(unitCgroup, "isolate-supervisor"), unitCgroup, systemSlice} {
			if err := syscall.Rmdir(dir); err != nil && err != syscall.ENOENT {
				d.check("unit: removed", false, "rmdir %s: %v", dir, err)
			}
		}
	}()
	if err := os.Mkdir(systemSlice, 0o755); err != nil {
		d.check("unit: delegated", false, "set up: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(systemSlice, "cgroup.subtree_control"), []byte("+cpu +memory +pids"), 0); err != nil {
		d.check("unit: delegated", false, "enable controllers in %s: %v", systemSlice, err)
		return
	}
	if err := os.Mkdir(unitCgroup, 0o755); err != nil {
		d.check("unit: delegated", false, "set up: %v", err)
		return
	}
	if err := unix.Setxattr(unitCgroup, "trusted.delegate", []byte("1"), 0); err != nil {
		d.check("unit: delegated", false, "mark %s delegated: %v", unitCgroup, err)
		return
	}
	cg, err := os.Open(unitCgroup)
	if err != nil {
		d.check("unit: delegated", false, "set up: %v", err)
		return
	}
	defer cg.Close()
	sock := "/tmp/isolate-unit.sock"
	serve := exec.Command(filepath.Join(filepath.Dir(d.bin), "isolate-serve"), "--socket", sock, "--store", "/tmp/isolate-unit-files", "--parallel", "2")
	serve.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	serve.Stderr = os.Stderr
	if err := serve.Start(); err != nil {
		d.check("unit: delegated", false, "start the service: %v", err)
		return
	}
	stopped := false
	defer func() {
		if !stopped {
			serve.Process.Kill()
			serve.Wait()
		}
	}()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "unix", sock)
	}}}
	if !waitFor(20*time.Second, func() bool {
		resp, err := client.Get("http://isolate/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}) {
		d.check("unit: delegated", false, "no service on %s", sock)
		return
	}
	r, err := postRun(client, `{"args":["/bin/cat","/proc/self/cgroup"],"memory_bytes":67108864}`)
	want := "0::/system.slice/isolate.service/isolate/box-"
	d.check("unit: delegated", err == nil && r.Status == "OK" && strings.HasPrefix(strings.TrimSpace(r.Stdout), want) &&
		procCgroup(serve.Process.Pid) == "0::/system.slice/isolate.service/isolate-supervisor" &&
		readTrim(filepath.Join(unitCgroup, "cgroup.subtree_control")) == "cpu memory pids",
		"%s %q (%v), the program in %q (want %sN); the service in %q; %s/cgroup.subtree_control %q",
		statusOf(r), messageOf(r), err, strings.TrimSpace(stdoutOf(r)), want, procCgroup(serve.Process.Pid),
		unitCgroup, readTrim(filepath.Join(unitCgroup, "cgroup.subtree_control")))
	r, err = postRun(client, `{"args":["/bin/sh","-c","x=xxxxxxxxxxxxxxxx; while true; do x=\"$x$x\"; done"],"memory_bytes":16777216}`)
	d.check("unit: memory limit", err == nil && r.Status == "ML", "16 MiB: %s %q (%v)", statusOf(r), messageOf(r), err)

	serve.Process.Signal(syscall.SIGTERM)
	werr := serve.Wait()
	stopped = true
	var made []string
	entries, _ := os.ReadDir(unitCgroup)
	for _, e := range entries {
		if e.IsDir() {
			made = append(made, e.Name())
		}
	}
	leafProcs := readTrim(filepath.Join(unitCgroup, "isolate-supervisor", "cgroup.procs"))
	d.check("unit: stops clean", werr == nil && len(made) == 1 && made[0] == "isolate-supervisor" && leafProcs == "",
		"SIGTERM: %v; cgroups left in %s: %v (want the empty leaf alone; it holds %q)", werr, unitCgroup, made, leafProcs)
}
