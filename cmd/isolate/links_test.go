package main

import (
	"debug/elf"
	"strings"
	"testing"
)

// The one-shot binary links no HTTP stack (the service's is
// isolate-serve's): each package it links is start-up it pays on every
// run. The benchmarks speak HTTP/1.1 by hand for that reason.
func TestOneShotLinksNoNetHTTP(t *testing.T) {
	f, err := elf.Open(isolateBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "net/http.") || strings.HasPrefix(s.Name, "crypto/tls.") {
			t.Fatalf("%s links %s", isolateBin, s.Name)
		}
	}
}
