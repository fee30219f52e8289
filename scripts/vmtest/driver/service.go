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
// own cgroup with the request's memory limit, runs requests in boxes its
// pool built ahead with their limits set at claim (memory, pids), and
// stops cleanly on SIGTERM (socket removed, no box left).
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
	d.pooled(client, "pooled memory limit",
		`{"args":["/bin/sh","-c","x=xxxxxxxxxxxxxxxx; while true; do x=\"$x$x\"; done"],"memory_bytes":16777216}`,
		func(r *report) bool { return r.Status == "ML" })
	d.pooled(client, "pooled pids limit",
		`{"args":["/bin/sh","-c","for i in 1 2 3 4 5 6; do sleep 5 & done; wait"],"pids":3,"wall_time_ms":3000}`,
		func(r *report) bool { return r.PidsPeak == 3 })
	cmd.Process.Signal(syscall.SIGTERM)
	werr := cmd.Wait()
	_, statErr := os.Stat(sock)
	d.check("service stops", werr == nil && os.IsNotExist(statErr) && len(boxProcesses(-1)) == 0,
		"SIGTERM: %v, socket removed %v, box processes %v", werr, os.IsNotExist(statErr), boxProcesses(-1))
}

// pooled runs command in a box the service's pool built ahead (it waits
// until one is ready) and checks its report.
func (d *driver) pooled(client *http.Client, name, command string, ok func(*report) bool) {
	waitFor(20*time.Second, func() bool {
		var h struct {
			Pool int `json:"pool"`
		}
		resp, err := client.Get("http://isolate/v1/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&h) == nil && h.Pool > 0
	})
	var out struct {
		Results []report `json:"results"`
	}
	resp, err := client.Post("http://isolate/v1/run", "application/json", strings.NewReader(`{"commands":[`+command+`]}`))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		err = json.Unmarshal(b, &out)
	}
	if err != nil || len(out.Results) != 1 {
		d.check(name, false, "POST /v1/run: %v %+v", err, out)
		return
	}
	r := &out.Results[0]
	_, claimed := r.Sandbox.Stages["claim"]
	d.check(name, claimed && r.Sandbox.Cgroup == "v2" && ok(r), "%s %q, pids peak %d, cgroup %s, in a box built ahead: %v",
		r.Status, r.Message, r.PidsPeak, r.Sandbox.Cgroup, claimed)
}
