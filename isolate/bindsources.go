package isolate

// A run's bind sources, opened with the caller's rights and checked by
// hostfs.OpenBindSource, held until the box's init has bound them.

import (
	"fmt"
	"os"

	"github.com/isolate-sandbox/isolate/isolate/hostfs"
)

// bindSource is one bind's source (nil for a file system mount and for
// an optional source that does not exist), and its descriptor in init.
type bindSource struct {
	*hostfs.BindSource
	initFD int // init's descriptor of Tree
}

// openBinds opens the run's bind sources (see bindSource), one per
// spec.Binds entry: nil for a file system mount and for an optional
// source that does not exist.
func (s *supervisor) openBinds() error {
	if len(s.spec.Binds) == 0 {
		return nil
	}
	devDev, err := hostfs.HostDevDevice()
	if err != nil {
		return err
	}
	s.binds = make([]*bindSource, len(s.spec.Binds))
	return hostfs.WithFSThread(func(t *hostfs.FSThread) error {
		for i, b := range s.spec.Binds {
			if b.FS != "" {
				continue
			}
			src, err := hostfs.OpenBindSource(t, s.caller(), b, devDev, s.host.rootless != nil)
			if err != nil {
				return fmt.Errorf("bind %s: %w", b.Host, err)
			}
			if src != nil {
				s.binds[i] = &bindSource{BindSource: src}
			}
		}
		return nil
	})
}

// bindIDMap is the user namespace the run's bind copies are idmapped by,
// or nil: a caller who is not root (and not this process) reads and
// writes its binds with its own rights (rootless_idmap.go); root's and this
// process's own binds are not mapped.
func (s *supervisor) bindIDMap() (*os.File, error) {
	c := s.spec.Caller
	if c == nil || c.UID == 0 || s.host.rootless != nil {
		return nil, nil
	}
	for _, b := range s.binds {
		if b != nil && b.Path == "" {
			if s.lock == nil {
				return nil, fmt.Errorf("bind %s: no box id to map the caller's uid to", b.Source.Name())
			}
			return idmapUserns(Cred{UID: c.UID, GID: c.GID}, boxCred(s.lock.id))
		}
	}
	return nil, nil
}

func (s *supervisor) closeBinds() {
	closeBindSources(s.binds)
	s.binds = nil
}

// closeBindSources lets go of bind sources and their detached copies.
func closeBindSources(binds []*bindSource) {
	for _, b := range binds {
		if b != nil {
			b.Close()
		}
	}
}
