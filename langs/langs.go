// Package langs holds the language definitions: for each language its
// image (Debian packages), source file name, compile and run commands,
// environment and limits. One JSON file per language is embedded in the
// binary (defs/); a file of the same name in /etc/isolate/langs.d/ (or
// $ISOLATE_LANGS_DIR) replaces it, a new name adds a language.
//
// The package knows nothing of the CLI or of how boxes run: it only says
// what a language is.
package langs

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

//go:embed defs/*.json
var embedded embed.FS

// DefaultDir is where a host's own definitions live.
const DefaultDir = "/etc/isolate/langs.d"

// DefaultSuite is the Debian suite images are built from: trixie (Debian
// 13, stable since August 2025) gives current toolchains (GCC 14, Go 1.24,
// Rust 1.85, Python 3.13, Node.js 20, OpenJDK 21) with security support
// for years, and names a release rather than "stable", so an image does
// not change toolchains under a judge when the next release comes out.
const DefaultSuite = "trixie"

// Limits are limits of one phase; empty fields keep the run's defaults.
// Sizes and durations are written as on the command line ("512M", "10s").
type Limits struct {
	Time    string `json:"time,omitempty"`
	Wall    string `json:"wall,omitempty"`
	Memory  string `json:"memory,omitempty"`
	Pids    int64  `json:"pids,omitempty"`
	TmpSize string `json:"tmp_size,omitempty"`
	FSize   string `json:"fsize,omitempty"`
}

// Lang is one language.
type Lang struct {
	Name    string   `json:"name"`
	Aliases []string `json:"aliases,omitempty"`
	Title   string   `json:"title"`
	// Image names the image (default: the language's name); Suite its
	// Debian suite (default DefaultSuite); Packages what it installs on
	// top of a minimal Debian; Setup shell commands run in it afterwards
	// (as root, at build time).
	Image    string   `json:"image,omitempty"`
	Suite    string   `json:"suite,omitempty"`
	Packages []string `json:"packages"`
	Setup    []string `json:"setup,omitempty"`
	// Version is a command whose first line of output names the
	// toolchain's version; it runs once, when the image is built.
	Version []string `json:"version"`
	// Source is the file name the source gets in /box.
	Source string `json:"source"`
	// Compile (optional) and Run are commands run in /box. They and Env
	// may use {mem_mb}, {heap_mb} (3/4 of it), {cpus} and {pids}: the
	// limits of the phase they run in.
	Compile []string `json:"compile,omitempty"`
	Run     []string `json:"run"`
	Env     []string `json:"env,omitempty"`
	// SyntaxErrorExit, for languages without a compile step, is the exit
	// status with which Run says the source does not compile (it checks
	// before running anything): the outcome is then CE, not RE.
	SyntaxErrorExit int `json:"syntax_error_exit,omitempty"`
	// RlimitMemory is how the memory limit is enforced where rlimits
	// alone enforce the limits (no cgroup: a user who is not root, with
	// --allow-rlimit-only): "address-space" (RLIMIT_AS, the default),
	// "data" (RLIMIT_DATA: for runtimes that reserve far more address
	// space than they touch) or "none".
	RlimitMemory string `json:"rlimit_memory,omitempty"`
	// RlimitMemoryFactor multiplies the memory limit for that rlimit (0:
	// 1): for a runtime whose threads' stacks, mapped whole, count as
	// data though little of them is touched (the JVM's, -Xss).
	RlimitMemoryFactor float64 `json:"rlimit_memory_factor,omitempty"`
	CompileLimits      Limits  `json:"compile_limits,omitempty"`
	RunLimits          Limits  `json:"run_limits,omitempty"`

	// Origin is the file the definition came from.
	Origin string `json:"-"`
}

// Dir is where this host's definitions are read from.
func Dir() string {
	if d := os.Getenv("ISOLATE_LANGS_DIR"); d != "" {
		return d
	}
	return DefaultDir
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_+-]*$`)

// Load reads every definition: the embedded ones, then the host's.
func Load() ([]*Lang, error) {
	byName := map[string]*Lang{}
	ents, err := embedded.ReadDir("defs")
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		data, err := embedded.ReadFile("defs/" + e.Name())
		if err != nil {
			return nil, err
		}
		l, err := parse(data, "builtin:"+e.Name())
		if err != nil {
			return nil, err
		}
		byName[l.Name] = l
	}
	paths, _ := filepath.Glob(filepath.Join(Dir(), "*.json"))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read language definition: %w", err)
		}
		l, err := parse(data, p)
		if err != nil {
			return nil, err
		}
		byName[l.Name] = l
	}
	out := make([]*Lang, 0, len(byName))
	for _, l := range byName {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Find returns the language called name or one of its aliases.
func Find(name string) (*Lang, error) {
	all, err := Load()
	if err != nil {
		return nil, err
	}
	for _, l := range all {
		if l.Name == name {
			return l, nil
		}
	}
	for _, l := range all {
		for _, a := range l.Aliases {
			if a == name {
				return l, nil
			}
		}
	}
	names := make([]string, len(all))
	for i, l := range all {
		names[i] = l.Name
	}
	return nil, fmt.Errorf("unknown language %q (known: %s)", name, strings.Join(names, ", "))
}

func parse(data []byte, origin string) (*Lang, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var l Lang
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("language definition %s: %w", origin, err)
	}
	l.Origin = origin
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("language definition %s: %w", origin, err)
	}
	if l.Image == "" {
		l.Image = l.Name
	}
	if l.Suite == "" {
		l.Suite = DefaultSuite
	}
	return &l, nil
}

func (l *Lang) check() error {
	switch {
	case !nameRE.MatchString(l.Name):
		return fmt.Errorf("name %q: lower-case letters, digits, _ + - only", l.Name)
	case l.Image != "" && !nameRE.MatchString(l.Image):
		return fmt.Errorf("image %q: lower-case letters, digits, _ + - only", l.Image)
	case len(l.Packages) == 0:
		return errors.New("no packages")
	case l.Source == "" || strings.ContainsAny(l.Source, "/\x00") || l.Source == "." || l.Source == "..":
		return fmt.Errorf("source %q: a plain file name", l.Source)
	case len(l.Run) == 0:
		return errors.New("no run command")
	case len(l.Version) == 0:
		return errors.New("no version command")
	case l.RlimitMemory != "" && l.RlimitMemory != "address-space" && l.RlimitMemory != "data" && l.RlimitMemory != "none":
		return fmt.Errorf("rlimit_memory %q: address-space, data or none", l.RlimitMemory)
	case l.RlimitMemoryFactor != 0 && (l.RlimitMemoryFactor < 1 || l.RlimitMemoryFactor > 64):
		return fmt.Errorf("rlimit_memory_factor %g: from 1 to 64", l.RlimitMemoryFactor)
	}
	for _, p := range l.Packages {
		if !regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]*$`).MatchString(p) {
			return fmt.Errorf("package %q is not a Debian package name", p)
		}
	}
	for _, e := range l.Env {
		if name, _, ok := strings.Cut(e, "="); !ok || name == "" {
			return fmt.Errorf("env %q: expected NAME=VALUE", e)
		}
	}
	return nil
}

// Compiled tells whether the language has a compile step.
func (l *Lang) Compiled() bool { return len(l.Compile) > 0 }

// ImageHash identifies what the language's image is built from: the same
// hash means the same image, so a build is skipped.
func (l *Lang) ImageHash(builder string) string {
	h := sha256.New()
	data, _ := json.Marshal(struct {
		Builder  string
		Image    string
		Suite    string
		Packages []string
		Setup    []string
		Env      []string
		Version  []string
	}{builder, l.Image, l.Suite, l.Packages, l.Setup, l.Env, l.Version})
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// Vars are the values of the placeholders of one phase.
type Vars struct {
	MemMB int64 // memory limit in MiB
	CPUs  int   // CPUs the program may use
	Pids  int64 // processes and threads at once
}

// Expand substitutes the placeholders in args.
func (v Vars) Expand(args []string) []string {
	r := strings.NewReplacer(
		"{mem_mb}", fmt.Sprint(v.MemMB),
		"{heap_mb}", fmt.Sprint(v.MemMB*3/4),
		"{cpus}", fmt.Sprint(v.CPUs),
		"{pids}", fmt.Sprint(v.Pids),
	)
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = r.Replace(a)
	}
	return out
}
