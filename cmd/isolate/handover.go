package main

// The handover to a running service happens in C, from handover.c's ELF
// constructor, before the Go runtime starts: an `isolate run` the
// service takes never pays for Go. This file only links it in.

// #cgo CFLAGS: -O2 -Wall -Wno-unused-result -I${SRCDIR}/../../handover -I${SRCDIR}/../../isolate
import "C"
