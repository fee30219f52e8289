package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
)

// --copy-out keeps a file's permission bits as the box had them (the
// execute bit included: a binary copied out runs), under the caller's
// umask, in-process and handed over to a service; a file inside a
// copied-out directory too. An existing destination keeps its own mode,
// as with cp.
func TestCopyOutKeepsModes(t *testing.T) {
	needRoot(t)
	svc := ownService(t)
	script := "cp /bin/true sol && chmod 755 sol && (umask 077; echo secret > p) && " +
		"mkdir d && echo x > d/x && chmod 700 d/x && echo y > old && chmod 755 old"
	for _, c := range []struct {
		name, sock, umask, via string
		sol, p, x              os.FileMode
	}{
		{"in-process", "", "022", "in-process", 0o755, 0o600, 0o700},
		{"handed over", svc.cliSock, "022", "service", 0o755, 0o600, 0o700},
		// (A caller whose umask is not the service's runs in-process.)
		{"umask 027", "", "027", "in-process", 0o750, 0o600, 0o700},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := shareDir(t)
			old := filepath.Join(dir, "old")
			if err := os.WriteFile(old, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"run", "--json", "--copy-out", "/box/sol:" + filepath.Join(dir, "sol"), "--copy-out", "/box/p:" + filepath.Join(dir, "p"),
				"--copy-out", "/box/d:" + filepath.Join(dir, "d"), "--copy-out", "/box/old:" + old, "--", "/bin/sh", "-c", script}
			cmd := exec.Command("/bin/sh", append([]string{"-c", `umask "$0" && exec "$@"`, c.umask, isolateBin}, args...)...)
			cmd.Env = handoverEnv(c.sock)
			res := runResult(t, cmd)
			var rep isolate.Report
			if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
				t.Fatalf("exit %d, no report: %s", res.Code, res.Stderr)
			}
			expectStatus(t, &rep, isolate.StatusOK)
			if rep.Sandbox.Via != c.via {
				t.Errorf("ran %s, want %s", rep.Sandbox.Via, c.via)
			}
			for name, want := range map[string]os.FileMode{"sol": c.sol, "p": c.p, "d/x": c.x, "old": 0o600} {
				fi, err := os.Stat(filepath.Join(dir, name))
				if err != nil {
					t.Errorf("%s: %v", name, err)
				} else if fi.Mode().Perm() != want {
					t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), want)
				}
			}
			if out, err := exec.Command(filepath.Join(dir, "sol")).CombinedOutput(); err != nil {
				t.Errorf("the binary copied out does not run: %v %s", err, strings.TrimSpace(string(out)))
			}
		})
	}
}
