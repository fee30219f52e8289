package main

// Tests of `isolate exec` in every language's built image: the sum of two
// numbers, a runtime error, a compile error, an endless loop. The images
// must be built first (scripts/images.sh, which CI runs before the tests).

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// Box ids of these tests: 400-499.
const execFirstBox = 400

// langCase is one language's test programs.
type langCase struct {
	lang string
	file string // the source's name on the host (exec renames it)
	sum  string // reads two numbers, prints their sum
	re   string // fails at run time with a non-zero exit status
	reIs string // what its standard error says
	ce   string // does not compile
	ceIs string // what the compiler says
	loop string // never ends
}

var langCases = []langCase{
	{
		lang: "c", file: "sum.c",
		sum:  "#include <stdio.h>\nint main(void){long a,b;if(scanf(\"%ld %ld\",&a,&b)!=2)return 1;printf(\"%ld\\n\",a+b);return 0;}\n",
		re:   "#include <stdio.h>\n#include <stdlib.h>\nint main(void){fprintf(stderr,\"boom\\n\");exit(3);}\n",
		reIs: "boom", ce: "int main(void){ return undeclared; }\n", ceIs: "undeclared",
		loop: "int main(void){volatile unsigned long i=0;for(;;)i++;}\n",
	},
	{
		lang: "cpp", file: "sum.cc",
		sum:  "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n",
		re:   "#include <iostream>\n#include <cstdlib>\nint main(){std::cerr<<\"boom\"<<std::endl;std::exit(3);}\n",
		reIs: "boom", ce: "#include <vector>\nint main(){ std::vector<int> v = 1; }\n", ceIs: "error",
		loop: "int main(){volatile unsigned long i=0;for(;;)i++;}\n",
	},
	{
		lang: "go", file: "sum.go",
		sum:  "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tvar a, b int64\n\tfmt.Scan(&a, &b)\n\tfmt.Println(a + b)\n}\n",
		re:   "package main\n\nfunc main() {\n\tpanic(\"boom\")\n}\n",
		reIs: "panic: boom", ce: "package main\n\nfunc main() {\n\tx :=\n}\n", ceIs: "syntax error",
		loop: "package main\n\nfunc main() {\n\tfor {\n\t}\n}\n",
	},
	{
		lang: "python", file: "sum.py",
		sum:  "a, b = map(int, input().split())\nprint(a + b)\n",
		re:   "raise ValueError('boom')\n",
		reIs: "ValueError: boom", ce: "print('a'\n", ceIs: "SyntaxError",
		loop: "while True:\n    pass\n",
	},
	{
		// Python with Debian's NumPy, pandas and Matplotlib.
		lang: "python-data", file: "sum.py",
		sum:  "import numpy as np\nprint(int(np.array(input().split(), dtype=np.int64).sum()))\n",
		re:   "import pandas\nraise ValueError('boom')\n",
		reIs: "ValueError: boom", ce: "print('a'\n", ceIs: "SyntaxError",
		loop: "while True:\n    pass\n",
	},
	{
		lang: "javascript", file: "sum.js",
		sum:  "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(BigInt);\nconsole.log((a + b).toString());\n",
		re:   "throw new Error('boom');\n",
		reIs: "Error: boom", ce: "let x = ;\n", ceIs: "SyntaxError",
		loop: "for (;;) {}\n",
	},
	{
		lang: "rust", file: "sum.rs",
		sum:  "use std::io::Read;\nfn main() {\n    let mut s = String::new();\n    std::io::stdin().read_to_string(&mut s).unwrap();\n    let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n    println!(\"{}\", v[0] + v[1]);\n}\n",
		re:   "fn main() {\n    panic!(\"boom\");\n}\n",
		reIs: "boom", ce: "fn main() {\n    let x: i32 = \"a\";\n}\n", ceIs: "mismatched types",
		loop: "fn main() {\n    loop {\n        std::hint::black_box(0);\n    }\n}\n",
	},
	{
		lang: "java", file: "Sum.java",
		sum:  "import java.util.Scanner;\npublic class Main {\n    public static void main(String[] args) {\n        Scanner in = new Scanner(System.in);\n        long a = in.nextLong(), b = in.nextLong();\n        System.out.println(a + b);\n    }\n}\n",
		re:   "public class Main {\n    public static void main(String[] args) {\n        throw new RuntimeException(\"boom\");\n    }\n}\n",
		reIs: "RuntimeException: boom", ce: "public class Main {\n    public static void main(String[] args) {\n        int x = \"s\";\n    }\n}\n", ceIs: "incompatible types",
		loop: "public class Main {\n    public static void main(String[] args) {\n        while (true) {}\n    }\n}\n",
	},
}

// needImage fails the test when the language's image is not built.
func needImage(t *testing.T, lang string) {
	t.Helper()
	if _, err := rootfs.LookupImage(lang); err != nil {
		t.Fatalf("%v: build the images first (scripts/images.sh)", err)
	}
}

// execSource runs `isolate exec --json` on source (written to a file
// named name) with stdin and the options, and decodes the report.
func execSource(t *testing.T, name, source, stdin string, opts ...string) (*api.ExecReport, int) {
	t.Helper()
	dir := shareDir(t)
	src := filepath.Join(dir, name)
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"exec", "--json"}, opts...)
	if stdin != "" {
		in := filepath.Join(dir, "stdin")
		if err := os.WriteFile(in, []byte(stdin), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--stdin", in)
	}
	res := isolateCmd(t, "", append(args, src)...)
	var rep api.ExecReport
	if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
		t.Fatalf("isolate %v: exit %d, no JSON report (%v)\nstdout: %s\nstderr: %s", args, res.Code, err, res.Stdout, res.Stderr)
	}
	checkNoImageLeaks(t)
	return &rep, res.Code
}

// checkNoImageLeaks fails when a loop device still holds an image: nothing
// of an exec outlives it (its /box is a detached tmpfs, on no host path). The kernel
// detaches an autoclear loop device from a workqueue after the last
// reference goes, so that part gets a moment to happen.
func checkNoImageLeaks(t *testing.T) {
	t.Helper()
	var attached []string
	start := time.Now()
	for {
		attached = attachedImages()
		if len(attached) == 0 || time.Since(start) > 5*time.Second {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if d := time.Since(start); d > 10*time.Millisecond {
		t.Logf("loop devices released after %v", d)
	}
	for _, a := range attached {
		t.Errorf("loop device still attached: %s", a)
	}
	// The image cache stays; what an unpacking or a removal works in
	// does not.
	debris, _ := filepath.Glob(filepath.Join(rootfs.TreesDir(), ".[nr][em]*-*"))
	for _, d := range debris {
		t.Errorf("image cache debris left behind: %s", d)
	}
}

// attachedImages lists the loop devices backed by a built image.
func attachedImages() []string {
	var out []string
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if strings.HasPrefix(string(data), rootfs.ImagesDir()+"/") {
			out = append(out, f+" -> "+strings.TrimSpace(string(data)))
		}
	}
	return out
}

func TestExecSumOfTwoNumbers(t *testing.T) {
	needRoot(t)
	for i, c := range langCases {
		t.Run(c.lang, func(t *testing.T) {
			needImage(t, c.lang)
			box := strconv.Itoa(execFirstBox + i)
			rep, code := execSource(t, c.file, c.sum, "2 40\n", "--lang", c.lang, "--box-id", box, "--time", "5")
			if rep.Status != isolate.StatusOK || code != 0 {
				t.Fatalf("status %s, exit %d: %+v", rep.Status, code, rep.Last())
			}
			if rep.Run.Stdout != "42\n" {
				t.Errorf("stdout %q, want \"42\\n\" (stderr %q)", rep.Run.Stdout, rep.Run.Stderr)
			}
			if rep.Run.BoxID != execFirstBox+i || rep.Run.Sandbox.Image != c.lang {
				t.Errorf("box %d image %q, want %d %q", rep.Run.BoxID, rep.Run.Sandbox.Image, execFirstBox+i, c.lang)
			}
			compiled := rep.Compile != nil
			if compiled {
				if rep.Compile.Status != isolate.StatusOK || rep.Compile.BoxID != execFirstBox+i {
					t.Errorf("compile report: %+v", rep.Compile)
				}
			}
			if want := c.lang != "python" && c.lang != "python-data" && c.lang != "javascript"; compiled != want {
				t.Errorf("compile phase ran: %v, want %v", compiled, want)
			}
		})
	}
}

func TestExecRuntimeErrorIsRE(t *testing.T) {
	needRoot(t)
	for i, c := range langCases {
		t.Run(c.lang, func(t *testing.T) {
			needImage(t, c.lang)
			rep, code := execSource(t, c.file, c.re, "", "--lang", c.lang, "--box-id", strconv.Itoa(execFirstBox+10+i))
			if rep.Status != isolate.StatusRE || code != 1 {
				t.Fatalf("status %s, exit %d, want RE and 1: %+v", rep.Status, code, rep.Last())
			}
			if rep.Run.ExitCode == 0 || !strings.Contains(rep.Run.Stderr, c.reIs) {
				t.Errorf("exit code %d, stderr %q: want non-zero and %q", rep.Run.ExitCode, rep.Run.Stderr, c.reIs)
			}
		})
	}
}

// Only a syntax error in the source itself is CE for an interpreted
// language: one raised while the program runs (here by compiling a string)
// is the program's own RE.
func TestExecPythonRunTimeSyntaxErrorIsRE(t *testing.T) {
	needRoot(t)
	needImage(t, "python")
	rep, code := execSource(t, "late.py", "print('started')\ncompile('x = (', 'late', 'exec')\n", "",
		"--lang", "python", "--box-id", strconv.Itoa(execFirstBox+45))
	if rep.Status != isolate.StatusRE || code != 1 || rep.Run == nil {
		t.Fatalf("status %s, exit %d, want RE and 1: %+v", rep.Status, code, rep.Last())
	}
	if rep.Run.Stdout != "started\n" || !strings.Contains(rep.Run.Stderr, "SyntaxError") || rep.Run.ExitCode != 1 {
		t.Errorf("stdout %q, stderr %q, exit code %d: want the program's output, its traceback, 1",
			rep.Run.Stdout, rep.Run.Stderr, rep.Run.ExitCode)
	}
}

func TestExecCompileErrorIsCE(t *testing.T) {
	needRoot(t)
	for i, c := range langCases {
		t.Run(c.lang, func(t *testing.T) {
			needImage(t, c.lang)
			rep, code := execSource(t, c.file, c.ce, "1 2\n", "--lang", c.lang, "--box-id", strconv.Itoa(execFirstBox+20+i))
			if rep.Status != isolate.StatusCE || code != 1 {
				t.Fatalf("status %s, exit %d, want CE and 1: %+v", rep.Status, code, rep.Last())
			}
			if rep.Run != nil {
				t.Errorf("a run report after a compile error: %+v", rep.Run)
			}
			if rep.Compile == nil || !strings.Contains(rep.Compile.Message, c.ceIs) {
				t.Fatalf("compile report %+v: want the compiler's message with %q", rep.Compile, c.ceIs)
			}
		})
	}
}

func TestExecEndlessLoopIsTO(t *testing.T) {
	needRoot(t)
	for i, c := range langCases {
		t.Run(c.lang, func(t *testing.T) {
			needImage(t, c.lang)
			// The wall limit is far off: on a loaded host (CI runs packages
			// in parallel) the loop may get less than a quarter of a CPU,
			// and the default 2 s would end it first.
			rep, code := execSource(t, c.file, c.loop, "", "--lang", c.lang, "--box-id", strconv.Itoa(execFirstBox+30+i), "--time", "0.5", "--wall-time", "20")
			if rep.Status != isolate.StatusTO || code != 1 {
				t.Fatalf("status %s, exit %d, want TO and 1: %+v", rep.Status, code, rep.Last())
			}
			if rep.Run.Limit != isolate.LimitCPU || rep.Run.CPUTime < 0.5 {
				t.Errorf("limit %q after %.3f s of CPU, want cpu after 0.5 s", rep.Run.Limit, rep.Run.CPUTime)
			}
		})
	}
}

func TestExecPassesArgumentsAndSummarizes(t *testing.T) {
	needRoot(t)
	needImage(t, "python")
	dir := shareDir(t)
	src := filepath.Join(dir, "args.py")
	os.WriteFile(src, []byte("import sys\nprint(' '.join(sys.argv[1:]), sys.argv[0])\n"), 0o644)
	res := isolateCmd(t, "", "exec", "--lang", "py3", "--box-id", strconv.Itoa(execFirstBox+40), src, "--", "a", "b c")
	if res.Code != 0 || res.Stdout != "a b c main.py\n" || !strings.Contains(res.Stderr, "isolate: OK") {
		t.Fatalf("exit %d, stdout %q, stderr %q", res.Code, res.Stdout, res.Stderr)
	}
	checkNoImageLeaks(t)
}

func TestExecCompileErrorWithoutJSON(t *testing.T) {
	needRoot(t)
	needImage(t, "c")
	dir := shareDir(t)
	src := filepath.Join(dir, "bad.c")
	os.WriteFile(src, []byte("int main(void){ return nope; }\n"), 0o644)
	res := isolateCmd(t, "", "exec", "--lang", "c", src)
	if res.Code != 1 || !strings.Contains(res.Stderr, "nope") || !strings.Contains(res.Stderr, "isolate: CE") {
		t.Fatalf("exit %d, stderr %q: want 1, the compiler's message and CE", res.Code, res.Stderr)
	}
	checkNoImageLeaks(t)
}

// The JVM stays under the pids and memory limits it is given: its heap and
// threads follow them (-Xmx, -XX:ActiveProcessorCount, serial GC).
func TestExecJavaUnderTightLimits(t *testing.T) {
	needRoot(t)
	needImage(t, "java")
	c := langCases[len(langCases)-1]
	rep, code := execSource(t, c.file, c.sum, "1 2\n", "--lang", "java", "--box-id", strconv.Itoa(execFirstBox+41), "--pids", "24", "--mem", "192M")
	if rep.Status != isolate.StatusOK || code != 0 || rep.Run.Stdout != "3\n" {
		t.Fatalf("status %s, exit %d: %+v", rep.Status, code, rep.Last())
	}
	if rep.Run.PidsPeak > 24 || rep.Run.MemoryPeak > 192<<20 {
		t.Errorf("pids peak %d, memory peak %d", rep.Run.PidsPeak, rep.Run.MemoryPeak)
	}
}

func TestExecUsageErrors(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	src := filepath.Join(dir, "x.c")
	os.WriteFile(src, []byte("int main(void){return 0;}\n"), 0o644)
	for _, args := range [][]string{
		{"exec", src},                          // no --lang
		{"exec", "--lang", "cobol", src},       // unknown language
		{"exec", "--lang", "c"},                // no source
		{"exec", "--lang", "c", dir + "/none"}, // missing source
		{"exec", "--lang", "c", dir},           // a directory
		{"exec", "--lang", "c", "--image", dir + "/none", src},
		{"exec", "--lang", "c", "--mem", "lots", src},
	} {
		res := isolateCmd(t, "", args...)
		lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
		if res.Code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "isolate: ") {
			t.Errorf("%v: exit %d, stderr %q: want 2 and one line", args, res.Code, res.Stderr)
		}
	}
	checkNoImageLeaks(t)
}

// BenchmarkExecOverhead compares `isolate exec` with the toolchain's own
// time: the same image's toolchain run directly (chroot into the unpacked
// image, no sandbox) on the same source, interleaved, medians reported;
// and the target: the boxes exec uses x one box's cost (`isolate run --
// /bin/true` over /bin/true, measured in the same rounds) + 3 ms.
// Run it with:
//
//	go test -tags urfave_cli_no_docs,netgo,osusergo -run '^$' -bench ExecOverhead -benchtime 40x ./cmd/isolate
func BenchmarkExecOverhead(b *testing.B) {
	cases := []struct {
		name, lang, file, source string
		boxes                    int        // boxes one exec uses
		bare                     [][]string // the toolchain's own steps, in /work of the unpacked image
	}{
		{"python-hello", "python", "hello.py", "print('hello')\n", 1, [][]string{{"python3", "hello.py"}}},
		{"c-compile-run", "c", "hello.c", "#include <stdio.h>\nint main(void){puts(\"hello\");return 0;}\n", 2,
			[][]string{{"gcc", "-std=gnu17", "-O2", "-pipe", "-o", "main", "hello.c", "-lm"}, {"./main"}}},
	}
	for _, c := range cases {
		// tree: the default (the image's unpacked tree, bound); squashfs:
		// --image FILE.sqfs, mounted for each run (the slow path).
		for _, variant := range []string{"tree", "squashfs"} {
			b.Run(c.name+"/"+variant, func(b *testing.B) {
				if _, err := rootfs.LookupImage(c.lang); err != nil {
					b.Skip(err)
				}
				var image []string
				if variant == "squashfs" {
					image = []string{"--image", rootfs.ImagePath(c.lang)}
				}
				benchExec(b, c.lang, c.file, c.source, c.boxes, image, c.bare)
			})
		}
	}
}

// benchExec times, in each round and in turn: the toolchain alone, exec,
// /bin/true alone and in a box (the price of one box, for the target).
// The first round is left out: it fills the page cache.
func benchExec(b *testing.B, lang, file, source string, boxes int, image []string, steps [][]string) {
	root := unpackImage(b, lang)
	work := filepath.Join(root, "work")
	os.MkdirAll(work, 0o777)
	os.WriteFile(filepath.Join(work, file), []byte(source), 0o644)
	src := filepath.Join(shareDir(b), file)
	os.WriteFile(src, []byte(source), 0o644)
	args := append(append([]string{"exec", "--lang", lang}, image...), src)
	var bare, sandboxed, trueBare, trueBox []time.Duration
	b.ResetTimer()
	for i := 0; i <= b.N; i++ {
		t := time.Now()
		for _, step := range steps {
			cmd := exec.Command(step[0], step[1:]...)
			if cmd.Path = step[0]; !strings.Contains(cmd.Path, "/") {
				cmd.Path = "/usr/bin/" + cmd.Path // looked up inside the image
			}
			cmd.Dir = "/work"
			cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %v\n%s", step, err, out)
			}
		}
		dBare := time.Since(t)
		t = time.Now()
		res := isolateCmd(b, "", args...)
		dExec := time.Since(t)
		if res.Code != 0 || res.Stdout != "hello\n" {
			b.Fatalf("exec: exit %d, %q %q", res.Code, res.Stdout, res.Stderr)
		}
		t = time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		dTrue := time.Since(t)
		t = time.Now()
		if res := isolateCmd(b, "", "run", "--", "/bin/true"); res.Code != 0 {
			b.Fatalf("run /bin/true: exit %d, %q", res.Code, res.Stderr)
		}
		dTrueBox := time.Since(t)
		if i == 0 {
			continue
		}
		bare, sandboxed = append(bare, dBare), append(sandboxed, dExec)
		trueBare, trueBox = append(trueBare, dTrue), append(trueBox, dTrueBox)
	}
	b.StopTimer()
	mb, ms := medianOf(bare), medianOf(sandboxed)
	box := medianOf(trueBox) - medianOf(trueBare)
	b.ReportMetric(float64(mb.Microseconds())/1000, "toolchain-ms")
	b.ReportMetric(float64(ms.Microseconds())/1000, "exec-ms")
	b.ReportMetric(float64((ms-mb).Microseconds())/1000, "overhead-ms")
	b.ReportMetric(float64(box.Microseconds())/1000, "box-ms")
	b.ReportMetric(float64((time.Duration(boxes)*box+3*time.Millisecond).Microseconds())/1000, "target-ms")
}

// unpackImage unpacks a built image into a temporary directory (removed
// with the benchmark): the toolchain without any sandbox.
func unpackImage(b *testing.B, name string) string {
	b.Helper()
	dir := filepath.Join(shareDir(b), "root")
	if out, err := exec.Command("unsquashfs", "-q", "-n", "-d", dir, rootfs.ImagePath(name)).CombinedOutput(); err != nil {
		b.Fatalf("unsquashfs: %v\n%s", err, out)
	}
	return dir
}

func medianOf(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// A caller with umask 077 and no box id: the source, the box directory and
// the compiler's output still reach the box user of either phase.
func TestExecUnderRestrictiveUmask(t *testing.T) {
	needRoot(t)
	needImage(t, "c")
	dir := shareDir(t)
	src := filepath.Join(dir, "sum.c")
	os.WriteFile(src, []byte(langCases[0].sum), 0o644)
	os.WriteFile(filepath.Join(dir, "in"), []byte("20 22\n"), 0o644)
	cmd := exec.Command("/bin/sh", "-c", `umask 077; exec "$0" exec --lang c --stdin "$1" "$2"`, isolateBin, filepath.Join(dir, "in"), src)
	out, err := cmd.Output()
	if err != nil || string(out) != "42\n" {
		t.Fatalf("exec under umask 077: %v, stdout %q", err, out)
	}
	checkNoImageLeaks(t)
}
