package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	cmdline "github.com/isolate-sandbox/isolate/cli"
)

// helpOptions are the option names (--long and -s) that `isolate CMD
// --help` lists, but help's own.
func helpOptions(t *testing.T, cmd string) []string {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "help"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	exit := cmdline.Main(context.Background(), &cmdline.Invocation{
		Args: []string{"isolate", cmd, "--help"}, Stdin: os.Stdin, Stdout: out, Stderr: out,
	})
	help, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != 0 {
		t.Fatalf("isolate %s --help: exit %d: %s", cmd, exit.Code, help)
	}
	_, opts, ok := strings.Cut(string(help), "OPTIONS:\n")
	if !ok {
		t.Fatalf("isolate %s --help lists no options:\n%s", cmd, help)
	}
	// Each option line starts with its names: "--box-id N, -b N   box N ...".
	name := regexp.MustCompile(`(?:^|[ ,[])(--?[a-zA-Z][a-zA-Z0-9-]*)`)
	var names []string
	for _, line := range strings.Split(opts, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "-") {
			continue
		}
		spec, _, _ := strings.Cut(line, "  ") // the names end where the usage starts
		for _, m := range name.FindAllStringSubmatch(spec, -1) {
			if m[1] != "--help" && m[1] != "-h" {
				names = append(names, m[1])
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("isolate %s --help: only %v found in:\n%s", cmd, names, opts)
	}
	return names
}

// Every option of run and exec is described in docs/REFERENCE.md's
// section on them, the reference users read: a new flag fails here until
// it is documented.
func TestReferenceListsEveryOption(t *testing.T) {
	doc, err := os.ReadFile("../../docs/REFERENCE.md")
	if err != nil {
		t.Fatal(err)
	}
	// Their section, not the ioi form's, which shares many names.
	_, section, ok := strings.Cut(string(doc), "\n## Options of `run` and `exec`\n")
	if !ok {
		t.Fatal("docs/REFERENCE.md has no section \"Options of `run` and `exec`\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, cmd := range []string{"run", "exec"} {
		for _, opt := range helpOptions(t, cmd) {
			// As written in the reference: in backquotes, alone or
			// followed by its value or another name ("`-b, --box-id N`").
			documented := regexp.MustCompile("`(?:[^`]*[ ,])?" + regexp.QuoteMeta(opt) + "(?:[ ,=\\[][^`]*)?`")
			if !documented.MatchString(section) {
				t.Errorf("isolate %s %s: not in docs/REFERENCE.md", cmd, opt)
			}
		}
	}
}
