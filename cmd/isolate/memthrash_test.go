package main

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
)

// thrashBomb allocates 64 KiB at a time for ever and, between allocations,
// reads every page of 48 MiB of its own code: at its memory limit the
// kernel keeps evicting that code (clean file pages) to make room and the
// bomb keeps faulting it back in, so the OOM killer never acts. Before the
// supervisor watched for it, it ran until the wall limit (TO).
const thrashBomb = `#include <stdlib.h>
#include <string.h>
__asm__(".text\n.balign 4096\n.globl code\ncode:\n.rept 12288\n.fill 4096, 1, 0xc3\n.endr\n.globl code_end\ncode_end:\n.previous\n");
extern const volatile char code[], code_end[];
int main(void) {
	unsigned long sum = 0;
	for (;;) {
		char *p = malloc(1 << 16);
		if (p) memset(p, 1, 1 << 16);
		for (const volatile char *q = code; q < code_end; q += 4096) sum += *q;
	}
	return (int)sum;
}
`

// evictPageCache drops path's pages from the page cache, so that the box
// that runs it reads them in and they are charged to the box (as a cold
// image's are), not to the test that wrote them.
func evictPageCache(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// A memory bomb ends as ML, never as TO after thrashing at the limit: the
// kernel's OOM killer or, when reclaiming the box's own code keeps it from
// acting, the supervisor (killed, limit "memory", oom_killed false).
func TestMemoryBombThrashingIsML(t *testing.T) {
	needRoot(t)
	// A directory image: the bomb's code must be on a disk file system
	// (evictable page cache), not in the box's tmpfs.
	img := shareDir(t)
	bin := filepath.Join(img, "usr", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	bomb := compileC(t, bin, "bomb", thrashBomb, "-static")
	for i := 0; i < 3; i++ {
		evictPageCache(t, bomb)
		rep, code := runBox(t, "--image", img, "--mem", "256M", "--wall-time", "20", "--", "/usr/bin/bomb")
		expectStatus(t, rep, isolate.StatusML)
		if code != 1 || rep.Signal != 9 {
			t.Errorf("run %d: exit %d signal %d, want 1 and 9", i, code, rep.Signal)
		}
		// ML says which acted: the OOM killer, or the sandbox at the limit.
		if !rep.OOMKilled && !(rep.Killed && rep.Limit == isolate.LimitMemory) {
			t.Errorf("run %d: ML with oom_killed false, killed %v, limit %q: want the sandbox's kill at the memory limit",
				i, rep.Killed, rep.Limit)
		}
		t.Logf("run %d: %s (%s), oom_killed %v, wall %.2f s", i, rep.Status, rep.Message, rep.OOMKilled, rep.WallTime)
	}
}

// The interpreter's own pages are the box's to evict too: a Python list
// bomb in the python image ends as ML every time.
func TestPythonMemoryBombIsML(t *testing.T) {
	needRoot(t)
	needImage(t, "python")
	for i := 0; i < 3; i++ {
		rep, _ := runBox(t, "--lang", "python", "--mem", "256M", "--wall-time", "20", "--",
			"python3", "-c", "a = []\nwhile True: a.append(' ' * 10**6)")
		expectStatus(t, rep, isolate.StatusML)
		t.Logf("run %d: %s (%s), oom_killed %v, wall %.2f s", i, rep.Status, rep.Message, rep.OOMKilled, rep.WallTime)
	}
}
