package caller

import (
	"errors"
	"strconv"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
)

func TestNetworkGrants(t *testing.T) {
	gid := func(g string) (int, error) { return strconv.Atoi(g) }
	grant, err := ParseNetGrant("100=pypi.org:443,*.pythonhosted.org:443,10.20.0.0/16", gid)
	if err != nil {
		t.Fatal(err)
	}
	p := &Policy{NetGrants: []NetGrant{grant}}
	member := Caller{Via: API, UID: 1000, GID: 1000, Groups: []int{100}}
	other := Caller{Via: API, UID: 1001, GID: 1001}
	root := Caller{Via: API, UID: 0, GID: 0}
	for _, tc := range []struct {
		who   Caller
		allow []string
		ok    bool
	}{
		{member, []string{"pypi.org:443"}, true},
		{member, []string{"pypi.org"}, false}, // any port: more than the grant
		{member, []string{"files.pythonhosted.org:443", "*.a.pythonhosted.org:443"}, true},
		{member, []string{"*.pythonhosted.org:443"}, true},
		{member, []string{"pythonhosted.org:443"}, false},
		{member, []string{"10.20.3.0/24", "10.20.9.9:5432"}, true},
		{member, []string{"10.0.0.0/8"}, false},
		{member, []string{"pypi.org:443", "evil.org"}, false},
		{other, []string{"pypi.org:443"}, false},
		{Caller{Via: TCP, UID: -1, GID: -1}, []string{"pypi.org:443"}, false},
		{root, []string{"anything.example", "0.0.0.0/0"}, true},
	} {
		s := &api.Spec{Args: []string{"x"}, Net: "allow", Network: &api.Network{Allow: tc.allow}}
		err := p.Check(tc.who, s, "commands[0].")
		var r *Refusal
		switch {
		case tc.ok && err != nil:
			t.Errorf("%v asks %v: %v", tc.who, tc.allow, err)
		case !tc.ok && (!errors.As(err, &r) || r.Err.Field[:len("commands[0].network.allow[")] != "commands[0].network.allow["):
			t.Errorf("%v asks %v: %v, want a refusal naming network.allow[i]", tc.who, tc.allow, err)
		}
	}
	for _, bad := range []string{"100", "=x.org", "100=", "100=a..b"} {
		if _, err := ParseNetGrant(bad, gid); err == nil {
			t.Errorf("ParseNetGrant(%q) took it", bad)
		}
	}
}
