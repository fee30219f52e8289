package imagebuild

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Images are built from the Debian mirror this machine's apt already uses:
// never from a host written into isolate. aptSource is one "deb" entry of
// the apt configuration.
type aptSource struct {
	URI    string
	Suites []string
}

// AptSourcesDir and AptSourcesList are the apt configuration read for the
// mirror (variables so that tests can point them elsewhere).
var (
	AptSourcesList = "/etc/apt/sources.list"
	AptSourcesDir  = "/etc/apt/sources.list.d"
	OSRelease      = "/etc/os-release"
)

// readAptSources parses the one-line (sources.list, *.list) and deb822
// (*.sources) formats, keeping enabled "deb" entries.
func readAptSources() ([]aptSource, error) {
	var out []aptSource
	if data, err := os.ReadFile(AptSourcesList); err == nil {
		out = append(out, parseOneLine(string(data))...)
	}
	lists, _ := filepath.Glob(filepath.Join(AptSourcesDir, "*.list"))
	for _, p := range lists {
		if data, err := os.ReadFile(p); err == nil {
			out = append(out, parseOneLine(string(data))...)
		}
	}
	sources, _ := filepath.Glob(filepath.Join(AptSourcesDir, "*.sources"))
	for _, p := range sources {
		if data, err := os.ReadFile(p); err == nil {
			out = append(out, parseDeb822(string(data))...)
		}
	}
	return out, nil
}

// parseOneLine reads "deb [options] URI SUITE COMPONENT..." lines.
func parseOneLine(text string) []aptSource {
	var out []aptSource
	for _, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			// Options: "[arch=amd64 signed-by=...]", possibly split.
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) == 0 {
				continue
			}
			f = f[1:]
		}
		if len(f) < 2 {
			continue
		}
		out = append(out, aptSource{URI: f[0], Suites: []string{f[1]}})
	}
	return out
}

// parseDeb822 reads stanzas of "Types:", "URIs:", "Suites:", "Enabled:".
func parseDeb822(text string) []aptSource {
	var out []aptSource
	fields := map[string]string{}
	flush := func() {
		defer func() { fields = map[string]string{} }()
		if strings.EqualFold(fields["enabled"], "no") || !hasWord(fields["types"], "deb") {
			return
		}
		for _, uri := range strings.Fields(fields["uris"]) {
			out = append(out, aptSource{URI: uri, Suites: strings.Fields(fields["suites"])})
		}
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	last := ""
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if (line[0] == ' ' || line[0] == '\t') && last != "" {
			fields[last] += " " + strings.TrimSpace(line) // continuation
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		last = strings.ToLower(strings.TrimSpace(k))
		fields[last] = strings.TrimSpace(v)
	}
	flush()
	return out
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// hostCodename is the Debian codename of this machine, from os-release.
func hostCodename() (id, codename string) {
	data, err := os.ReadFile(OSRelease)
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, "=")
		v = strings.Trim(v, `"`)
		switch k {
		case "ID":
			id = v
		case "VERSION_CODENAME":
			codename = v
		}
	}
	return id, codename
}

// Mirrors says where an image's packages come from: the archive
// (debootstrap's mirror) and the suites' apt lines for the image.
type Mirrors struct {
	Archive string
	// Lines are the image's sources.list: the archive, and the updates
	// and security suites where the host has them.
	Lines []string
}

// FindMirrors maps this machine's apt configuration onto suite: each entry
// of the host's own Debian release (CODENAME, CODENAME-updates,
// CODENAME-security) becomes the same entry for suite. override, when set,
// is the archive to use instead (with suite and suite-updates).
func FindMirrors(suite, override string) (*Mirrors, error) {
	if override != "" {
		return &Mirrors{Archive: override, Lines: []string{
			"deb " + override + " " + suite + " main",
			"deb " + override + " " + suite + "-updates main",
		}}, nil
	}
	id, codename := hostCodename()
	if id != "debian" || codename == "" {
		return nil, fmt.Errorf("this machine is not Debian (%s %s): pass --mirror with a Debian archive URL", id, codename)
	}
	sources, err := readAptSources()
	if err != nil {
		return nil, err
	}
	m := &Mirrors{}
	seen := map[string]bool{}
	for _, s := range sources {
		for _, su := range s.Suites {
			rest, ok := strings.CutPrefix(su, codename)
			if !ok || (rest != "" && rest != "-updates" && rest != "-security") {
				continue
			}
			line := "deb " + s.URI + " " + suite + rest + " main"
			if !seen[line] {
				seen[line] = true
				m.Lines = append(m.Lines, line)
			}
			if rest == "" && m.Archive == "" {
				m.Archive = s.URI
			}
		}
	}
	if m.Archive == "" {
		return nil, errors.New("no Debian archive for " + codename + " in " + AptSourcesList + " or " + AptSourcesDir + ": pass --mirror")
	}
	return m, nil
}
