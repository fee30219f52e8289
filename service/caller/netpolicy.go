package caller

import (
	"fmt"
	"strings"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate/egress"
)

// NetGrant is what the members of a group who are not root may allow a
// box to reach (--net-allow-group GROUP=LIST): each entry of their
// allowlists must lie within one of these rules.
type NetGrant struct {
	GID   int
	Rules []egress.Rule
}

// ParseNetGrant reads GROUP=LIST, the group resolved by gid.
func ParseNetGrant(v string, gid func(string) (int, error)) (NetGrant, error) {
	group, list, ok := strings.Cut(v, "=")
	if !ok || group == "" || list == "" {
		return NetGrant{}, fmt.Errorf("%q: expected GROUP=ENTRY,ENTRY,...", v)
	}
	id, err := gid(group)
	if err != nil {
		return NetGrant{}, err
	}
	g := NetGrant{GID: id}
	for _, e := range strings.Split(list, ",") {
		r, err := egress.ParseRule(e)
		if err != nil {
			return NetGrant{}, fmt.Errorf("%q: %v", e, err)
		}
		g.Rules = append(g.Rules, r)
	}
	return g, nil
}

// checkNetwork refuses an allowlist entry that c may not ask: root may
// ask any; a caller who is not root only what a grant of one of its
// groups covers (a TCP caller or a queue job has no groups: none).
func (p *Policy) checkNetwork(c Caller, n *api.Network, prefix string) error {
	if n == nil || c.Root() {
		return nil
	}
	for i, e := range n.Allow {
		r, err := egress.ParseRule(e)
		if err != nil {
			return nil // Validate names it
		}
		if !p.granted(c, r) {
			return refuse(prefix, fmt.Sprintf("network.allow[%d]", i), "%s: this service lets a caller who is not root allow only what --net-allow-group grants one of its groups", e)
		}
	}
	return nil
}

func (p *Policy) granted(c Caller, r egress.Rule) bool {
	for _, g := range p.NetGrants {
		if !c.InGroup(g.GID) {
			continue
		}
		for _, allowed := range g.Rules {
			if covers(allowed, r) {
				return true
			}
		}
	}
	return false
}

// covers tells whether everything r names, g names too.
func covers(g, r egress.Rule) bool {
	if g.Port != 0 && g.Port != r.Port {
		return false
	}
	switch {
	case g.Domain == "" && r.Domain == "":
		return g.Prefix.Bits() <= r.Prefix.Bits() && g.Prefix.Contains(r.Prefix.Addr())
	case g.Domain == "" || r.Domain == "":
		return false
	case !g.Wildcard:
		return !r.Wildcard && r.Domain == g.Domain
	}
	return r.Domain == g.Domain && r.Wildcard || strings.HasSuffix(r.Domain, "."+g.Domain)
}
