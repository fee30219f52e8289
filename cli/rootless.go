package cmdline

import (
	"errors"
	"fmt"

	"github.com/isolate-sandbox/isolate/isolate"
)

// checkRootlessFlags refuses --cgroup-root in a run that has root (the
// service's too, whoever its caller is): it would choose nothing there.
// --allow-rlimit-only, a permission, is accepted and unused: root's limits
// are always the cgroup's.
func (iv *invocation) checkRootlessFlags() error {
	if !iv.rootless && iv.values.cgroupRoot != "" {
		return usageErr(errors.New("--cgroup-root is for a run without root (root's boxes go under cg_root of the configuration)"))
	}
	return nil
}

// rootlessHost prepares the host for a run by a user who is not root: a
// delegated cgroup subtree, or rlimits alone if the caller allows it.
func (iv *invocation) rootlessHost() (*isolate.Host, error) {
	v := &iv.values
	return isolate.NewRootlessHost(nil, isolate.RootlessOptions{CgroupRoot: iv.path(v.cgroupRoot), AllowRlimitOnly: v.allowRlimitOnly})
}

// declined words err, the refusal of a run in-process by a user who is
// not root, after the service it was handed to declined it: that is the
// cause (after an upgrade, a service not yet restarted is another
// version), named first.
func (iv *invocation) declined(err error) error {
	if err == nil || iv.Declined == "" {
		return err
	}
	return fmt.Errorf("%s; in-process instead: %w", iv.Declined, err)
}
