package main

// The handover to a running service happens in C (handover.c), before
// the Go runtime starts: an `isolate run` the service takes never pays
// for Go. On x86-64 it runs from the binary's entry point, before the C
// library starts too (-e isolateentry); elsewhere from an ELF
// constructor. This file only links it in.

// #cgo CFLAGS: -O2 -Wall -Wno-unused-result -fno-stack-protector -I${SRCDIR}/../../handover -I${SRCDIR}/../../isolate
// #cgo amd64 LDFLAGS: -Wl,-e,isolateentry
import "C"
