package rootfs

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// InstallImage puts a new version of an image in place: its tree (from
// squashfs, a file in ImagesDir that becomes the image's), then the
// squashfs, then the manifest, whose rename makes it the version runs get.
// Old trees go unless runs use them.
func InstallImage(m *Manifest, squashfs string) error {
	if err := unpackTree(m.Name, m.SHA256, squashfs); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(m, "", "  ")
	mtmp := manifestPath(m.Name) + ".tmp"
	if err := os.WriteFile(mtmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(squashfs, ImagePath(m.Name)); err != nil {
		os.Remove(mtmp)
		return err
	}
	if err := os.Rename(mtmp, manifestPath(m.Name)); err != nil {
		return err
	}
	return RemoveTrees(m.Name, true, nil)
}

// EnsureTree unpacks a built image that has no tree yet (an image built
// before trees existed): `isolate image build` converts instead of
// rebuilding.
func EnsureTree(name string) error {
	t, err := OpenTree(name)
	if err != nil {
		return err
	}
	return t.Close()
}

// An exported image is a tar of two members: manifest.json, then
// image.sqfs, whose sha256 and size the manifest gives. Import checks
// both before anything is in place.
const (
	exportManifest = "manifest.json"
	exportPayload  = "image.sqfs"
	maxManifest    = 4 << 20
	maxPayload     = 64 << 30
)

// ExportImage writes image name to w.
func ExportImage(name string, w io.Writer) error {
	m, err := LookupImage(name)
	if err != nil {
		return err
	}
	f, err := os.Open(ImagePath(name))
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != m.Size {
		return fmt.Errorf("image %s: %s has %d bytes, its manifest says %d (rebuild it)", name, ImagePath(name), fi.Size(), m.Size)
	}
	data, _ := json.MarshalIndent(m, "", "  ")
	tw := tar.NewWriter(w)
	now := time.Now().UTC().Truncate(time.Second)
	if err := tw.WriteHeader(&tar.Header{Name: exportManifest, Mode: 0o644, Size: int64(len(data)), ModTime: now}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: exportPayload, Mode: 0o644, Size: m.Size, ModTime: now}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, m.Size); err != nil {
		return err
	}
	return tw.Close()
}

// ErrBadImport marks an exported image that is not one or was altered:
// the caller's input, refused.
var ErrBadImport = errors.New("not a valid exported image")

// ImportImage verifies an exported image read from r and installs it. It
// returns its manifest. Nothing is left behind when it fails.
func ImportImage(r io.Reader) (*Manifest, error) {
	tr := tar.NewReader(r)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != exportManifest || hdr.Size > maxManifest {
		return nil, fmt.Errorf("%w: no %s first", ErrBadImport, exportManifest)
	}
	data, err := io.ReadAll(io.LimitReader(tr, maxManifest))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadImport, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrBadImport, err)
	}
	if !ValidImageName(m.Name) || len(m.SHA256) != 64 || m.Size <= 0 || m.Size > maxPayload {
		return nil, fmt.Errorf("%w: manifest without a valid name, sha256 and size", ErrBadImport)
	}
	hdr, err = tr.Next()
	if err != nil || hdr.Name != exportPayload {
		return nil, fmt.Errorf("%w: no %s after the manifest", ErrBadImport, exportPayload)
	}
	if hdr.Size != m.Size {
		return nil, fmt.Errorf("%w: the image has %d bytes, its manifest says %d", ErrBadImport, hdr.Size, m.Size)
	}
	if err := os.MkdirAll(ImagesDir(), 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(ImagesDir(), "."+m.Name+".import-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name()) // renamed away when installed
	h := sha256.New()
	_, err = io.CopyN(io.MultiWriter(tmp, h), tr, m.Size)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("%w: the image is cut short", ErrBadImport)
	}
	if err != nil {
		return nil, err
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != m.SHA256 {
		return nil, fmt.Errorf("%w: its sha256 is %s, its manifest says %s: the file was altered or damaged", ErrBadImport, sum, m.SHA256)
	}
	if !IsSquashfs(tmp.Name()) {
		return nil, fmt.Errorf("%w: the payload is not a squashfs image", ErrBadImport)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return nil, err
	}
	if err := InstallImage(&m, tmp.Name()); err != nil {
		return nil, fmt.Errorf("install image %s: %w", m.Name, err)
	}
	return &m, nil
}

// ImportFile imports the exported image in file path.
func ImportFile(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadImport, err)
	}
	defer f.Close()
	m, err := ImportImage(f)
	if err != nil && errors.Is(err, ErrBadImport) {
		return nil, fmt.Errorf("import %s: %w", filepath.Base(path), err)
	}
	return m, err
}
