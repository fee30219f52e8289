package main

// The service's secrets as a Kubernetes Secret volume presents them, and
// placeholders refused at start.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/internal/fdtest"
)

// kubeletSecret lays out dir as the kubelet does a Secret volume: each
// key a symlink through ..data to a file of mode 0400 in a timestamped
// directory.
func kubeletSecret(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	stamp := "..2026_11_29_06_00_00.123456789"
	if err := os.Mkdir(filepath.Join(dir, stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(stamp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, stamp, name), []byte(content+"\n"), 0o400); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("..data/"+name, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// runServe runs the service's binary with args to its end: its exit
// code and what it wrote (stdout, then stderr).
func runServe(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), serveChildEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Run()
	return cmd.ProcessState.ExitCode(), stdout.String() + stderr.String()
}

// The service starts with its token in the kubelet's layout, and the
// probe reads the same file.
func TestKubeletSecretToken(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts sandboxes")
	}
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.Mkdir(secret, 0o755); err != nil {
		t.Fatal(err)
	}
	kubeletSecret(t, secret, map[string]string{"token": "kubelet-layout-token-0123456789"})
	sock := filepath.Join(dir, "api.sock")
	cmd := exec.Command(os.Args[0], "--socket", sock, "--store", filepath.Join(dir, "files"), "--cli-socket", "none",
		"--listen", "127.0.0.1:0", "--token-file", filepath.Join(secret, "token"), "--pool", "0")
	cmd.Env = append(os.Environ(), serveChildEnv+"=1")
	var log bytes.Buffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	// The probe, as the DaemonSet runs it, reads the token through the
	// same links.
	var out string
	ready := func() bool {
		var code int
		code, out = runServe(t, "probe", "--socket", sock, "--token-file", filepath.Join(secret, "token"))
		return code == 0
	}
	fdtest.WaitFor(t, "the probe passes", ready)
	if !strings.Contains(out, `"ready":true`) {
		t.Fatalf("probe: %s (service: %s)", out, log.String())
	}
}

// A placeholder token or Redis password stops the service at start,
// with an error naming the flag, before it listens.
func TestPlaceholderSecretsRefused(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.Mkdir(secret, 0o755); err != nil {
		t.Fatal(err)
	}
	kubeletSecret(t, secret, map[string]string{
		"token":     "CHANGE-ME-a-long-random-token",
		"short":     "abc123",
		"queue-url": "redis://:CHANGE-ME@127.0.0.1:1/0",
	})
	sock := filepath.Join(dir, "api.sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--token-file", filepath.Join(secret, "token")}, "--token-file: "},
		{[]string{"--token-file", filepath.Join(secret, "short")}, "--token-file: "},
		{[]string{"--queue-url-file", filepath.Join(secret, "queue-url")}, "--queue-url-file: the Redis password is a placeholder"},
		{[]string{"--queue-url", "redis://:changeme@127.0.0.1:1/0"}, "--queue-url: the Redis password is a placeholder"},
	} {
		code, out := runServe(t, append([]string{"--socket", sock, "--store", filepath.Join(dir, "files"), "--pool", "0", "--cli-socket", "none"}, tc.args...)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, out, tc.want)
		}
		if _, err := os.Stat(sock); err == nil {
			t.Errorf("%v: the service listened", tc.args)
		}
	}
	if code, out := runServe(t, "probe", "--socket", sock, "--token-file", filepath.Join(secret, "token")); code != 2 || !strings.Contains(out, "--token-file: ") {
		t.Errorf("probe with a placeholder token: exit %d, %q", code, out)
	}
}
