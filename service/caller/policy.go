package caller

import (
	"fmt"
	"slices"
	"strings"

	"github.com/isolate-sandbox/isolate/api"
)

// Policy is what callers who are not root may ask of this service: the
// operator's caps and groups. Root on the unix socket (API or handover)
// may ask anything it could do itself; everyone else gets exactly a
// caller's rights (SECURITY.md, "Callers").
type Policy struct {
	Caps Caps
	// NetHostGroups may ask `net: host`; SeccompNoneGroups `seccomp:
	// none`. Empty: nobody but root (--net-host-group,
	// --seccomp-none-group).
	NetHostGroups, SeccompNoneGroups []int
	// NetGrants are what groups' members may put in an allowlist
	// (--net-allow-group); none: only root may ask one.
	NetGrants []NetGrant
}

// Refusal is a request this caller may not make, whatever its shape
// (HTTP 403; the CLI's exit status 2): the field and why. It unwraps to
// the field's error, so front ends word it as they word any field.
type Refusal struct{ Err *api.FieldError }

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// refuse is a Refusal of field (below prefix).
func refuse(prefix, field, format string, a ...any) error {
	return &Refusal{&api.FieldError{Field: prefix + field, Msg: fmt.Sprintf(format, a...)}}
}

// Check checks a run's spec (prefix is its path in the request, e.g.
// "commands[0].") against what c may ask, and sets the limits the caps
// give a request that leaves them at their default (a nil Policy has no
// caps and no groups). A refusal is a *Refusal; a value beyond a cap is
// an *api.FieldError.
func (p *Policy) Check(c Caller, s *api.Spec, prefix string) error {
	if p == nil {
		p = &Policy{} // no caps, no groups
	}
	if !c.Root() {
		switch {
		case s.BoxID != nil:
			return refuse(prefix, "box_id", "choosing a box id needs root: persistent boxes and the ids they use are root's (a caller who is not root gets a free box)")
		case isPath(s.Image):
			return refuse(prefix, "image", "%s: an image given as a host path needs root (a caller who is not root may use host and the built images: isolate langs)", s.Image)
		case s.Seccomp != "" && s.Seccomp != "default" && s.Seccomp != "none":
			return refuse(prefix, "seccomp", "%s: a profile file needs root (a caller who is not root may use default, or none where the service allows it)", s.Seccomp)
		case s.Seccomp == "none" && !p.allows(c, p.SeccompNoneGroups):
			return refuse(prefix, "seccomp", "none: this service allows it to root only, and to the groups of --seccomp-none-group")
		case s.Net == "host" && !p.allows(c, p.NetHostGroups):
			return refuse(prefix, "net", "host: this service allows it to root only, and to the groups of --net-host-group")
		case len(s.Binds) > 0 && c.Via != Handover:
			return refuse(prefix, "binds", "binding host paths needs root on the unix socket (the service opens no host path for an API caller who is not root)")
		}
		if err := p.checkNetwork(c, s.Network, prefix); err != nil {
			return err
		}
	}
	if !c.Capped() {
		return nil
	}
	if (c.Via == API || c.Via == TCP || c.Via == Queue) && s.OutputLimitBytes == api.Unlimited {
		return &api.FieldError{Field: prefix + "output_limit_bytes", Msg: "-1: the service keeps captured output in memory: give a size in bytes (0: the default)"}
	}
	return p.Caps.apply(s, prefix)
}

// Capped tells whether the service's caps (--max-*, --parallel) bound
// c's requests: every API caller's, and a handed-over run's unless root
// gave it (root could run it in-process, unbounded).
func (c Caller) Capped() bool { return c.Via != Process && !(c.Via == Handover && c.Root()) }

// allows tells whether c may ask what groups opt into: root always, a
// caller in one of the groups, nobody else (never a TCP caller: it has
// no groups; nor a queue job).
func (p *Policy) allows(c Caller, groups []int) bool {
	if c.Root() {
		return true
	}
	return slices.ContainsFunc(groups, c.InGroup)
}

// isPath tells an image given as a host path from a name.
func isPath(image string) bool { return strings.Contains(image, "/") }

// MayUseStore tells whether c may read or delete a stored file its owner
// put: root may, any other caller only its own.
func (c Caller) MayUseStore(owner string) bool { return c.Root() || owner == c.StoreOwner() }

// StoreOwner is who the file store says owns what c stores: "" for root
// (the operator, bound by the store's quota only), its uid, or the
// token's callers together.
func (c Caller) StoreOwner() string {
	switch {
	case c.Root():
		return ""
	case c.Via == TCP:
		return "tcp"
	case c.Via == Queue:
		return "queue"
	}
	return fmt.Sprintf("uid:%d", c.UID)
}
