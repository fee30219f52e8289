package boxinit

// #cgo CFLAGS: -O2 -Wall -Wno-unused-result
import "C"

import (
	"fmt"
	"os"
)

// MaybeInit is the Go side of the init guard. The box's init is C code
// (init_main.c) that runs from an ELF constructor when argv[1] is InitArg and
// argv[2] its namespace flags, before the Go runtime starts, and never
// returns; so when Go code sees InitArg, the process was not started by a
// supervisor (or the constructor is missing): refuse rather than run the
// CLI or a test suite again. Call it first thing in main and in TestMain.
//
// It also gives the process back the caller's CPU affinity (RestoreCPUs).
func MaybeInit() {
	RestoreCPUs()
	if len(os.Args) > 1 && os.Args[1] == InitArg {
		fmt.Fprintln(os.Stderr, "isolate: "+InitArg+" is the box's init, started only by isolate itself")
		os.Exit(2)
	}
}
