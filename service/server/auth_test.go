package server

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTCPNeedsToken(t *testing.T) {
	s := New(Config{Runner: hostRunner{}, Parallel: 1})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := s.Serve(l); err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("TCP without a token: %v", err)
	}
}

func TestTCPToken(t *testing.T) {
	s := startService(t, func(c *Config) { c.Token = "s3cret-token" })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	url := "http://" + l.Addr().String() + "/v1/run"
	post := func(auth string) (int, string) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"commands":[{"args":["/bin/true"]}]}`))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := make([]byte, 4096)
		n, _ := resp.Body.Read(b)
		return resp.StatusCode, string(b[:n])
	}
	for _, auth := range []string{"", "Bearer wrong", "Bearer s3cret-toke", "Bearer s3cret-tokenx", "s3cret-token", "Basic s3cret-token"} {
		if code, body := post(auth); code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d %s", auth, code, body)
		}
	}
	if code, body := post("Bearer s3cret-token"); code != http.StatusOK || !strings.Contains(body, `"status":"OK"`) {
		t.Fatalf("with the token: %d %s", code, body)
	}
	// A TCP caller is not root: no host paths, token or not.
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"commands":[{"args":["/bin/true"],"binds":[{"host":"/etc","box":"/x"}]}]}`))
	req.Header.Set("Authorization", "Bearer s3cret-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("binds over TCP: %d", resp.StatusCode)
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	if tok, err := ReadToken(write("ok", goodToken+"\n", 0o600)); err != nil || tok != goodToken {
		t.Errorf("good token file: %q %v", tok, err)
	}
	for name, tc := range map[string]struct {
		content string
		mode    os.FileMode
	}{
		"readable": {"abc", 0o644}, "empty": {"\n", 0o600}, "two": {"a b\n", 0o600},
	} {
		if _, err := ReadToken(write(name, tc.content, tc.mode)); err == nil {
			t.Errorf("%s token file accepted", name)
		}
	}
	if _, err := ReadToken(filepath.Join(dir, "absent")); err == nil {
		t.Error("absent token file accepted")
	}
}

// A TCP caller gets the policy's answers: 403 naming the field for what
// it may not ask, 400 for output it would have the service hold without
// bound.
func TestTCPCallerPolicy(t *testing.T) {
	s := startService(t, func(c *Config) { c.Token = "policy-token" })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	for _, c := range []struct {
		path, body string
		code       int
		field      string
	}{
		{"/v1/run", `{"commands":[{"args":["/bin/true"],"net":"host"}]}`, http.StatusForbidden, "commands[0].net"},
		{"/v1/run", `{"commands":[{"args":["/bin/true"],"seccomp":"none"}]}`, http.StatusForbidden, "commands[0].seccomp"},
		{"/v1/run", `{"commands":[{"args":["/bin/true"],"seccomp":"profile.json"}]}`, http.StatusForbidden, "commands[0].seccomp"},
		{"/v1/run", `{"commands":[{"args":["/bin/true"],"box_id":3}]}`, http.StatusForbidden, "commands[0].box_id"},
		{"/v1/run", `{"commands":[{"args":["/bin/true"],"output_limit_bytes":-1}]}`, http.StatusBadRequest, "commands[0].output_limit_bytes"},
		{"/v1/exec", `{"lang":"python","source":"print(1)","net":"host"}`, http.StatusForbidden, "net"},
	} {
		req, _ := http.NewRequest("POST", "http://"+l.Addr().String()+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer policy-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error, Field string }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.code || e.Field != c.field || e.Error == "" {
			t.Errorf("%s: %d %+v, want %d naming %s", c.body, resp.StatusCode, e, c.code, c.field)
		}
	}
}
