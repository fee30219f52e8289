package main

// A service run by a user who is not root: the user's own, for the user
// alone. Its boxes are the user's as `isolate run` makes them without root
// (user namespaces of the user's, a delegated cgroup v2 subtree or, where
// allowed, rlimits alone); its sockets, work directories and file store are
// in the user's own directory (isolate.UserRuntimeDir, mode 0700), where
// the CLI of the same user finds the CLI socket and hands its runs over.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/service/caller"
	"github.com/isolate-sandbox/isolate/service/handover"
	"github.com/isolate-sandbox/isolate/service/server"
)

// ownPaths puts the sockets, work directories and file store of a service
// without root in the user's own directory, unless given, and refuses
// what needs root.
func (o *options) ownPaths() error {
	if o.socketGroup != "" {
		return errors.New("--socket-group: a service run by a user who is not root is the user's alone (its sockets are mode 0600)")
	}
	if len(o.netHostGroups) > 0 || len(o.seccompNoneGroups) > 0 {
		return errors.New("--net-host-group, --seccomp-none-group: a service run by a user who is not root has no other callers (its user may ask net: host and seccomp: none as without a service)")
	}
	dir, err := isolate.UserRuntimeDir()
	if err != nil {
		return err
	}
	if why := isolate.RuntimeDirNote(); why != "" {
		fmt.Fprintf(os.Stderr, "isolate serve: warning: %s; using %s instead (the isolate CLI looks there too)\n", why, dir)
	}
	if !o.set["socket"] {
		o.socket = filepath.Join(dir, filepath.Base(server.DefaultSocket))
	}
	if !o.set["cli-socket"] {
		o.cliSocket = filepath.Join(dir, filepath.Base(handover.DefaultSocket))
	}
	if !o.set["store"] {
		o.storeDir = filepath.Join(dir, "files")
	}
	server.SetWorkRoot(filepath.Join(dir, "work"))
	return nil
}

// newHost is root's host, or the user's (rootless) for a service run by a
// user who is not root.
func newHost(o *options) (*isolate.Host, error) {
	if os.Geteuid() == 0 {
		return isolate.NewHost(nil)
	}
	return isolate.NewRootlessHost(nil, isolate.RootlessOptions{CgroupRoot: o.cgroupRoot, AllowRlimitOnly: o.allowRlimitOnly})
}

// ownersRunsOnly is why a service without root leaves a handed-over
// command line to the CLI, which then runs it in-process: the caller is
// not the service's user (its socket is the user's alone, and the CLI
// hands over only to a service of its own uid or root's: this is the
// last word), or the run names its own delegated cgroup, whereas the service's
// boxes go under the service's. Declining is always safe: the CLI runs it
// as it would without a service.
func ownersRunsOnly(c caller.Caller, args []string) string {
	if c.UID != os.Geteuid() {
		return "the service is another user's"
	}
	for _, a := range args[1:] {
		if a == "--" {
			break
		}
		if strings.HasPrefix(strings.TrimLeft(a, "-"), "cgroup-root") {
			return "--cgroup-root: the service's boxes go under its own cgroup"
		}
	}
	return ""
}
