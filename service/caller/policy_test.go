package caller

import (
	"errors"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
)

// TestCheck: what each kind of caller may ask, in the shape a front end
// sees it (a refusal, a field error, or nothing).
func TestCheck(t *testing.T) {
	const judges = 4242
	p := &Policy{Caps: Caps{MemoryBytes: 256 << 20, CPUTimeMs: 1000, CPUs: 1}, NetHostGroups: []int{judges}, SeccompNoneGroups: []int{judges}}
	root := Caller{Via: API, UID: 0, GID: 0}
	member := Caller{Via: API, UID: 1000, GID: 1000, Groups: []int{judges}}
	other := Caller{Via: Handover, UID: 1001, GID: 1001}
	tcp := Caller{Via: TCP, UID: -1, GID: -1}
	rootHandover := Caller{Via: Handover, UID: 0}
	id := 3
	for _, c := range []struct {
		name  string
		who   Caller
		spec  api.Spec
		field string // "" allowed
		deny  bool   // a *Refusal, not a bad value
	}{
		{"root box id", root, api.Spec{BoxID: &id}, "", false},
		{"member box id", member, api.Spec{BoxID: &id}, "box_id", true},
		{"tcp box id (token says nothing of uid 0)", Caller{Via: TCP, UID: 0}, api.Spec{BoxID: &id}, "box_id", true},
		{"root image path", root, api.Spec{Image: "/srv/img"}, "", false},
		{"handover image path", other, api.Spec{Image: "./img"}, "image", true},
		{"member built image", member, api.Spec{Image: "python"}, "", false},
		{"member profile name", member, api.Spec{Seccomp: "profile.json"}, "seccomp", true},
		{"member seccomp none in the group", member, api.Spec{Seccomp: "none"}, "", false},
		{"other seccomp none", other, api.Spec{Seccomp: "none"}, "seccomp", true},
		{"tcp seccomp none", tcp, api.Spec{Seccomp: "none"}, "seccomp", true},
		{"member net host in the group", member, api.Spec{Net: "host"}, "", false},
		{"other net host", other, api.Spec{Net: "host"}, "net", true},
		{"api binds", member, api.Spec{Binds: []api.Bind{{Host: "/x", Box: "/x"}}}, "binds", true},
		{"handover binds, opened as the caller", other, api.Spec{Binds: []api.Bind{{Host: "/x", Box: "/x"}}}, "", false},
		{"api output unlimited", root, api.Spec{OutputLimitBytes: api.Unlimited}, "output_limit_bytes", false},
		{"handover caps", other, api.Spec{MemoryBytes: 1 << 30}, "memory_bytes", false},
		{"root's handover is not capped", rootHandover, api.Spec{MemoryBytes: 1 << 30}, "", false},
		{"api caps root too", root, api.Spec{MemoryBytes: 1 << 30}, "memory_bytes", false},
		{"queue job box id (nobody vouches for uid 0)", Caller{Via: Queue, UID: 0}, api.Spec{BoxID: &id}, "box_id", true},
		{"queue job net host", QueueJob, api.Spec{Net: "host"}, "net", true},
		{"queue job seccomp none", QueueJob, api.Spec{Seccomp: "none"}, "seccomp", true},
		{"queue job image path", QueueJob, api.Spec{Image: "/srv/img"}, "image", true},
		{"queue job binds", QueueJob, api.Spec{Binds: []api.Bind{{Host: "/x", Box: "/x"}}}, "binds", true},
		{"queue job output unlimited", QueueJob, api.Spec{OutputLimitBytes: api.Unlimited}, "output_limit_bytes", false},
		{"queue job caps", QueueJob, api.Spec{MemoryBytes: 1 << 30}, "memory_bytes", false},
		{"queue job built image", QueueJob, api.Spec{Image: "python"}, "", false},
		{"extra time within the cap", other, api.Spec{CPUTimeMs: 500, ExtraTimeMs: 500}, "", false},
		{"extra time beyond the cap", other, api.Spec{CPUTimeMs: 1000, ExtraTimeMs: 20000}, "extra_time_ms", false},
		{"extra time beyond the capped default", member, api.Spec{ExtraTimeMs: 1}, "extra_time_ms", false},
		{"cpus beyond the cap", member, api.Spec{CPUs: 1.5}, "cpus", false},
		{"cpus within the cap", QueueJob, api.Spec{CPUs: 0.5}, "", false},
		{"root's handover: no cap on extra time", rootHandover, api.Spec{CPUTimeMs: 1000, ExtraTimeMs: 20000}, "", false},
	} {
		spec := c.spec
		err := p.Check(c.who, &spec, "")
		var fe *api.FieldError
		var ref *Refusal
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v, want allowed", c.name, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%s: %v, want an error of field %s", c.name, err, c.field)
		case c.field != "" && errors.As(err, &ref) != c.deny:
			t.Errorf("%s: %v: refusal %v, want %v", c.name, err, !c.deny, c.deny)
		}
	}
	if (Caller{Via: Queue, UID: 0, Groups: []int{judges}}).InGroup(judges) || QueueJob.StoreOwner() != "queue" {
		t.Errorf("a queue job is in no group and owns the store's %q files", "queue")
	}
	// The cap is the default of a request that leaves it unset.
	var spec api.Spec
	if err := p.Check(other, &spec, "commands[0]."); err != nil || spec.MemoryBytes != 256<<20 {
		t.Errorf("capped default: %v, memory %d", err, spec.MemoryBytes)
	}
}
