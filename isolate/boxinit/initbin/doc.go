// Package initbin holds the box's init as a small executable of its own
// (isolate-init: the init C files of package boxinit, built with musl by
// scripts/build-init.sh, about 64 KB), embedded when the build has the
// initbin tag. The supervisor starts every box's init from it instead of
// re-executing itself (isolate/initexe.go): the exec, the page faults and
// the teardown of a 10-14 MB Go binary's mappings cost about 1 ms of CPU
// per box on our VMs. Without the tag Binary is nil and boxes start from
// /proc/self/exe, so `go build` and `go test` need no generated file.
package initbin
