package main

// `isolate-serve help-man` writes isolate-serve(1) in roff from the
// service's own flags (newFlagSet), for the package build: the page
// says what --help says.

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strings"
)

const manDescription = `The sandbox as a long-running service: an HTTP/JSON API on a unix socket (and, with
--listen and --token-file, on TCP), a pool of boxes built ahead of demand, and the CLI socket to
which the one-shot isolate command hands its runs. isolate serve runs this binary from beside the
isolate binary. Root only: it makes namespaces, cgroups and mounts; members of --socket-group
reach it with their own rights. SIGTERM drains: running requests finish within --grace.`

// writeMan writes the man page to w.
func writeMan(w io.Writer) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, ".TH isolate-serve 1\n.SH NAME\nisolate-serve \\- the isolate sandbox as an HTTP/JSON service\n")
	fmt.Fprintf(b, ".SH SYNOPSIS\n.B isolate serve\n[\\fIOPTION\\fR]...\n.br\n.B isolate-serve\n[\\fIOPTION\\fR]...\n")
	fmt.Fprintf(b, ".SH DESCRIPTION\n%s\n.SH OPTIONS\n", roff(strings.ReplaceAll(manDescription, "\n", " ")))
	newFlagSet(&options{}).VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(b, ".TP\n\\fB\\-\\-%s\\fR", roff(f.Name))
		if arg != "" {
			fmt.Fprintf(b, " \\fI%s\\fR", roff(arg))
		}
		fmt.Fprintf(b, "\n%s", roff(usage))
		if f.DefValue != "" && !strings.Contains(usage, "default") {
			fmt.Fprintf(b, " (default: %s)", roff(f.DefValue))
		}
		b.WriteString("\n")
	})
	fmt.Fprintf(b, ".SH SEE ALSO\n\\fBisolate\\fR(1), /usr/share/doc/isolate/API.md\n")
	return b.Flush()
}

// roff escapes s as running text.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
