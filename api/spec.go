package api

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/isolate-sandbox/isolate/isolate/egress"
)

// Unlimited, in a limit of a Spec, turns the limit off. Zero (or an
// absent field) means the contract's default instead.
const Unlimited = -1

// Spec is one run: what to run and within which limits, as a client
// posts it (the JSON names carry the units). Zero values mean the
// contract's defaults (see Defaults); Unlimited turns a limit off. It
// holds data only: standard streams are Go values given to Run beside it.
type Spec struct {
	// Args is the program and its arguments, looked up in the box's PATH.
	Args []string `json:"args"`
	// Env are NAME=VALUE entries applied in order on top of the base
	// environment (BaseEnv, then the language's variables); a later
	// entry for the same name wins. Nothing of the caller's leaks in:
	// a front end that passes a variable through resolves it itself.
	Env []string `json:"env,omitempty"`
	// Cwd is the working directory inside the box (default /box).
	Cwd string `json:"cwd,omitempty"`
	// Image is the root file system: "host" (the default without Lang),
	// a built image's name, or a directory or squashfs file on the host.
	// Empty with Lang: the language's image.
	Image string `json:"image,omitempty"`
	// Lang adds the language's image (unless Image is set) and its
	// environment variables.
	Lang string `json:"lang,omitempty"`
	// Seccomp is the syscall policy: "default", "none", or the path of
	// an OCI seccomp profile on the host.
	Seccomp string `json:"seccomp,omitempty"`
	// Net is "none" (default: own namespace with loopback), "host", or
	// "allow": its own namespace, with what Network allows reached
	// through a proxy outside the box ("allow" is the default when
	// Network is given).
	Net string `json:"net,omitempty"`
	// Network is the allowlist of a box whose Net is "allow".
	Network *Network `json:"network,omitempty"`
	// BoxID picks box N (a persistent box if `isolate init` made it);
	// nil: a free box.
	BoxID *int `json:"box_id,omitempty"`

	CPUTimeMs   int64 `json:"cpu_time_ms,omitempty"`   // CPU time of all processes and threads; default none
	WallTimeMs  int64 `json:"wall_time_ms,omitempty"`  // default 2×cpu+1s with a CPU limit, else 60 s
	ExtraTimeMs int64 `json:"extra_time_ms,omitempty"` // kill only after cpu+extra; default 0

	MemoryBytes       int64   `json:"memory_bytes,omitempty"`        // cgroup memory, page cache and tmpfs included; default 512 MiB
	AddressSpaceBytes int64   `json:"address_space_bytes,omitempty"` // RLIMIT_AS; default none
	Pids              int64   `json:"pids,omitempty"`                // processes and threads at once; default 64
	CPUs              float64 `json:"cpus,omitempty"`                // CPU bandwidth; default unlimited
	FileSizeBytes     int64   `json:"file_size_bytes,omitempty"`     // RLIMIT_FSIZE; default 64 MiB
	TmpSizeBytes      int64   `json:"tmp_size_bytes,omitempty"`      // size of /box and /tmp; default 64 MiB
	OpenFiles         int64   `json:"open_files,omitempty"`          // RLIMIT_NOFILE; default 256
	StackBytes        int64   `json:"stack_bytes,omitempty"`         // RLIMIT_STACK; default 8 MiB
	OutputLimitBytes  int64   `json:"output_limit_bytes,omitempty"`  // bytes kept per captured stream; default 1 MiB

	Binds   []Bind `json:"binds,omitempty"`
	CopyIn  []Copy `json:"copy_in,omitempty"`  // host -> box, before the run
	CopyOut []Copy `json:"copy_out,omitempty"` // box -> host, after the run

	// StderrToStdout sends the program's standard error to its standard
	// output.
	StderrToStdout bool `json:"stderr_to_stdout,omitempty"`
}

// Bind is a host path bound into the box.
type Bind struct {
	Host     string `json:"host"`
	Box      string `json:"box"`
	Writable bool   `json:"rw,omitempty"`
}

// Copy is a file or directory copied into the box before the run, or out
// of it after.
type Copy struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// BaseEnv is the environment every program starts from.
var BaseEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/box", "LANG=C.UTF-8"}

// The documented defaults (docs/REFERENCE.md, options of run).
const (
	DefaultMemoryBytes      = 512 << 20
	DefaultPids             = 64
	DefaultFileSizeBytes    = 64 << 20
	DefaultTmpSizeBytes     = 64 << 20
	DefaultOpenFiles        = 256
	DefaultStackBytes       = 8 << 20
	DefaultOutputLimitBytes = 1 << 20
	DefaultWallTimeMs       = 60_000 // without a CPU limit
	DefaultCwd              = "/box"
)

// WithDefaults returns a copy of s with every zero field set to the
// contract's default, so a reader sees the limits that apply; Unlimited
// stays Unlimited. Limits whose default is "none" (CPU time, address
// space, CPUs) stay zero.
func (s Spec) WithDefaults() Spec {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&s.MemoryBytes, DefaultMemoryBytes)
	def(&s.Pids, DefaultPids)
	def(&s.FileSizeBytes, DefaultFileSizeBytes)
	def(&s.TmpSizeBytes, DefaultTmpSizeBytes)
	def(&s.OpenFiles, DefaultOpenFiles)
	def(&s.StackBytes, DefaultStackBytes)
	def(&s.OutputLimitBytes, DefaultOutputLimitBytes)
	if s.WallTimeMs == 0 {
		s.WallTimeMs = DefaultWallTimeMs
		if s.CPUTimeMs > 0 {
			s.WallTimeMs = 2*(s.CPUTimeMs+max(s.ExtraTimeMs, 0)) + 1000
		}
	}
	if s.Cwd == "" {
		s.Cwd = DefaultCwd
	}
	if s.Seccomp == "" {
		s.Seccomp = "default"
	}
	if s.Net == "" {
		s.Net = "none"
		if s.Network != nil {
			s.Net = "allow"
		}
	}
	if s.Image == "" && s.Lang == "" {
		s.Image = "host"
	}
	return s
}

// Network is what a box may reach (egress.ParseRule: a domain name,
// "*." and a domain, an address or a CIDR, each with an optional
// ":PORT"), less what Deny names.
type Network struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny,omitempty"`
}

// FieldError is a request field with a bad value: Field is its JSON path
// ("memory_bytes", "binds[1].box"; a caller embedding specs prefixes its
// own, e.g. "commands[0].memory_bytes"). It is the client's mistake: an
// HTTP 400, exit status 2.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// In returns e with its path below prefix ("commands[0]").
func (e *FieldError) In(prefix string) *FieldError {
	return &FieldError{Field: prefix + "." + e.Field, Msg: e.Msg}
}

// maxMs bounds time limits (about 11.5 days): far beyond any judge's, and
// far from time.Duration's overflow.
const maxMs = 1e9

// Validate checks what can be checked without the host: shapes, ranges,
// absolute box paths. The first problem is a *FieldError.
func (s *Spec) Validate() error {
	bad := func(field, format string, a ...any) error {
		return &FieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	if len(s.Args) == 0 || s.Args[0] == "" {
		return bad("args", "no program given")
	}
	for i, kv := range s.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t\x00") {
			return bad(fmt.Sprintf("env[%d]", i), "%q: expected NAME=VALUE", kv)
		}
	}
	if s.Cwd != "" && !path.IsAbs(s.Cwd) {
		return bad("cwd", "%q: must be an absolute path inside the box", s.Cwd)
	}
	switch s.Net {
	case "", "none", "host", "allow":
	default:
		return bad("net", "%q: expected none, host or allow", s.Net)
	}
	if err := s.validateNetwork(); err != nil {
		return err
	}
	if s.BoxID != nil && *s.BoxID < 0 {
		return bad("box_id", "%d: must be 0 or more", *s.BoxID)
	}
	for _, f := range Fields {
		if err := f.check(s); err != nil {
			return err
		}
	}
	for i, b := range s.Binds {
		f := fmt.Sprintf("binds[%d]", i)
		if b.Host == "" {
			return bad(f+".host", "empty")
		}
		if !path.IsAbs(b.Box) || path.Clean(b.Box) == "/" {
			return bad(f+".box", "%q: must be absolute and not /", b.Box)
		}
	}
	for _, cs := range []struct {
		field  string
		copies []Copy
	}{{"copy_in", s.CopyIn}, {"copy_out", s.CopyOut}} {
		for i, c := range cs.copies {
			f := fmt.Sprintf("%s[%d]", cs.field, i)
			if c.From == "" {
				return bad(f+".from", "empty")
			}
			if c.To == "" {
				return bad(f+".to", "empty")
			}
		}
	}
	return nil
}

// validateNetwork checks the allowlist: present exactly when Net is
// "allow" (or empty), each entry a rule.
func (s *Spec) validateNetwork() error {
	if s.Network == nil {
		if s.Net == "allow" {
			return &FieldError{Field: "network", Msg: "net allow needs an allowlist (network.allow)"}
		}
		return nil
	}
	if s.Net != "" && s.Net != "allow" {
		return &FieldError{Field: "network", Msg: fmt.Sprintf("an allowlist goes with net allow, not %s", s.Net)}
	}
	_, err := egress.Parse("network", s.Network.Allow, s.Network.Deny)
	var pe *egress.ParseError
	if errors.As(err, &pe) {
		return &FieldError{Field: pe.Field, Msg: pe.Msg}
	}
	return err
}
