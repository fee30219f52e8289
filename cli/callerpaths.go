package cmdline

// The host paths an invocation names: resolved from the caller's
// directory, and, for a caller other than this process, checked with the
// caller's rights before anything is created (the runtime itself opens
// the standard streams, copy-in sources and copy-out destinations with
// them).

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
)

// ownFDs are the names of the caller's standard descriptors.
var ownFDs = map[string]int{
	"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2,
	"/dev/fd/0": 0, "/dev/fd/1": 1, "/dev/fd/2": 2,
	"/proc/self/fd/0": 0, "/proc/self/fd/1": 1, "/proc/self/fd/2": 2,
}

// hostPath is the path the runtime opens for a host file the caller
// named: relative to the caller's directory, and, run in-process, a name
// of one of the caller's standard descriptors (/dev/stdout) made the name
// of the descriptor this process holds for it (for another process, the
// runtime maps them: see hostfs.Cred's Std).
func (iv *invocation) hostPath(p string) string {
	if n, ok := ownFDs[p]; ok && iv.Caller == nil {
		if f := [3]*os.File{iv.Stdin, iv.Stdout, iv.Stderr}[n]; f != nil {
			if fd := int(f.Fd()); fd != n {
				return "/proc/self/fd/" + strconv.Itoa(fd)
			}
		}
		return p
	}
	return iv.path(p)
}

// namesOwnStdin tells whether --stdin names the caller's own standard
// input, and that is open.
func (iv *invocation) namesOwnStdin(p string) bool {
	if n, ok := ownFDs[p]; !ok || n != 0 || iv.Stdin == nil {
		return false
	}
	_, err := iv.Stdin.Stat()
	return err == nil
}

// imagePath is --image: a host path when it has a slash, else a name.
func (iv *invocation) imagePath(image string) string {
	if strings.Contains(image, "/") {
		return iv.path(image)
	}
	return image
}

// profilePath is --seccomp: default, none, or a profile's host path.
func (iv *invocation) profilePath(profile string) string {
	if profile == "default" || profile == "none" || profile == "" {
		return profile
	}
	return iv.path(profile)
}

// checkCallerPaths checks spec, for a caller other than this process,
// against the service's policy (which also applies its caps), then
// refuses a host path of spec (and sources, exec's source files) that the
// caller cannot open itself: bind sources (writable ones also written),
// an image or a seccomp profile given as a path, copy-in sources. The
// runtime opens them with the service's rights; the caller gains nothing
// by it.
func (iv *invocation) checkCallerPaths(spec *api.Spec, sources ...string) error {
	// What the run asked, before the caps apply (the audit line's).
	iv.asked, iv.granted = api.Limits(spec), spec
	if iv.Caller == nil {
		return nil
	}
	if err := iv.Policy.Check(*iv.Caller, spec, ""); err != nil {
		return flagError(err)
	}
	type use struct {
		what, path string
		write      bool
	}
	var uses []use
	for _, b := range spec.Binds {
		uses = append(uses, use{"--bind", b.Host, b.Writable})
	}
	if strings.Contains(spec.Image, "/") {
		uses = append(uses, use{"--image", spec.Image, false})
	}
	if p := spec.Seccomp; p != "" && p != "default" && p != "none" {
		uses = append(uses, use{"--seccomp", p, false})
	}
	for _, c := range spec.CopyIn {
		uses = append(uses, use{"--copy-in", c.From, false})
	}
	for _, s := range sources {
		uses = append(uses, use{"exec: source", s, false})
	}
	return hostfs.AsCaller(iv.cred, func() error {
		for _, u := range uses {
			fd, err := unix.Open(u.path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
				if u.write {
					// AT_EACCESS: the thread's credentials, the caller's.
					err = unix.Faccessat(unix.AT_FDCWD, u.path, unix.W_OK, unix.AT_EACCESS)
				}
			}
			if err != nil {
				return fmt.Errorf("%s %s: %v (as uid %d)", u.what, u.path, err, iv.cred.UID)
			}
		}
		return nil
	})
}
