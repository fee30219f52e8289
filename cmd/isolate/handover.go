package main

// The handover to a running service happens in C (handover.c), before
// the Go runtime starts: an `isolate run` the service takes never pays
// for Go. On x86-64 it runs from the binary's entry point, before the C
// library starts too (-e isolateentry); elsewhere from an ELF
// constructor. This file links it in, and reads why a service declined.

// #cgo CFLAGS: -O2 -Wall -Wno-unused-result -fno-stack-protector -I${SRCDIR}/../../service/handover -I${SRCDIR}/../../isolate/boxinit
// #cgo amd64 LDFLAGS: -Wl,-e,isolateentry
// const char *isolate_declined_reason(void);
// const char *isolate_declined_socket(void);
import "C"

import (
	"fmt"
	"strings"

	cmdline "github.com/isolate-sandbox/isolate/cli"
)

// otherBuild begins the reason a service gives for declining a run of
// another build of isolate (handover.Server's otherBuild).
const otherBuild = "it runs isolate "

// handoverDeclined says which service declined this process's run for
// being another version of isolate, and why ("": none did, or for
// another reason, or there was none): the run went in-process, and a
// refusal there names this first (cmdline.Invocation.Declined). A service
// that leaves a run to the CLI on purpose (a user's own, for
// --cgroup-root) is not named: the CLI's words are its own.
func handoverDeclined() string {
	reason := C.GoString(C.isolate_declined_reason())
	if !strings.HasPrefix(reason, otherBuild) {
		return ""
	}
	return fmt.Sprintf("the service on %s did not take this run of isolate %s: %s",
		C.GoString(C.isolate_declined_socket()), cmdline.Version, reason)
}
