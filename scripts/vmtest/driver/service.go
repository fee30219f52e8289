package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// service: `isolate serve` on cgroup v2 runs a request in a box of its
// own cgroup with the request's memory limit, and stops cleanly on
// SIGTERM (socket removed, no box left).
func (d *driver) service() {
	serveBin := filepath.Join(filepath.Dir(d.bin), "isolate-serve")
	sock := "/tmp/isolate-api.sock"
	cmd := exec.Command(serveBin, "--socket", sock, "--store", "/tmp/isolate-files", "--parallel", "2")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		d.check("service", false, "start %s: %v", serveBin, err)
		return
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "unix", sock)
	}}}
	up := waitFor(20*time.Second, func() bool {
		resp, err := client.Get("http://isolate/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if !up {
		d.check("service", false, "no healthy service on %s", sock)
		cmd.Process.Kill()
		cmd.Wait()
		return
	}
	body := `{"commands":[{"args":["/bin/sh","-c","cat /sys/fs/cgroup/memory.max 2>/dev/null; cat /proc/self/cgroup"],"memory_bytes":67108864,"binds":[{"host":"` + d.probeDir + `","box":"/t"}]}]}`
	var out struct {
		Results []report `json:"results"`
	}
	resp, err := client.Post("http://isolate/v1/run", "application/json", strings.NewReader(body))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		err = json.Unmarshal(b, &out)
	}
	ok := err == nil && len(out.Results) == 1 && out.Results[0].Status == "OK" && out.Results[0].Sandbox.Cgroup == "v2"
	var detail any = err
	if err == nil && len(out.Results) == 1 {
		detail = string(out.Results[0].Status) + " cgroup " + out.Results[0].Sandbox.Cgroup
	}
	d.check("service run", ok, "POST /v1/run: %v", detail)
	cmd.Process.Signal(syscall.SIGTERM)
	werr := cmd.Wait()
	_, statErr := os.Stat(sock)
	d.check("service stops", werr == nil && os.IsNotExist(statErr) && len(boxProcesses(-1)) == 0,
		"SIGTERM: %v, socket removed %v, box processes %v", werr, os.IsNotExist(statErr), boxProcesses(-1))
}
