// Package egress is a box's network by policy: an allowlist of domain
// names, addresses and CIDRs (each with an optional port), enforced by a
// proxy outside the box. The box keeps its own network namespace with
// loopback alone; a listener on the box's loopback, made by the
// supervisor inside that namespace, leads to the proxy, which checks the
// name a client asks for, resolves it on the host, checks each address
// again (private, loopback and link-local ranges only where an address
// rule names them) and connects from the host. A program that ignores
// the proxy reaches nothing: there is no route out of its namespace.
package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one entry of a list: a domain name (exact, or "*." and any
// name below it) or a prefix of addresses, with a port (0: any).
type Rule struct {
	Domain   string       // lower case, without a trailing dot; "" for an address rule
	Wildcard bool         // Domain was "*.Domain": names below it, not itself
	Prefix   netip.Prefix // an address rule's addresses (a single address: its full length)
	Port     uint16
}

func (r Rule) String() string {
	var s string
	switch {
	case r.Domain != "" && r.Wildcard:
		s = "*." + r.Domain
	case r.Domain != "":
		s = r.Domain
	case r.Prefix.IsSingleIP() && r.Prefix.Addr().Is6():
		s = "[" + r.Prefix.Addr().String() + "]"
	case r.Prefix.IsSingleIP():
		s = r.Prefix.Addr().String()
	default:
		s = r.Prefix.String()
	}
	if r.Port != 0 {
		s += ":" + strconv.Itoa(int(r.Port))
	}
	return s
}

// Policy is what a box may reach: what an Allow rule names and no Deny
// rule does.
type Policy struct {
	Allow, Deny []Rule
}

// MaxRules bounds each list.
const MaxRules = 256

// ParseError is a list or an entry that is not a rule: the field that
// names it (e.g. "network.allow[2]") and why.
type ParseError struct{ Field, Msg string }

func (e *ParseError) Error() string { return e.Field + ": " + e.Msg }

// Parse reads the allow and deny lists. A bad entry's *ParseError names
// it (field is the lists' name in the request, e.g. "network").
func Parse(field string, allow, deny []string) (*Policy, error) {
	p := &Policy{}
	for _, l := range []struct {
		name    string
		entries []string
		rules   *[]Rule
	}{{"allow", allow, &p.Allow}, {"deny", deny, &p.Deny}} {
		if len(l.entries) > MaxRules {
			return nil, &ParseError{field + "." + l.name, fmt.Sprintf("%d entries, at most %d", len(l.entries), MaxRules)}
		}
		for i, e := range l.entries {
			r, err := ParseRule(e)
			if err != nil {
				return nil, &ParseError{fmt.Sprintf("%s.%s[%d]", field, l.name, i), fmt.Sprintf("%q: %v", e, err)}
			}
			*l.rules = append(*l.rules, r)
		}
	}
	if len(p.Allow) == 0 {
		return nil, &ParseError{field + ".allow", "empty: name what the box may reach (a domain, an address or a CIDR)"}
	}
	return p, nil
}

// ParseRule reads one entry: NAME, *.NAME, ADDR, [IPV6], CIDR, each with
// an optional :PORT.
func ParseRule(e string) (Rule, error) {
	var r Rule
	host, port := e, ""
	switch {
	case strings.HasPrefix(e, "["):
		end := strings.IndexByte(e, ']')
		if end < 0 {
			return r, fmt.Errorf("an IPv6 address needs its closing ]")
		}
		host, port = e[1:end], strings.TrimPrefix(e[end+1:], ":")
		if e[end+1:] != "" && !strings.HasPrefix(e[end+1:], ":") {
			return r, fmt.Errorf("expected :PORT after ]")
		}
	case strings.Count(e, ":") == 1:
		host, port, _ = strings.Cut(e, ":")
	case strings.Count(e, ":") > 1:
		// A bare IPv6 address or CIDR, without a port.
	}
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return r, fmt.Errorf("port %q: expected 1 to 65535", port)
		}
		r.Port = uint16(n)
	}
	if strings.Contains(host, "/") {
		pfx, err := netip.ParsePrefix(host)
		if err != nil {
			return r, fmt.Errorf("not a CIDR: %v", err)
		}
		r.Prefix = pfx.Masked()
		return r, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
		return r, nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		r.Wildcard, name = true, rest
	}
	if err := checkName(name); err != nil {
		return r, err
	}
	r.Domain = name
	return r, nil
}

// checkName accepts a domain name of letters, digits, hyphens and dots
// (and underscores, which some services use), in labels of 1 to 63.
func checkName(name string) error {
	if name == "" || len(name) > 253 {
		return fmt.Errorf("not a domain name, address or CIDR")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("not a domain name: empty or overlong label")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("not a domain name: %q", c)
			}
		}
	}
	return nil
}

// matchName tells whether r names host (lower case, no trailing dot) on
// port.
func (r Rule) matchName(host string, port uint16) bool {
	if r.Domain == "" || (r.Port != 0 && r.Port != port) {
		return false
	}
	if r.Wildcard {
		return strings.HasSuffix(host, "."+r.Domain)
	}
	return host == r.Domain
}

// matchAddr tells whether r names a on port.
func (r Rule) matchAddr(a netip.Addr, port uint16) bool {
	return r.Domain == "" && (r.Port == 0 || r.Port == port) && r.Prefix.Contains(a)
}

// Refusal is why the policy refuses a destination.
type Refusal struct{ Reason string }

func (r *Refusal) Error() string { return r.Reason }

// CheckName checks a destination by the name the client asked for (an
// address literal is checked as an address): nil when an allow rule
// names it and no deny rule does. A name that passes is then resolved,
// and each address checked (CheckAddr).
func (p *Policy) CheckName(host string, port uint16) error {
	if a, err := netip.ParseAddr(host); err == nil {
		return p.CheckAddr(a, port)
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, r := range p.Deny {
		if r.matchName(host, port) {
			return &Refusal{"denied by " + r.String()}
		}
	}
	for _, r := range p.Allow {
		if r.matchName(host, port) {
			return nil
		}
	}
	return &Refusal{fmt.Sprintf("%s:%d is not in the allowlist", host, port)}
}

// CheckAddr checks an address to connect to, whether the client named it
// or a name resolved to it: no deny rule may name it, and an address of
// the host's or a private network's (loopback, private, link-local,
// unique local, unspecified, multicast) only where an allow rule names
// that address, never through a name (DNS rebinding). A public address
// that a name resolved to needs no rule of its own; a public address
// the client named does.
func (p *Policy) CheckAddr(a netip.Addr, port uint16) error {
	return p.checkAddr(a.Unmap(), port, false)
}

// CheckResolved checks an address a name (already allowed) resolved to.
func (p *Policy) CheckResolved(a netip.Addr, port uint16) error {
	return p.checkAddr(a.Unmap(), port, true)
}

func (p *Policy) checkAddr(a netip.Addr, port uint16, viaName bool) error {
	for _, r := range p.Deny {
		if r.matchAddr(a, port) {
			return &Refusal{"denied by " + r.String()}
		}
	}
	for _, r := range p.Allow {
		if r.matchAddr(a, port) {
			return nil
		}
	}
	if special(a) {
		return &Refusal{fmt.Sprintf("%s is a loopback, private or link-local address: only an address rule allows it", a)}
	}
	if viaName {
		return nil
	}
	return &Refusal{fmt.Sprintf("%s:%d is not in the allowlist", a, port)}
}

// special tells whether a is not a public unicast address.
func special(a netip.Addr) bool {
	return !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() ||
		cgnat.Contains(a) || a.IsUnspecified() || a.IsMulticast()
}

// cgnat is shared address space (RFC 6598), private in all but name.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// MaxLogged bounds the connections a report lists; the rest are counted.
const MaxLogged = 256

// Connection is one connection a box asked for, as the report lists it.
type Connection struct {
	Host     string `json:"host"` // as the client named it
	Port     uint16 `json:"port"`
	Via      string `json:"via"`            // connect, http or socks5
	Address  string `json:"addr,omitempty"` // what the proxy connected to
	Allowed  bool   `json:"allowed"`
	Reason   string `json:"reason,omitempty"` // why it was refused
	BytesOut int64  `json:"bytes_out"`        // from the box
	BytesIn  int64  `json:"bytes_in"`         // to the box
}

// Report is what a box's proxy saw.
type Report struct {
	Connections []Connection `json:"connections"`
	Allowed     int          `json:"allowed"`
	Refused     int          `json:"refused"`
	// Unlisted counts connections beyond MaxLogged.
	Unlisted int `json:"unlisted,omitempty"`
}

// Port is where the proxy listens on the box's loopback.
const Port = 3128

// Env is what the box's programs are told: where the proxy is, for every
// protocol the usual clients read it for.
func Env() []string {
	u := "http://127.0.0.1:" + strconv.Itoa(Port)
	s := "socks5h://127.0.0.1:" + strconv.Itoa(Port)
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"ALL_PROXY=" + s, "all_proxy=" + s, "NO_PROXY=", "no_proxy="}
}
