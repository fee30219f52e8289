package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/internal/fdtest"
)

// `isolate-serve drain` (a pod's preStop): the service takes no more runs
// (a request waiting for a slot gets 503 at once), finishes the one it
// runs, and the command returns once it has; the service stays up, not
// ready, until SIGTERM.
func TestDrainCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts sandboxes")
	}
	c := startChild(t, t.TempDir(), "--pool", "0", "--cli-socket", "none", "--parallel", "1")
	fdtest.WaitFor(t, "the service is ready", func() bool { code, _ := c.get("/v1/health"); return code == 200 })
	marker := fmt.Sprintf("drain-marker-%d", time.Now().UnixNano())
	first := make(chan string, 1)
	go func() {
		code, body := c.post("/v1/run", `{"commands":[{"args":["/bin/sh","-c","sleep 2; echo held; : `+marker+`"]}]}`)
		first <- fmt.Sprint(code, " ", body)
	}()
	fdtest.WaitFor(t, "the first run's box runs", func() bool { return processWith(marker) })
	second := make(chan string, 1)
	go func() {
		code, body := c.post("/v1/run", `{"commands":[{"args":["/bin/true"]}]}`)
		second <- fmt.Sprint(code, " ", body)
	}()
	fdtest.WaitFor(t, "the second waits for a slot", func() bool {
		_, h := c.health(t)
		return h.Waiting == 1
	})
	code, out := runServe(t, "drain", "--socket", c.sock)
	if code != 0 || !strings.Contains(out, "is drained") {
		t.Fatalf("drain: exit %d, %s", code, out)
	}
	if processWith(marker) {
		t.Error("drain returned while the run it held still ran")
	}
	if got := <-first; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"stdout":"held\n"`) {
		t.Errorf("the run held at the drain: %s", got)
	}
	if got := <-second; !strings.HasPrefix(got, "503 ") {
		t.Errorf("the request waiting at the drain: %s", got)
	}
	if code, h := c.health(t); code != 503 || !h.Drain {
		t.Errorf("health after the drain: %d %+v", code, h)
	}
	if code, body := c.post("/v1/run", `{"commands":[{"args":["/bin/true"]}]}`); code != 503 {
		t.Errorf("a run after the drain: %d %s", code, body)
	}
	// Still up until SIGTERM, which ends it cleanly.
	if err := c.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the drained service is gone: %v", err)
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("SIGTERM after the drain: %v\n%s", err, c.log)
	}
}
