package isolate

import (
	"strings"
	"testing"
)

// The box root's settings: box_root_size in KiB, box_size refused with
// the reason (boxes share one file system), syscall_flags accepted.
func TestBoxRootSettings(t *testing.T) {
	for _, c := range []struct {
		line string
		size int64
		err  string
	}{
		{"box_root_size = 1024", 1 << 20, ""},
		{"box_root_size = 0", 0, "box_root_size"},
		{"box_root_size = 1G", 0, "box_root_size"},
		{"box_size = 262144", 0, "box_root_size bounds the one they share"},
		{"syscall_flags = 31", 0, ""},
	} {
		var cfg Config
		err := cfg.set(c.line)
		if err != nil {
			if c.err == "" || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want %q", c.line, err, c.err)
			}
		} else if c.err != "" || cfg.BoxRootSize != c.size {
			t.Errorf("%q: size %d, want %d (error %q)", c.line, cfg.BoxRootSize, c.size, c.err)
		}
	}
}
