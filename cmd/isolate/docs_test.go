package main

// What README.md and docs/INSTALL.md tell a reader to run, run as
// written: the blocks are read from the files themselves, and only what
// a reader brings (their program, its input) is made here first.

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// docBlock is the body of the first ```sh block after the line heading
// in the file (path relative to the repository's root).
func docBlock(t *testing.T, path, heading string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q", path, heading)
	}
	_, after, ok = strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatalf("%s: no ```sh block after %q", path, heading)
	}
	block, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatalf("%s: the block after %q does not end", path, heading)
	}
	return block
}

// README's examples ("## Examples"), line by line as a reader pastes them
// into a shell in a directory holding their own files: a program
// (solution, sol, a.out), its source (sol.c, sol.cpp), its input (in.txt)
// and a job directory. Only `isolate bench` is left out: it measures for
// a minute (cmd/isolate/benchcmd_test.go runs it).
func TestReadmeExamples(t *testing.T) {
	needRoot(t)
	needImage(t, "cpp")
	dir := shareDir(t)
	// The ioi form's box 0: in the test's own box root where it can be;
	// cleaned up however the examples end.
	root := testBoxRoot(t, filepath.Join(dir, "boxes"))
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(root, "0", "box")); err == nil {
			isolateCmd(t, "", "--box-id=0", "--cleanup")
		}
	})
	echo := "#include <stdio.h>\nint main(void){int c;while((c=getchar())!=EOF)putchar(c);puts(\"solved\");return 0;}\n"
	for _, name := range []string{"solution", "sol", "a.out"} {
		compileC(t, dir, name, echo, "-static")
	}
	files := map[string]string{
		"in.txt":     "3 4\n",
		"sol.cpp":    "#include <iostream>\nint main(){int a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n",
		"job/run.py": "import os\nprint('key', os.environ['API_KEY'])\n",
	}
	for name, text := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var script strings.Builder
	script.WriteString("set -e\n")
	sc := bufio.NewScanner(strings.NewReader(docBlock(t, "README.md", "## Examples")))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "isolate bench") {
			continue
		}
		// Each command echoed, then run: a failure names it.
		script.WriteString("echo '>>> " + strings.ReplaceAll(line, "'", `'\''`) + "' >&2\n" + line + "\n")
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(isolateBin)+":"+os.Getenv("PATH"), "API_KEY=secret")
	res := runResult(t, cmd)
	if res.Code != 0 {
		t.Fatalf("README's examples: exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
	// What the examples said they would do.
	for name, want := range map[string]string{"out.txt": "3 4\nsolved\n"} {
		if data, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(data) != want {
			t.Errorf("%s: %q %v, want %q", name, data, err, want)
		}
	}
	for _, want := range []string{`"status":"OK"`, "key secret\n", "7\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("the examples' output lacks %q:\n%s", want, res.Stdout)
		}
	}
	if meta, err := os.ReadFile(filepath.Join(dir, "meta.txt")); err != nil || !strings.Contains(string(meta), "exitcode:0") {
		t.Errorf("meta.txt: %q %v", meta, err)
	}
	// The binary the compile example copied out (over the reader's sol)
	// runs.
	if out, err := exec.Command(filepath.Join(dir, "sol")).CombinedOutput(); err != nil {
		t.Errorf("./sol copied out: %v %s", err, out)
	}
}

// The build of the package in docs/INSTALL.md stops where scripts/deps.sh
// fails, with nothing run after it and PATH unchanged; where it works,
// its Go comes first in PATH. Run as written, with stand-ins for
// deps.sh, go and dpkg-buildpackage.
func TestInstallBuildStopsWhereDepsFail(t *testing.T) {
	var line string
	for _, l := range strings.SplitAfter(docBlock(t, "docs/INSTALL.md", "Building the package (no APT repository serves it yet):"), "\n") {
		if strings.Contains(l, "scripts/deps.sh") || (line != "" && strings.HasPrefix(l, "  ")) {
			line += l
		}
	}
	if line == "" {
		t.Fatal("docs/INSTALL.md builds the package without scripts/deps.sh")
	}
	for _, depsWork := range []bool{false, true} {
		dir := t.TempDir()
		bin := filepath.Join(dir, "bin")
		godir := filepath.Join(dir, "go")
		os.MkdirAll(filepath.Join(dir, "scripts"), 0o755)
		os.MkdirAll(bin, 0o755)
		os.MkdirAll(godir, 0o755)
		deps := "#!/bin/sh\necho 'deps: no network' >&2\nexit 1\n"
		if depsWork {
			deps = "#!/bin/sh\necho " + godir + "\n"
		}
		stub := func(path, text string) {
			if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		stub(filepath.Join(dir, "scripts", "deps.sh"), deps)
		for _, name := range []string{"go", "dpkg-buildpackage"} {
			stub(filepath.Join(bin, name), "#!/bin/sh\necho \"$PATH\" > "+filepath.Join(dir, name+".ran")+"\n")
		}
		cmd := exec.Command("/bin/sh", "-c", line+"\n")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
		res := runResult(t, cmd)
		for _, name := range []string{"go", "dpkg-buildpackage"} {
			path, err := os.ReadFile(filepath.Join(dir, name+".ran"))
			switch {
			case !depsWork && err == nil:
				t.Errorf("deps.sh failed, yet %s ran (PATH %s)", name, path)
			case depsWork && (err != nil || !strings.HasPrefix(string(path), godir+":")):
				t.Errorf("deps.sh worked: %s ran %v with PATH %q, want %s first (exit %d %s)", name, err, path, godir, res.Code, res.Stderr)
			}
		}
		if !depsWork && res.Code == 0 {
			t.Error("a failed deps.sh: the build line exits 0")
		}
	}
}

// scripts/setup.sh stops where scripts/deps.sh fails: nothing is built
// with an empty entry first in PATH.
func TestSetupStopsWhereDepsFail(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "scripts"), 0o755)
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	setup, err := os.ReadFile("../../scripts/setup.sh")
	if err != nil {
		t.Fatal(err)
	}
	for path, text := range map[string]string{
		"scripts/setup.sh": string(setup),
		"scripts/deps.sh":  "#!/bin/sh\necho 'deps: no network' >&2\nexit 1\n",
		"bin/make":         "#!/bin/sh\ntouch " + filepath.Join(dir, "make.ran") + "\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, path), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(dir, "scripts", "setup.sh"))
	cmd.Env = []string{"PATH=" + filepath.Join(dir, "bin") + ":/usr/bin:/bin"}
	res := runResult(t, cmd)
	if _, err := os.Stat(filepath.Join(dir, "make.ran")); err == nil || res.Code == 0 {
		t.Errorf("setup.sh went on after deps.sh failed: exit %d %s", res.Code, res.Stderr)
	}
}

// `make build` (README's build from source) stops where scripts/deps.sh
// fails: nothing is built with an empty entry first in PATH.
func TestMakeBuildStopsWhereDepsFail(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here (scripts/deps.sh installs it)")
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "scripts"), 0o755)
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(dir, "ran")
	for path, text := range map[string]string{
		"Makefile":              string(makefile),
		"scripts/deps.sh":       "#!/bin/sh\necho 'deps: no network' >&2\nexit 1\n",
		"scripts/cgo-env.sh":    "true\n",
		"scripts/build-init.sh": "#!/bin/sh\ntouch " + ran + "\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, path), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("make", "-C", dir, "build")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	res := runResult(t, cmd)
	if _, err := os.Stat(ran); err == nil || res.Code == 0 {
		t.Errorf("make build went on after deps.sh failed: exit %d %s", res.Code, res.Stderr)
	}
}
