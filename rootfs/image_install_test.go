package rootfs

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// exported is an export of a payload under a manifest (no root needed:
// import refuses these before it mounts anything).
func exported(m Manifest, payload []byte) []byte {
	data, _ := json.Marshal(m)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: exportManifest, Mode: 0o644, Size: int64(len(data))})
	tw.Write(data)
	tw.WriteHeader(&tar.Header{Name: exportPayload, Mode: 0o644, Size: int64(len(payload))})
	tw.Write(payload)
	tw.Close()
	return buf.Bytes()
}

func TestImportRefusesBadExports(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("ISOLATE_IMAGES_DIR", dir)
	payload := append([]byte("hsqs"), bytes.Repeat([]byte("image"), 1000)...)
	sum := sha256.Sum256(payload)
	good := Manifest{Name: "img", Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:])}
	altered := append([]byte(nil), payload...)
	altered[2000] ^= 1
	notSquashfs := []byte("not a squashfs")
	nsSum := sha256.Sum256(notSquashfs)
	cases := map[string]struct {
		file []byte
		says string
	}{
		"altered":        {exported(good, altered), "altered or damaged"},
		"cut short":      {exported(good, payload)[:3000], "cut short"},
		"bad name":       {exported(Manifest{Name: "../x", Size: good.Size, SHA256: good.SHA256}, payload), "valid name"},
		"size differs":   {exported(Manifest{Name: "img", Size: 10, SHA256: good.SHA256}, payload), "manifest says 10"},
		"not squashfs":   {exported(Manifest{Name: "img", Size: int64(len(notSquashfs)), SHA256: hex.EncodeToString(nsSum[:])}, notSquashfs), "not a squashfs"},
		"not an export":  {[]byte("hello"), "no manifest.json"},
		"empty manifest": {exported(Manifest{}, payload), "valid name"},
	}
	for what, c := range cases {
		_, err := ImportImage(bytes.NewReader(c.file))
		if !errors.Is(err, ErrBadImport) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %q", what, err, c.says)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("%s: left %v", what, left)
		}
	}
}
