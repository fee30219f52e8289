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
	s, err := Open(root, quota, 0, ttl)
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
	f, _, err := s.Open(id, anyone)
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
	info, err := s.Put("", strings.NewReader("hello"), 0)
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
	if err := s.Delete(info.ID, anyone); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Open(info.ID, anyone); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open after delete: %v", err)
	}
	if err := s.Delete(info.ID, anyone); !errors.Is(err, ErrNotFound) {
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
		if _, _, err := s.Open(id, anyone); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open(%q): %v", id, err)
		}
	}
}

func TestQuota(t *testing.T) {
	s, _ := openTest(t, 100, time.Hour)
	a, err := s.Put("", strings.NewReader(strings.Repeat("a", 60)), 0)
	if err != nil {
		t.Fatal(err)
	}
	var qe *QuotaError
	if _, err := s.Put("", strings.NewReader(strings.Repeat("b", 41)), 0); !errors.As(err, &qe) {
		t.Fatalf("beyond the quota: %v", err)
	}
	// The refused upload holds nothing, on disk or in the count.
	if b, n := s.Usage(); b != 60 || n != 1 {
		t.Fatalf("usage %d bytes %d files", b, n)
	}
	if ents, _ := os.ReadDir(s.root); len(ents) != 2 { // the file and the marker
		t.Fatalf("%d files on disk", len(ents))
	}
	if _, err := s.Put("", strings.NewReader(strings.Repeat("b", 40)), 0); err != nil {
		t.Fatalf("exactly to the quota: %v", err)
	}
	s.Delete(a.ID, anyone)
	if _, err := s.Put("", strings.NewReader(strings.Repeat("c", 60)), 0); err != nil {
		t.Fatalf("after a delete freed room: %v", err)
	}
	var te *TooLargeError
	if _, err := s.Put("", strings.NewReader("12345"), 4); !errors.As(err, &te) {
		t.Fatalf("beyond the caller's maximum: %v", err)
	}
}

func TestTimeToLive(t *testing.T) {
	s, c := openTest(t, 1<<20, time.Minute)
	old, _ := s.Put("", strings.NewReader("old"), 0)
	c.add(30 * time.Second)
	young, _ := s.Put("", strings.NewReader("young"), 0)
	c.add(30 * time.Second) // old is exactly a minute old: expired
	if _, _, err := s.Open(old.ID, anyone); !errors.Is(err, ErrNotFound) {
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
	first, err := Open(root, 1<<20, 0, time.Hour) // makes the store's directory
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	if err := os.MkdirAll(filepath.Join(root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, strings.Repeat("a", 32)), []byte("left by a killed service"), 0o600)
	s, err := Open(root, 1<<20, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 1 || ents[0].Name() != marker {
		t.Fatalf("leftovers: %v", ents)
	}
	s.Put("", strings.NewReader("x"), 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 1 {
		t.Fatalf("%d files after Close", len(ents))
	}
}

// A directory that holds files and was not made by a store is refused,
// and nothing in it is removed; an empty one is taken.
func TestOpenRefusesForeignDirectory(t *testing.T) {
	root := t.TempDir()
	keep := filepath.Join(root, "precious")
	os.WriteFile(keep, []byte("mine"), 0o600)
	if s, err := Open(root, 1<<20, 0, time.Hour); err == nil || !strings.Contains(err.Error(), "not a store") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("a directory with files: %v", err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
		t.Fatalf("its file: %q %v", b, err)
	}
	empty := t.TempDir()
	s, err := Open(empty, 1<<20, 0, time.Hour)
	if err != nil {
		t.Fatalf("an empty directory: %v", err)
	}
	s.Close()
}

// Each owner reads and deletes only its own files (another's is not
// found), within its own quota; the operator ("") reads all.
func TestOwnersAndCallerQuota(t *testing.T) {
	s, err := Open(t.TempDir(), 1000, 100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := s.Put("uid:1", strings.NewReader("a's"), 0)
	if err != nil {
		t.Fatal(err)
	}
	only := func(owner string) func(string) bool { return func(o string) bool { return o == owner } }
	if _, _, err := s.Open(a.ID, only("uid:2")); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner opened it: %v", err)
	}
	if err := s.Delete(a.ID, only("uid:2")); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner deleted it: %v", err)
	}
	f, _, err := s.Open(a.ID, only("uid:1"))
	if err != nil {
		t.Fatalf("its owner: %v", err)
	}
	f.Close()
	if f, _, err := s.Open(a.ID, anyone); err != nil {
		t.Errorf("the operator: %v", err)
	} else {
		f.Close()
	}
	var qe *QuotaError
	if _, err := s.Put("uid:1", strings.NewReader(strings.Repeat("x", 98)), 0); !errors.As(err, &qe) || qe.Quota != 100 {
		t.Errorf("beyond its own quota: %v", err)
	}
	if _, err := s.Put("uid:2", strings.NewReader(strings.Repeat("x", 98)), 0); err != nil {
		t.Errorf("another owner's quota is its own: %v", err)
	}
	if _, err := s.Put("", strings.NewReader(strings.Repeat("x", 500)), 0); err != nil {
		t.Errorf("the operator has the store's quota: %v", err)
	}
}

// anyone lets every owner's files be read (the operator's view).
func anyone(string) bool { return true }
