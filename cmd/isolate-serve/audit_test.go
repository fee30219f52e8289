package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/service/server"
)

// --audit-file: created or appended to, mode 0600 whatever it had; never
// through a symlink, never a file that is not regular.
func TestAuditFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.log")
	os.WriteFile(p, []byte("kept\n"), 0o644)
	o := &options{auditFile: p}
	a, closeAudit, err := o.openAuditor()
	if err != nil {
		t.Fatal(err)
	}
	a.Write(&server.AuditLine{RequestID: "r1", Verdict: "ok"})
	closeAudit()
	data, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if !strings.HasPrefix(string(data), "kept\n{") || !strings.Contains(string(data), `"request_id":"r1"`) || st.Mode().Perm() != 0o600 {
		t.Errorf("the audit file: mode %v, %q", st.Mode().Perm(), data)
	}
	os.Symlink(p, filepath.Join(dir, "link"))
	for _, bad := range []string{filepath.Join(dir, "link"), dir, "/dev/null"} {
		o := &options{auditFile: bad}
		if _, _, err := o.openAuditor(); err == nil || !strings.Contains(err.Error(), "--audit-file "+bad) {
			t.Errorf("--audit-file %s: %v, want refused naming it", bad, err)
		}
	}
}
