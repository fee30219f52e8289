package langs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTemplateParse(t *testing.T) {
	good := `{"name": "t1", "packages": ["jq"], "files": {"/usr/local/bin/x": "x"}, "setup": ["true"]}`
	tp, err := parseTemplate([]byte(good), "good.json")
	if err != nil || tp.Suite != DefaultSuite || tp.Origin != "good.json" {
		t.Fatalf("%+v %v", tp, err)
	}
	for body, field := range map[string]string{
		`{"name": "T"}`:                                       "name",
		`{"name": "t", "packages": ["jq;rm"]}`:                "packages",
		`{"name": "t", "files": {"/etc/x": "x"}}`:             "files",
		`{"name": "t", "files": {"/usr/../etc/x": "x"}}`:      "files",
		`{"name": "t", "files": {"/usr": "x"}}`:               "files",
		`{"name": "t", "setup": [" "]}`:                       "setup",
		`{"name": "t"}`:                                       "no packages",
		`{"name": "t", "suite": "a b", "packages": ["jq"]}`:   "suite",
		`{"name": "t", "packages": ["jq"], "from": "debian"}`: "from",
	} {
		if _, err := parseTemplate([]byte(body), "f.json"); err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "f.json") {
			t.Errorf("%s: %v, want an error naming %s and the file", body, err, field)
		}
	}
}

// The hash changes with what the image is made of, and only with it.
func TestTemplateImageHash(t *testing.T) {
	parse := func(body string) *Template {
		tp, err := parseTemplate([]byte(body), "x")
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	base := parse(`{"name": "t", "title": "one", "packages": ["jq"], "files": {"/usr/a": "1"}}`)
	same := parse(`{"name": "t", "title": "two", "packages": ["jq"], "files": {"/usr/a": "1"}}`)
	if base.ImageHash("1") != same.ImageHash("1") {
		t.Error("the title changed the hash")
	}
	for _, other := range []*Template{
		parse(`{"name": "t", "packages": ["jq"], "files": {"/usr/a": "2"}}`),
		parse(`{"name": "t", "packages": ["jq", "bc"], "files": {"/usr/a": "1"}}`),
		parse(`{"name": "t", "packages": ["jq"], "files": {"/usr/a": "1"}, "setup": ["true"]}`),
		parse(`{"name": "t", "suite": "forky", "packages": ["jq"], "files": {"/usr/a": "1"}}`),
	} {
		if other.ImageHash("1") == base.ImageHash("1") {
			t.Errorf("%+v: same hash as %+v", other, base)
		}
	}
	if base.ImageHash("2") == base.ImageHash("1") {
		t.Error("the builder's version did not change the hash")
	}
}

func TestFindTemplate(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("ISOLATE_TEMPLATES_DIR", dir)
	os.WriteFile(filepath.Join(dir, "a.json"), []byte(`{"name": "tpl-a", "packages": ["jq"]}`), 0o644)
	if tp, err := FindTemplate("tpl-a"); err != nil || tp.Name != "tpl-a" {
		t.Errorf("by name: %+v %v", tp, err)
	}
	if tp, err := FindTemplate(filepath.Join(dir, "a.json")); err != nil || tp.Name != "tpl-a" {
		t.Errorf("by file: %+v %v", tp, err)
	}
	if _, err := FindTemplate("tpl-b"); err == nil || !strings.Contains(err.Error(), "tpl-a") {
		t.Errorf("unknown: %v", err)
	}
}

// The built-in languages' memory rules where rlimits alone enforce the
// limits; a bad rule is an error naming the field.
func TestRlimitMemoryRules(t *testing.T) {
	t.Setenv("ISOLATE_LANGS_DIR", t.TempDir())
	all, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"c": "", "cpp": "", "python": "", "rust": "", "go": "data", "javascript": "data", "java": "data"}
	for _, l := range all {
		if l.RlimitMemory != want[l.Name] {
			t.Errorf("%s: rlimit_memory %q, want %q", l.Name, l.RlimitMemory, want[l.Name])
		}
	}
	def := `{"name": "x", "packages": ["x"], "version": ["x"], "source": "x", "run": ["x"], %s}`
	for _, extra := range []string{`"rlimit_memory": "rss"`, `"rlimit_memory": "data", "rlimit_memory_factor": 0.5`, `"rlimit_memory_factor": 100`} {
		if _, err := parse([]byte(strings.Replace(def, "%s", extra, 1)), "x.json"); err == nil || !strings.Contains(err.Error(), "rlimit_memory") {
			t.Errorf("%s: %v", extra, err)
		}
	}
}
