package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ReadSecret reads a secret from path: one non-empty line in a regular
// file that only its owner may read (as ssh insists for keys), owned by
// this process's user or root.
//
// The file may be a symlink that resolves inside its own directory, as
// the kubelet lays out a Secret volume (DIR/token -> ..data/token,
// DIR/..data -> ..2026_11_29_06_00_00.123456789, the file in that
// directory, swapped atomically by renaming ..data): the name is opened
// from a descriptor of DIR with RESOLVE_BENEATH, so a link that leads out
// of DIR (by "..", or an absolute target) is refused, and the owner and
// mode are those of the file finally opened.
func ReadSecret(path string) (string, error) {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if name == "" || name == "." || name == ".." {
		return "", fmt.Errorf("%s: not a file name", path)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOCTTY | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.EXDEV) {
		return "", fmt.Errorf("%s: a symlink on the way leads out of %s (a secret's links must stay in its own directory)", path, filepath.Clean(dir))
	}
	if err != nil {
		return "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", fmt.Errorf("%s: not a regular file", path)
	}
	if perm := st.Mode & 0o777; perm&0o077 != 0 {
		return "", fmt.Errorf("%s: mode %04o lets others read it (chmod 600)", path, perm)
	}
	if euid := uint32(os.Geteuid()); st.Uid != euid && st.Uid != 0 {
		return "", fmt.Errorf("%s: owned by uid %d, neither this service's user (%d) nor root", path, st.Uid, euid)
	}
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	line := strings.TrimSpace(string(b[:n]))
	if line == "" || strings.ContainsAny(line, " \t\r\n") {
		return "", fmt.Errorf("%s: want one non-empty line", path)
	}
	return line, nil
}

// MinTokenBytes is the shortest bearer token the service takes.
const MinTokenBytes = 16

// ReadToken reads a bearer token from path (ReadSecret) and refuses one
// that is too short or a placeholder (CheckToken).
func ReadToken(path string) (string, error) {
	tok, err := ReadSecret(path)
	if err != nil {
		return "", err
	}
	if err := CheckToken(tok); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return tok, nil
}

// placeholders are words that mark a value written to be replaced, as
// the shipped Secret's CHANGE-ME.
var placeholders = []string{"changeme", "replaceme", "placeholder", "yourtoken", "yoursecret", "yourpassword", "example"}

// IsPlaceholder tells whether s reads as a value left to be replaced:
// one of the placeholders' words (in any case, with or without - or _),
// a value in angle brackets, or one character repeated.
func IsPlaceholder(s string) bool {
	folded := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r == ' ' {
			return -1
		}
		return r
	}, strings.ToLower(s))
	for _, p := range placeholders {
		if strings.Contains(folded, p) {
			return true
		}
	}
	if strings.HasPrefix(s, "<") || strings.HasSuffix(s, ">") {
		return true
	}
	return s != "" && strings.Count(s, s[:1]) == len(s)
}

// CheckToken refuses a bearer token that guards nothing: shorter than
// MinTokenBytes, or a placeholder.
func CheckToken(tok string) error {
	if IsPlaceholder(tok) {
		return errors.New("the token is a placeholder (as the shipped Secret's CHANGE-ME): put a random one, e.g. head -c 32 /dev/urandom | base64")
	}
	if len(tok) < MinTokenBytes {
		return fmt.Errorf("the token has %d characters, at least %d are needed (e.g. head -c 32 /dev/urandom | base64)", len(tok), MinTokenBytes)
	}
	return nil
}
