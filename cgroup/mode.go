package cgroup

import (
	"github.com/containerd/cgroups/v3"
)

// Mode is the cgroup layout of the host.
type Mode string

const (
	// V1 is a host where every controller is on a v1 hierarchy.
	V1 Mode = "v1"
	// Hybrid is a host with v1 controllers plus a (mostly empty) cgroup2
	// mount at /sys/fs/cgroup/unified. Boxes use the v1 controllers.
	Hybrid Mode = "hybrid"
	// V2 is a host with only the unified hierarchy.
	V2 Mode = "v2"
	// None means no usable cgroup file system was found.
	None Mode = "none"
)

// DetectMode reports the host's cgroup layout.
func DetectMode() Mode {
	switch cgroups.Mode() {
	case cgroups.Legacy:
		return V1
	case cgroups.Hybrid:
		return Hybrid
	case cgroups.Unified:
		return V2
	}
	return None
}

// usesV1 tells whether boxes on this host use the v1 controllers.
func (m Mode) usesV1() bool { return m == V1 || m == Hybrid }
