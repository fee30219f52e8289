package rootfs

import "testing"

func TestImageNames(t *testing.T) {
	for name, ok := range map[string]bool{"c": true, "cpp": true, "my-lang_2": true, "": false, "../x": false, "a/b": false, "Upper": false, ".hidden": false} {
		if ValidImageName(name) != ok {
			t.Errorf("ValidImageName(%q) != %v", name, ok)
		}
	}
	if IsSquashfs("/etc/passwd") || IsSquashfs("/nonexistent") {
		t.Error("IsSquashfs of a text file")
	}
	if _, err := LookupImage("../etc"); err == nil {
		t.Error("LookupImage of a bad name")
	}
	if err := RemoveImage("Bad/Name", nil); err == nil {
		t.Error("RemoveImage of a bad name")
	}
}
