// Package filestore keeps the files clients of the service upload or
// collect (stdin, copy_in sources, copy_out results) under a root-only
// directory, each under a random id, for a time to live, within a quota
// of bytes. The service's file store must never fill the host: go-judge's
// most reported production failure is a store that filled /dev/shm.
package filestore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// DefaultRoot is where the service keeps its files.
const DefaultRoot = "/run/isolate/files"

// ErrNotFound is an id the store does not hold (never made, deleted or
// expired).
var ErrNotFound = errors.New("no such file")

// QuotaError is a file that would take the store beyond its quota.
type QuotaError struct{ Quota int64 }

func (e *QuotaError) Error() string {
	return fmt.Sprintf("the file store is full (quota %d bytes)", e.Quota)
}

// Store is a directory of files named by random ids.
type Store struct {
	root  string
	quota int64         // bytes, all files together
	ttl   time.Duration // each file's life from its creation
	now   func() time.Time

	// callerQuota bounds the bytes of each owner but the operator ("").
	callerQuota int64

	mu     sync.Mutex
	files  map[string]*entry
	used   int64            // bytes of files held and of uploads under way
	usedBy map[string]int64 // the same, per owner
	stop   chan struct{}
	done   chan struct{}
}

type entry struct {
	owner   string // who put it ("": the operator, root)
	size    int64
	expires time.Time
}

// Info describes a stored file.
type Info struct {
	ID      string    `json:"id"`
	Size    int64     `json:"size"`
	Expires time.Time `json:"expires"`
}

// marker is the file a store's directory holds from its creation on: a
// directory without it is not a store, and its contents are not ours to
// remove.
const marker = ".isolate-store"

// Open makes the store at root, a directory only root may enter. What a
// previous service left there is removed: ids live in memory only, so no
// one can ask for those files again. A directory that exists, is not
// empty and was not made by a store is refused: its files are not ours.
// Each owner but the operator may hold callerQuota bytes (0: quota/4).
func Open(root string, quota, callerQuota int64, ttl time.Duration) (*Store, error) {
	if quota <= 0 || ttl <= 0 || callerQuota < 0 {
		return nil, errors.New("file store: quota and time to live must be positive")
	}
	if callerQuota == 0 {
		callerQuota = max(quota/4, 1)
	}
	if err := claim(root); err != nil {
		return nil, err
	}
	if err := os.Chmod(root, 0o700); err != nil {
		return nil, fmt.Errorf("file store: %w", err)
	}
	if err := sweep(root); err != nil {
		return nil, err
	}
	s := &Store{root: root, quota: quota, callerQuota: callerQuota, ttl: ttl, now: time.Now, files: map[string]*entry{},
		usedBy: map[string]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go s.janitor()
	return s, nil
}

// claim makes root a store's directory: created with its marker, or
// found with it, or found empty (the marker is added).
func claim(root string) error {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("file store: %w", err)
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("file store: %w", err)
	}
	owned := len(ents) == 0
	for _, e := range ents {
		owned = owned || e.Name() == marker
	}
	if !owned {
		return fmt.Errorf("file store %s: the directory holds files and no %s: it is not a store this service made (give an empty or new directory)", root, marker)
	}
	f, err := os.OpenFile(filepath.Join(root, marker), os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("file store: %w", err)
	}
	return f.Close()
}

// sweep removes every file a previous service left in root.
func sweep(root string) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("file store: %w", err)
	}
	for _, e := range ents {
		if e.Name() == marker {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
			return fmt.Errorf("file store: %w", err)
		}
	}
	return nil
}

// janitor removes expired files, often enough that an expired file never
// holds its bytes for more than a tenth of its life beyond it.
func (s *Store) janitor() {
	defer close(s.done)
	every := min(max(s.ttl/10, 10*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.expire()
		}
	}
}

// expire removes the files whose time is up.
func (s *Store) expire() {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.files {
		if !now.Before(e.expires) {
			s.removeLocked(id, e)
		}
	}
}

func (s *Store) removeLocked(id string, e *entry) {
	delete(s.files, id)
	s.releaseLocked(e.owner, e.size)
	os.Remove(s.path(id))
}

func (s *Store) path(id string) string { return filepath.Join(s.root, id) }

// Close removes every file and the janitor.
func (s *Store) Close() error {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.files {
		s.removeLocked(id, e)
	}
	return sweep(s.root)
}

// Put stores what r yields for owner ("": the operator), at most max
// bytes (0: up to the quota), and returns its id. Bytes count against
// the quota and the owner's as they arrive, so concurrent uploads cannot
// overrun them together.
func (s *Store) Put(owner string, r io.Reader, max int64) (Info, error) {
	id, err := newID()
	if err != nil {
		return Info{}, err
	}
	f, err := os.OpenFile(s.path(id), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return Info{}, fmt.Errorf("file store: %w", err)
	}
	var size int64
	fail := func(err error) (Info, error) {
		f.Close()
		os.Remove(f.Name())
		s.release(owner, size)
		return Info{}, err
	}
	buf := make([]byte, 64<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if max > 0 && size+int64(n) > max {
				return fail(&TooLargeError{Max: max})
			}
			if quota, ok := s.reserve(owner, int64(n)); !ok {
				return fail(&QuotaError{Quota: quota})
			}
			size += int64(n)
			if _, err := f.Write(buf[:n]); err != nil {
				return fail(fmt.Errorf("file store: %w", err))
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fail(rerr)
		}
	}
	if err := f.Close(); err != nil {
		return fail(fmt.Errorf("file store: %w", err))
	}
	e := &entry{owner: owner, size: size, expires: s.now().Add(s.ttl)}
	s.mu.Lock()
	s.files[id] = e
	s.mu.Unlock()
	return Info{ID: id, Size: size, Expires: e.expires}, nil
}

// TooLargeError is a file beyond the size its caller allowed.
type TooLargeError struct{ Max int64 }

func (e *TooLargeError) Error() string { return fmt.Sprintf("larger than %d bytes", e.Max) }

// reserve counts n more bytes of owner's, or says which quota they
// would exceed.
func (s *Store) reserve(owner string, n int64) (quota int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used+n > s.quota {
		return s.quota, false
	}
	if owner != "" && s.usedBy[owner]+n > s.callerQuota {
		return s.callerQuota, false
	}
	s.used += n
	s.usedBy[owner] += n
	return 0, true
}

func (s *Store) release(owner string, n int64) {
	s.mu.Lock()
	s.releaseLocked(owner, n)
	s.mu.Unlock()
}

// releaseLocked uncounts n bytes of owner's; an owner left with none
// leaves the map.
func (s *Store) releaseLocked(owner string, n int64) {
	s.used -= n
	if s.usedBy[owner] -= n; s.usedBy[owner] == 0 {
		delete(s.usedBy, owner)
	}
}

// Open opens the file id for reading, if may allows its owner: a file of
// an owner may refuses is not found, as one that never was.
func (s *Store) Open(id string, may func(owner string) bool) (*os.File, Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock() // held so that the file cannot expire between the check and the open
	e, ok := s.files[id]
	if !ok || !validID(id) || !s.now().Before(e.expires) || !may(e.owner) {
		return nil, Info{}, ErrNotFound
	}
	f, err := os.OpenFile(s.path(id), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, Info{}, fmt.Errorf("file store: %w", err)
	}
	return f, Info{ID: id, Size: e.size, Expires: e.expires}, nil
}

// Delete removes the file id, if may allows its owner (else it is not
// found).
func (s *Store) Delete(id string, may func(owner string) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.files[id]
	if !ok || !may(e.owner) {
		return ErrNotFound
	}
	s.removeLocked(id, e)
	return nil
}

// Usage is the bytes and the number of files the store holds.
func (s *Store) Usage() (bytes int64, files int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, len(s.files)
}

// Quota is the most bytes the store holds.
func (s *Store) Quota() int64 { return s.quota }

func newID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// validID is an id this store could have made: 32 lower-case hex digits,
// so that no id names a path.
func validID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
