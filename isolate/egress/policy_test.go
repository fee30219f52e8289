package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	p, err := Parse("network", []string{"Pkgs.Example.org.", "*.example.com:443", "10.1.2.0/24", "192.0.2.7:22", "[2001:db8::1]:8443", "2001:db8::/32"}, []string{"10.1.2.9"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range append(p.Allow, p.Deny...) {
		got = append(got, r.String())
	}
	want := "pkgs.example.org *.example.com:443 10.1.2.0/24 192.0.2.7:22 [2001:db8::1]:8443 2001:db8::/32 10.1.2.9"
	if strings.Join(got, " ") != want {
		t.Errorf("parsed %q, want %q", strings.Join(got, " "), want)
	}
	for _, tc := range []struct {
		allow, deny []string
		field       string
	}{
		{nil, nil, "network.allow: empty"},
		{[]string{"ok.org", "bad host"}, nil, "network.allow[1]"},
		{[]string{"a.org:0"}, nil, "network.allow[0]"},
		{[]string{"a.org:99999"}, nil, "network.allow[0]"},
		{[]string{"10.0.0.0/33"}, nil, "network.allow[0]"},
		{[]string{"[::1"}, nil, "network.allow[0]"},
		{[]string{"a..org"}, nil, "network.allow[0]"},
		{[]string{"a.org"}, []string{"*."}, "network.deny[0]"},
	} {
		if _, err := Parse("network", tc.allow, tc.deny); err == nil || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("Parse(%q, %q): %v, want an error naming %s", tc.allow, tc.deny, err, tc.field)
		}
	}
}

func TestCheck(t *testing.T) {
	p, err := Parse("network", []string{"pkgs.example.org", "*.example.com:443", "10.1.2.0/24", "198.51.100.1"}, []string{"10.1.2.9", "bad.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		port uint16
		ok   bool
	}{
		{"pkgs.example.org", 80, true},
		{"PKGS.example.org.", 443, true},
		{"x.pkgs.example.org", 80, false},
		{"api.example.com", 443, true},
		{"a.b.example.com", 443, true},
		{"api.example.com", 80, false},
		{"example.com", 443, false},
		{"bad.example.com", 443, false},
		{"10.1.2.3", 5432, true},
		{"10.1.2.9", 5432, false},
		{"10.1.3.1", 80, false},
		{"198.51.100.1", 80, true},
		{"198.51.100.2", 80, false}, // a public address the client named needs a rule
		{"127.0.0.1", 80, false},
		{"169.254.169.254", 80, false},
		{"other.org", 80, false},
	} {
		if err := p.CheckName(tc.host, tc.port); (err == nil) != tc.ok {
			t.Errorf("CheckName(%s, %d) = %v, want allowed %v", tc.host, tc.port, err, tc.ok)
		}
	}
	// What an allowed name resolves to is checked again: a public
	// address passes, a private or loopback one (DNS rebinding) does not
	// unless an address rule names it.
	for _, tc := range []struct {
		addr string
		ok   bool
	}{{"198.51.100.77", true}, {"127.0.0.1", false}, {"10.9.9.9", false}, {"10.1.2.3", true}, {"10.1.2.9", false},
		{"169.254.169.254", false}, {"::1", false}, {"fd00::1", false}, {"100.64.0.1", false}, {"::ffff:127.0.0.1", false}} {
		if err := p.CheckResolved(netip.MustParseAddr(tc.addr), 443); (err == nil) != tc.ok {
			t.Errorf("resolved to %s: %v, want allowed %v", tc.addr, err, tc.ok)
		}
	}
}
