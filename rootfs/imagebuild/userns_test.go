package imagebuild

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// inUserNamespace decides whether debootstrap is told it runs in a
// container (it binds /dev nodes instead of making them): false on the
// host, true in a user namespace of its own, even one mapping root to
// itself.
func TestInUserNamespace(t *testing.T) {
	if os.Getenv("ISOLATE_TEST_USERNS_CHILD") == "1" {
		if !inUserNamespace() {
			os.Exit(3)
		}
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: maps root into a user namespace")
	}
	if inUserNamespace() {
		t.Skip("runs in a user namespace already")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInUserNamespace$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ISOLATE_TEST_USERNS_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("in a user namespace, inUserNamespace is false: %v\n%s", err, out)
	}
}
