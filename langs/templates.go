package langs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// DefaultTemplatesDir is where a host's templates live.
const DefaultTemplatesDir = "/etc/isolate/templates.d"

// Template is an image of a user's own: a Debian suite, packages, files
// put in it and commands run in it, built like a language's image into
// the same images directory. Runs name it with --image NAME.
type Template struct {
	Name  string `json:"name"`
	Title string `json:"title,omitempty"`
	Suite string `json:"suite,omitempty"`
	// Packages are installed on top of a minimal Debian (none: the base
	// alone).
	Packages []string `json:"packages,omitempty"`
	// Files maps an absolute path under /usr (the part of an image boxes
	// see, with /bin, /lib and the like, which link into it) to its
	// content, written (mode 0644, owned by root) after the packages are
	// installed.
	Files map[string]string `json:"files,omitempty"`
	// Setup are shell commands run in the image, as root, at build time,
	// after the files are written.
	Setup []string `json:"setup,omitempty"`

	// Origin is the file the template came from.
	Origin string `json:"-"`
}

// TemplatesDir is where this host's templates are read from.
func TemplatesDir() string {
	if d := os.Getenv("ISOLATE_TEMPLATES_DIR"); d != "" {
		return d
	}
	return DefaultTemplatesDir
}

var packageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]*$`)

// ReadTemplate reads the template in file.
func ReadTemplate(file string) (*Template, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read template: %w", err)
	}
	return parseTemplate(data, file)
}

// FindTemplate returns the template called name in TemplatesDir, or, when
// name holds a slash or ends in .json, the one in that file.
func FindTemplate(name string) (*Template, error) {
	if strings.Contains(name, "/") || strings.HasSuffix(name, ".json") {
		return ReadTemplate(name)
	}
	all, err := LoadTemplates()
	if err != nil {
		return nil, err
	}
	names := []string{}
	for _, t := range all {
		if t.Name == name {
			return t, nil
		}
		names = append(names, t.Name)
	}
	return nil, fmt.Errorf("unknown template %q (in %s: %s)", name, TemplatesDir(), strings.Join(names, ", "))
}

// LoadTemplates reads every template of TemplatesDir.
func LoadTemplates() ([]*Template, error) {
	paths, _ := filepath.Glob(filepath.Join(TemplatesDir(), "*.json"))
	out := []*Template{}
	for _, p := range paths {
		t, err := ReadTemplate(p)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func parseTemplate(data []byte, origin string) (*Template, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var t Template
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("template %s: %w", origin, err)
	}
	t.Origin = origin
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("template %s: %w", origin, err)
	}
	if t.Suite == "" {
		t.Suite = DefaultSuite
	}
	return &t, nil
}

func (t *Template) check() error {
	if !nameRE.MatchString(t.Name) {
		return fmt.Errorf("name %q: lower-case letters, digits, _ + - only", t.Name)
	}
	if t.Suite != "" && !nameRE.MatchString(t.Suite) {
		return fmt.Errorf("suite %q is not a Debian suite name", t.Suite)
	}
	for _, p := range t.Packages {
		if !packageRE.MatchString(p) {
			return fmt.Errorf("packages: %q is not a Debian package name", p)
		}
	}
	for p := range t.Files {
		if !path.IsAbs(p) || path.Clean(p) != p || !strings.HasPrefix(p, "/usr/") || strings.ContainsRune(p, 0) {
			return fmt.Errorf("files: %q: a clean absolute path under /usr (the part of the image boxes see)", p)
		}
	}
	for _, s := range t.Setup {
		if strings.TrimSpace(s) == "" {
			return errors.New("setup: an empty command")
		}
	}
	if len(t.Packages) == 0 && len(t.Files) == 0 && len(t.Setup) == 0 {
		return errors.New("no packages, files or setup: the image would be the bare base")
	}
	return nil
}

// ImageHash identifies what the template's image is built from.
func (t *Template) ImageHash(builder string) string {
	h := sha256.New()
	data, _ := json.Marshal(struct {
		Builder  string
		Kind     string
		Name     string
		Suite    string
		Packages []string
		Files    map[string]string
		Setup    []string
	}{builder, "template", t.Name, t.Suite, t.Packages, t.Files, t.Setup})
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}
