// Package initbin holds the box's init as a small executable of its own
// (isolate-init: the init C files of package isolate, built with musl by
// scripts/build-init.sh, about 64 KB), embedded when the build has the
// initbin tag. A long-running process (the service) starts every box's
// init from it instead of re-executing itself: the exec, the page faults
// and the teardown of a 14 MB Go binary's mappings cost about 1.3 ms of CPU
// per box on our VMs (docs/PERFORMANCE.md). Without the tag Binary is nil
// and boxes start from /proc/self/exe as before, so `go build` and
// `go test` need no generated file.
package initbin
