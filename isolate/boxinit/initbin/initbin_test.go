package initbin_test

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate/boxinit/initbin"
)

func embedded(t *testing.T) []byte {
	t.Helper()
	bin := initbin.Binary()
	if bin == nil {
		t.Skip("built without the initbin tag: no small init embedded")
	}
	return bin
}

// The embedded init is a static executable for this machine: the kernel
// runs it with no loader and no library from the host (or the box).
func TestBinaryIsStaticELF(t *testing.T) {
	f, err := elf.NewFile(bytes.NewReader(embedded(t)))
	if err != nil {
		t.Fatal(err)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	if f.Type != elf.ET_EXEC || f.Machine != machine {
		t.Errorf("type %v machine %v, want %v %v", f.Type, f.Machine, elf.ET_EXEC, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("has a %v segment: not static", p.Type)
		}
	}
}

// Started by anything but isolate, it says so and exits 2.
func TestBinaryRefusesAStrayStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "isolate-init")
	if err := os.WriteFile(path, embedded(t), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "started only by isolate") {
		t.Errorf("err %v, output %q; want exit status 2 and the error", err, out)
	}
}
