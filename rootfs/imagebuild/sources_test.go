package imagebuild

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The apt configuration of a Debian host, in both formats, mapped onto
// the image's suite. The URIs are placeholders, not mirrors.
func TestFindMirrorsReadsBothFormats(t *testing.T) {
	dir := t.TempDir()
	oldList, oldDir, oldOS := AptSourcesList, AptSourcesDir, OSRelease
	t.Cleanup(func() { AptSourcesList, AptSourcesDir, OSRelease = oldList, oldDir, oldOS })
	AptSourcesList = filepath.Join(dir, "sources.list")
	AptSourcesDir = filepath.Join(dir, "sources.list.d")
	OSRelease = filepath.Join(dir, "os-release")
	os.Mkdir(AptSourcesDir, 0o755)
	os.WriteFile(OSRelease, []byte("ID=debian\nVERSION_CODENAME=bookworm\n"), 0o644)
	os.WriteFile(AptSourcesList, []byte(
		"# comment\n"+
			"deb-src http://src.example/debian bookworm main\n"+
			"deb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main contrib # trailing\n"+
			"deb http://one.example/debian bookworm-backports main\n"+
			"deb http://other.example/repo stable main\n"), 0o644)
	os.WriteFile(filepath.Join(AptSourcesDir, "debian.sources"), []byte(
		"Types: deb\nURIs: http://two.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"+
			"Types: deb deb-src\n# a comment\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\n"+
			"Components: main\nSigned-By:\n /usr/share/keyrings/k.gpg\n\n"+
			"Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n"), 0o644)
	os.WriteFile(filepath.Join(AptSourcesDir, "extra.list"), []byte("deb http://three.example/debian bookworm-updates main\n"), 0o644)

	m, err := FindMirrors("trixie", "")
	if err != nil {
		t.Fatal(err)
	}
	if m.Archive != "http://one.example/debian" {
		t.Errorf("archive %q", m.Archive)
	}
	want := []string{
		"deb http://one.example/debian trixie main",
		"deb http://three.example/debian trixie-updates main",
		"deb http://two.example/debian trixie main",
		"deb http://two.example/debian trixie-updates main",
		"deb http://sec.example/debian-security trixie-security main",
	}
	if !reflect.DeepEqual(m.Lines, want) {
		t.Errorf("lines:\n%q\nwant\n%q", m.Lines, want)
	}

	m, err = FindMirrors("trixie", "http://given.example/debian")
	if err != nil || m.Archive != "http://given.example/debian" || len(m.Lines) != 2 {
		t.Errorf("override: %+v %v", m, err)
	}

	os.WriteFile(AptSourcesList, nil, 0o644)
	os.RemoveAll(AptSourcesDir)
	if _, err := FindMirrors("trixie", ""); err == nil {
		t.Error("no mirror configured, yet no error")
	}
	os.WriteFile(OSRelease, []byte("ID=ubuntu\nVERSION_CODENAME=noble\n"), 0o644)
	if _, err := FindMirrors("trixie", ""); err == nil {
		t.Error("not Debian, yet no error")
	}
}

func TestBuildHelpers(t *testing.T) {
	if got := shellQuote([]string{"a b", "it's"}); got != `'a b' 'it'\''s'` {
		t.Errorf("shellQuote: %s", got)
	}
	inst := parseInstalled("gcc\t4:14.2.0-1\nbroken line\nlibc6\t2.41-12\n")
	if len(inst) != 2 || inst["gcc"] != "4:14.2.0-1" {
		t.Errorf("parseInstalled: %v", inst)
	}
	if firstLine("\n  go version go1.24 \nmore") != "go version go1.24" {
		t.Error("firstLine")
	}
}
