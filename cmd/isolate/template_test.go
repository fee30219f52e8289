package main

// Tests of templates: an image built from a user's definition (packages,
// files, setup) into the images directory, run on by name, listed with
// its kind, exported, removed and imported again.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
)

// tinyTemplate installs jq (not in the minimal base), writes a file and
// runs a setup command that uses both.
const tinyTemplate = `{
  "name": "tpl-jq",
  "title": "jq and a greeting",
  "packages": ["jq"],
  "files": {"/usr/local/share/tpl/greeting.json": "{\"greeting\": \"hello from a template\"}\n"},
  "setup": ["jq -r .greeting /usr/local/share/tpl/greeting.json > /usr/local/share/tpl/setup-ran"]
}
`

// jqLang runs a jq program; its image is a template's.
const jqLang = `{
  "name": "jqlang",
  "title": "jq",
  "packages": ["jq"],
  "version": ["jq", "--version"],
  "source": "prog.jq",
  "run": ["jq", "-f", "prog.jq"]
}
`

func TestTemplateBuildRunExportImportRemove(t *testing.T) {
	needRoot(t)
	images, _ := withImagesDir(t)
	tpls := shareDir(t)
	t.Setenv("ISOLATE_TEMPLATES_DIR", tpls)
	if err := os.WriteFile(filepath.Join(tpls, "tpl-jq.json"), []byte(tinyTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	res := isolateCmd(t, "", "image", "build", "--template", "tpl-jq")
	if res.Code != 0 {
		t.Fatalf("image build --template tpl-jq: exit %d\n%s", res.Code, res.Stderr)
	}
	m := readManifest(t, filepath.Join(images, "tpl-jq.json"))
	if m.Kind != "template" || m.Installed["jq"] == "" || m.DefinitionHash == "" {
		t.Errorf("manifest: %+v", m)
	}
	// Unchanged: not built again, by name or by file.
	res = isolateCmd(t, "", "image", "build", "--template", filepath.Join(tpls, "tpl-jq.json"))
	if again := readManifest(t, filepath.Join(images, "tpl-jq.json")); res.Code != 0 || again.BuiltAt != m.BuiltAt {
		t.Errorf("second build: exit %d, built at %v (first %v)\n%s", res.Code, again.BuiltAt, m.BuiltAt, res.Stderr)
	}

	runOn := func(what string) {
		t.Helper()
		rep, _ := runBox(t, "--image", "tpl-jq", "--", "/bin/sh", "-c",
			`echo '{"a": 41}' | jq .a+1; cat /usr/local/share/tpl/setup-ran; stat -c %a /usr/local/share/tpl/greeting.json; id -un`)
		expectStatus(t, rep, isolate.StatusOK)
		if want := "42\nhello from a template\n644\nbox\n"; rep.Stdout != want || rep.Sandbox.Image != "tpl-jq" {
			t.Errorf("%s: stdout %q (image %q), want %q", what, rep.Stdout, rep.Sandbox.Image, want)
		}
		checkNoImageLeaks(t)
	}
	runOn("built")

	// A caller of the service who is not root (a socket-group member)
	// runs on the template by name: a run, and a session.
	b := newBoundary(t)
	code, answer := b.api(t, memberAPI, memberUID, "POST", "/v1/run",
		`{"commands": [{"image": "tpl-jq", "args": ["/bin/sh", "-c", "echo '{\"a\": 1}' | jq .a+1"]}]}`)
	if code != 200 || !strings.Contains(answer, `"stdout":"2\n"`) {
		t.Errorf("a member's run on the template: %d %s", code, answer)
	}
	code, answer = b.api(t, memberAPI, memberUID, "POST", "/v1/sessions", `{"image": "tpl-jq"}`)
	var sess struct{ ID string }
	if json.Unmarshal([]byte(answer), &sess); code != 201 || sess.ID == "" {
		t.Fatalf("a member's session on the template: %d %s", code, answer)
	}
	code, answer = b.api(t, memberAPI, memberUID, "POST", "/v1/sessions/"+sess.ID+"/commands",
		`{"args": ["/bin/sh", "-c", "jq -r .greeting /usr/local/share/tpl/greeting.json"]}`)
	if code != 200 || !strings.Contains(answer, `"stdout":"hello from a template\n"`) {
		t.Errorf("a command in a member's session on the template: %d %s", code, answer)
	}
	if code, answer = b.api(t, memberAPI, memberUID, "DELETE", "/v1/sessions/"+sess.ID, ""); code != 204 {
		t.Errorf("the session's end: %d %s", code, answer)
	}

	// exec: a language's commands on the template's image (the
	// language's own image is never built here).
	defs := os.Getenv("ISOLATE_LANGS_DIR")
	if err := os.WriteFile(filepath.Join(defs, "jqlang.json"), []byte(jqLang), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := shareDir(t)
	src, in := filepath.Join(dir, "prog.jq"), filepath.Join(dir, "in.json")
	os.WriteFile(src, []byte(".a + 1\n"), 0o644)
	os.WriteFile(in, []byte(`{"a": 1}`), 0o644)
	res = isolateCmd(t, "", "exec", "--lang", "jqlang", "--image", "tpl-jq", "--stdin", in, src)
	if res.Code != 0 || res.Stdout != "2\n" {
		t.Errorf("exec --lang jqlang --image tpl-jq: exit %d, stdout %q, stderr %q", res.Code, res.Stdout, res.Stderr)
	}
	checkNoImageLeaks(t)

	res = isolateCmd(t, "", "image", "list")
	table, _, _ := strings.Cut(res.Stdout, "\n\n")
	if lines := strings.Split(table, "\n"); res.Code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "IMAGE") ||
		!strings.Contains(lines[0], "KIND") || !strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "tpl-jq template ") {
		t.Errorf("image list: exit %d\n%s", res.Code, res.Stdout)
	}

	file := filepath.Join(shareDir(t), "tpl-jq.img")
	if res = isolateCmd(t, "", "image", "export", "tpl-jq", file); res.Code != 0 {
		t.Fatalf("image export: exit %d\n%s", res.Code, res.Stderr)
	}
	if res = isolateCmd(t, "", "image", "rm", "tpl-jq"); res.Code != 0 {
		t.Fatalf("image rm: exit %d\n%s", res.Code, res.Stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(images, "tpl-jq*")); len(left) != 0 {
		t.Errorf("left after rm: %v", left)
	}
	res = isolateCmd(t, "", "run", "--image", "tpl-jq", "--", "/bin/true")
	if res.Code != 2 || !strings.Contains(res.Stderr, "not built") {
		t.Errorf("run on a removed template: exit %d, %q", res.Code, res.Stderr)
	}
	if res = isolateCmd(t, "", "image", "import", file); res.Code != 0 {
		t.Fatalf("image import: exit %d\n%s", res.Code, res.Stderr)
	}
	if back := readManifest(t, filepath.Join(images, "tpl-jq.json")); back.Kind != "template" || back.SHA256 != m.SHA256 {
		t.Errorf("imported manifest: %+v", back)
	}
	runOn("imported")
	if res = isolateCmd(t, "", "image", "rm", "tpl-jq"); res.Code != 0 {
		t.Fatalf("image rm after import: exit %d\n%s", res.Code, res.Stderr)
	}
	checkNoImageLeaks(t)
}

// A bad template is one error naming its field (or file), exit 2, and
// nothing built.
func TestTemplateUsageErrors(t *testing.T) {
	needRoot(t)
	images, _ := withImagesDir(t)
	tpls := shareDir(t)
	t.Setenv("ISOLATE_TEMPLATES_DIR", tpls)
	write := func(name, body string) string {
		p := filepath.Join(tpls, name+".json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	res := isolateCmd(t, "", "image", "build", "--template", "no-such")
	if res.Code != 2 || !strings.Contains(res.Stderr, "unknown template") {
		t.Errorf("unknown template: exit %d, stderr %q", res.Code, res.Stderr)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--template", write("relpath", `{"name": "relpath", "files": {"usr/x": "x"}}`)}, "files"},
		{[]string{"--template", write("etcfile", `{"name": "etcfile", "files": {"/etc/x": "x"}}`)}, "under /usr"},
		{[]string{"--template", write("badpkg", `{"name": "badpkg", "packages": ["Not A Package"]}`)}, "packages"},
		{[]string{"--template", write("unknown", `{"name": "unknown", "dockerfile": "FROM x"}`)}, "dockerfile"},
		{[]string{"--template", write("empty", `{"name": "empty"}`)}, "no packages"},
		{[]string{"--template", write("python", `{"name": "python", "packages": ["jq"]}`)}, "language python"},
		{[]string{"--template", "x", "c"}, "not several"},
	}
	for _, c := range cases {
		res = isolateCmd(t, "", append([]string{"image", "build"}, c.args...)...)
		lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
		if res.Code != 2 || len(lines) != 1 || !strings.Contains(lines[0], c.want) {
			t.Errorf("%v: exit %d, stderr %q: want 2 and one line with %q", c.args, res.Code, res.Stderr, c.want)
		}
	}
	if left, _ := os.ReadDir(images); len(left) != 0 {
		t.Errorf("left in the images directory: %v", left)
	}
}
