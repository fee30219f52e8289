package rootfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// DefaultImagesDir holds the built images: NAME.sqfs (the format images
// are built, exported and imported in), its manifest NAME.json, the log of
// its last build NAME.log, and the trees runs use, trees/NAME-HASH (see
// image_tree.go). ISOLATE_IMAGES_DIR overrides it.
const DefaultImagesDir = "/var/lib/isolate/images"

// ImagesDir is where images are kept on this host.
func ImagesDir() string {
	if d := os.Getenv("ISOLATE_IMAGES_DIR"); d != "" {
		return d
	}
	return DefaultImagesDir
}

// Manifest describes a built image.
type Manifest struct {
	Name string `json:"name"`
	// Kind is "template" for an image built from a template, empty for
	// a language's.
	Kind  string `json:"kind,omitempty"`
	Suite string `json:"suite"`
	// Packages are the packages asked for; Installed every package of the
	// image with its version.
	Packages  []string          `json:"packages"`
	Installed map[string]string `json:"installed"`
	// Version is the first line the toolchain's version command printed.
	Version string `json:"version"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
	// BuildTime is how long the build took, in seconds (the shared base
	// included only when this build made it).
	BuildTime float64   `json:"build_time"`
	BuiltAt   time.Time `json:"built_at"`
	// DefinitionHash identifies what the image was built from: a build
	// with the same hash is skipped.
	DefinitionHash string `json:"definition_hash"`
}

var imageName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.+-]*$`)

// ValidImageName tells whether name can name an image.
func ValidImageName(name string) bool {
	return imageName.MatchString(name) && !strings.Contains(name, "..")
}

// ImagePath is the squashfs file of image name.
func ImagePath(name string) string { return filepath.Join(ImagesDir(), name+".sqfs") }

func manifestPath(name string) string { return filepath.Join(ImagesDir(), name+".json") }

// LookupImage returns the manifest of a built image, or an error that says
// it is not built.
func LookupImage(name string) (*Manifest, error) {
	if !ValidImageName(name) {
		return nil, fmt.Errorf("%q is not an image name", name)
	}
	data, err := os.ReadFile(manifestPath(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("image %q is not built (isolate image build %s builds a language's; a template's is built from its definition)", name, name)
	}
	if err != nil {
		return nil, fmt.Errorf("read the manifest of image %q: %w", name, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("manifest of image %q: %w", name, err)
	}
	if _, err := os.Stat(ImagePath(name)); err != nil {
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	return &m, nil
}

// ListImages returns the manifests of every built image, by name.
func ListImages() ([]*Manifest, error) {
	paths, err := filepath.Glob(filepath.Join(ImagesDir(), "*.json"))
	if err != nil {
		return nil, err
	}
	var out []*Manifest
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".json")
		if m, err := LookupImage(name); err == nil {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// RemoveImage deletes a built image: first its manifest (new runs find
// it no longer), its squashfs and log, then its trees, waiting for the runs
// that use them (waiting is told which tree first).
func RemoveImage(name string, waiting func(dir string)) error {
	if !ValidImageName(name) {
		return fmt.Errorf("%q is not an image name", name)
	}
	found := false
	os.Remove(filepath.Join(ImagesDir(), name+".log"))
	for _, p := range []string{manifestPath(name), ImagePath(name)} {
		err := os.Remove(p)
		if err == nil {
			found = true
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	if !found {
		return fmt.Errorf("image %q is not built", name)
	}
	return RemoveTrees(name, false, waiting)
}
