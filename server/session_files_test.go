package server

import (
	"bytes"
	"net/http"
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
