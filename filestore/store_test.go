package filestore

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a time the test moves by hand: expiry is checked against it,
// never against the wall clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openTest(t *testing.T, quota int64, ttl time.Duration) (*Store, *clock) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "files")
	s, err := Open(root, quota, ttl)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Unix(1_000_000, 0)}
	s.now = c.now
	t.Cleanup(func() { s.Close() })
	return s, c
}

func readAll(t *testing.T, s *Store, id string) string {
	t.Helper()
	f, _, err := s.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPutOpenDelete(t *testing.T) {
	s, _ := openTest(t, 1<<20, time.Hour)
	info, err := s.Put(strings.NewReader("hello"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != 5 || !validID(info.ID) {
		t.Fatalf("info %+v", info)
	}
	if got := readAll(t, s, info.ID); got != "hello" {
		t.Fatalf("content %q", got)
	}
	if st, err := os.Stat(s.root); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("root mode: %v %v", st.Mode(), err)
	}
	if b, n := s.Usage(); b != 5 || n != 1 {
		t.Fatalf("usage %d bytes %d files", b, n)
	}
	if err := s.Delete(info.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Open(info.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open after delete: %v", err)
	}
	if err := s.Delete(info.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if b, n := s.Usage(); b != 0 || n != 0 {
		t.Fatalf("usage after delete %d bytes %d files", b, n)
	}
	if _, err := os.Stat(filepath.Join(s.root, info.ID)); !os.IsNotExist(err) {
		t.Fatalf("file still on disk: %v", err)
	}
}

func TestIDsNamingPathsAreNotFound(t *testing.T) {
	s, _ := openTest(t, 1<<20, time.Hour)
	for _, id := range []string{"", "..", "../etc/passwd", "/etc/passwd", strings.Repeat("A", 32), strings.Repeat("g", 32)} {
		if _, _, err := s.Open(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open(%q): %v", id, err)
		}
	}
}

func TestQuota(t *testing.T) {
	s, _ := openTest(t, 100, time.Hour)
	a, err := s.Put(strings.NewReader(strings.Repeat("a", 60)), 0)
	if err != nil {
		t.Fatal(err)
	}
	var qe *QuotaError
	if _, err := s.Put(strings.NewReader(strings.Repeat("b", 41)), 0); !errors.As(err, &qe) {
		t.Fatalf("beyond the quota: %v", err)
	}
	// The refused upload holds nothing, on disk or in the count.
	if b, n := s.Usage(); b != 60 || n != 1 {
		t.Fatalf("usage %d bytes %d files", b, n)
	}
	if ents, _ := os.ReadDir(s.root); len(ents) != 1 {
		t.Fatalf("%d files on disk", len(ents))
	}
	if _, err := s.Put(strings.NewReader(strings.Repeat("b", 40)), 0); err != nil {
		t.Fatalf("exactly to the quota: %v", err)
	}
	s.Delete(a.ID)
	if _, err := s.Put(strings.NewReader(strings.Repeat("c", 60)), 0); err != nil {
		t.Fatalf("after a delete freed room: %v", err)
	}
	var te *TooLargeError
	if _, err := s.Put(strings.NewReader("12345"), 4); !errors.As(err, &te) {
		t.Fatalf("beyond the caller's maximum: %v", err)
	}
}

func TestTimeToLive(t *testing.T) {
	s, c := openTest(t, 1<<20, time.Minute)
	old, _ := s.Put(strings.NewReader("old"), 0)
	c.add(30 * time.Second)
	young, _ := s.Put(strings.NewReader("young"), 0)
	c.add(30 * time.Second) // old is exactly a minute old: expired
	if _, _, err := s.Open(old.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired file opened: %v", err)
	}
	if got := readAll(t, s, young.ID); got != "young" {
		t.Fatalf("young file: %q", got)
	}
	s.expire()
	if b, n := s.Usage(); b != 5 || n != 1 {
		t.Fatalf("usage after expiry %d bytes %d files", b, n)
	}
	if _, err := os.Stat(filepath.Join(s.root, old.ID)); !os.IsNotExist(err) {
		t.Fatalf("expired file still on disk: %v", err)
	}
}

func TestOpenSweepsLeftovers(t *testing.T) {
	root := filepath.Join(t.TempDir(), "files")
	if err := os.MkdirAll(filepath.Join(root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, strings.Repeat("a", 32)), []byte("left by a killed service"), 0o600)
	s, err := Open(root, 1<<20, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Fatalf("%d leftovers", len(ents))
	}
	s.Put(strings.NewReader("x"), 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Fatalf("%d files after Close", len(ents))
	}
}
