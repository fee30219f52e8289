package isolate

// #cgo CFLAGS: -O2 -Wall -Wno-unused-result
import "C"

import (
	"fmt"
	"os"
)

// MaybeInit is the Go side of the init guard. The box's init is C code
// (init.c) that runs from an ELF constructor when argv[1] is InitArg, before
// the Go runtime starts, and never returns; so when Go code sees InitArg,
// that constructor was not linked in, and starting boxes cannot work.
// Call it first thing in main and in TestMain.
func MaybeInit() {
	if len(os.Args) > 1 && os.Args[1] == InitArg {
		fmt.Fprintln(os.Stderr, "isolate: box init missing from this binary (built without cgo?)")
		os.Exit(2)
	}
}
