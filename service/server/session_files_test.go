package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// A write the box's file system refuses (507) leaves no partial file:
// neither a new one nor what an existing one held, and the box's space
// is free again.
func TestSessionFileRefusedWriteLeavesNothing(t *testing.T) {
	s := startService(t, nil)
	id := s.session(t, `{"tmp_size_bytes": 1048576, "file_size_bytes": 4194304}`)
	base := "/v1/sessions/" + id + "/files/"
	put := func(name string, size int) int {
		t.Helper()
		req, _ := http.NewRequest("PUT", "http://isolate"+base+name, bytes.NewReader(bytes.Repeat([]byte("x"), size)))
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put("old", 1000); code != http.StatusOK {
		t.Fatalf("PUT old: %d", code)
	}
	for _, name := range []string{"new", "old", "sub/dir/new"} {
		if code := put(name, 2<<20); code != http.StatusInsufficientStorage {
			t.Errorf("PUT %s beyond tmp_size_bytes: %d, want 507", name, code)
		}
		if code, b := s.do(t, "GET", base+name+"?stat=1", ""); code != http.StatusNotFound {
			t.Errorf("%s after a refused write: %d %s, want 404", name, code, b)
		}
	}
	// The space is free: a file of most of it fits.
	if code := put("fits", 900<<10); code != http.StatusOK {
		t.Errorf("PUT of 900 KiB after the refused writes: %d", code)
	}
	if rep := s.command(t, id, "sh", "-c", "ls /box"); strings.Contains(rep.Stdout, "new") || strings.Contains(rep.Stdout, "old") {
		t.Errorf("the box holds %q", rep.Stdout)
	}
}

// Directories made and entries renamed in the box, by descriptors: a
// symlink the box made moves as itself, never followed; paths outside
// /box and /tmp, and renames between them (two file systems), are
// refused naming the field.
func TestSessionFileMkdirAndRename(t *testing.T) {
	s := startService(t, nil)
	id := s.session(t, `{}`)
	base := "/v1/sessions/" + id + "/files/"
	op := func(path, body string) (int, FileInfoAnswer) {
		t.Helper()
		code, b := s.do(t, "POST", base+path, body)
		var a FileInfoAnswer
		json.Unmarshal(b, &a)
		if a.Error != "" {
			t.Logf("%s %s: %d %s", path, body, code, b)
		}
		return code, a
	}
	if code, a := op("a/b/c", `{"op": "mkdir"}`); code != http.StatusCreated || !a.IsDir || a.Path != "/box/a/b/c" {
		t.Errorf("mkdir a/b/c: %d %+v", code, a)
	}
	if code, a := op("a/b/c", `{"op": "mkdir"}`); code != http.StatusOK || !a.IsDir {
		t.Errorf("mkdir of an existing directory: %d %+v, want 200", code, a)
	}
	if rep := s.command(t, id, "sh", "-c", "echo hi > /box/f; ln -s /etc/passwd /box/link"); rep.Status != "OK" {
		t.Fatalf("setup: %+v", rep)
	}
	if code, a := op("f", `{"op": "mkdir"}`); code != http.StatusBadRequest || a.Field != "path" {
		t.Errorf("mkdir over a file: %d %+v, want 400 naming path", code, a)
	}
	if code, a := op("f", `{"op": "rename", "to": "/box/a/b/c/g"}`); code != http.StatusOK || a.Path != "/box/a/b/c/g" || a.Size != 3 {
		t.Errorf("rename f: %d %+v", code, a)
	}
	if code, a := op("link", `{"op": "rename", "to": "/box/a/moved"}`); code != http.StatusOK || a.Mode&os.ModeSymlink == 0 {
		t.Errorf("rename of a symlink: %d %+v, want the link itself", code, a)
	}
	if rep := s.command(t, id, "sh", "-c", "cat /box/a/b/c/g; readlink /box/a/moved; ls /box"); rep.Stdout != "hi\n/etc/passwd\na\n" {
		t.Errorf("the box holds %q", rep.Stdout)
	}
	for _, c := range []struct {
		path, body, field string
		code              int
	}{
		{"a", `{"op": "rename", "to": "/etc/x"}`, "to", http.StatusBadRequest},
		{"a", `{"op": "rename", "to": "/tmp/a"}`, "path", http.StatusBadRequest}, // another file system
		{"a", `{"op": "rename"}`, "to", http.StatusBadRequest},
		{"nothing", `{"op": "rename", "to": "/box/x"}`, "path", http.StatusNotFound},
		{"a", `{"op": "rename", "to": "/box/no/such/dir"}`, "path", http.StatusNotFound},
		{"a", `{"op": "chmod"}`, "op", http.StatusBadRequest},
		{"%2Fetc/x", `{"op": "mkdir"}`, "path", http.StatusBadRequest},
	} {
		if code, a := op(c.path, c.body); code != c.code || a.Field != c.field {
			t.Errorf("%s %s: %d %+v, want %d naming %s", c.path, c.body, code, a, c.code, c.field)
		}
	}
}

// FileInfoAnswer is a file's description, or an error naming a field.
type FileInfoAnswer struct {
	Path  string      `json:"path"`
	Size  int64       `json:"size"`
	Mode  os.FileMode `json:"mode"`
	IsDir bool        `json:"is_dir"`
	Error string      `json:"error"`
	Field string      `json:"field"`
}
