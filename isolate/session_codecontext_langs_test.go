package isolate_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/codecontext"
)

func newContextOf(t *testing.T, s *isolate.Session, language string) *codecontext.CodeContext {
	t.Helper()
	c, err := s.NewCodeContext(language)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A JavaScript context in the javascript image keeps its globals and
// bindings across calls, answers the last expression's value as
// util.inspect shows it, names an exception, and is interrupted at its
// call's end, its state kept.
func TestCodeContextJavaScript(t *testing.T) {
	needRoot(t)
	s, err := newHost(t).StartSession(context.Background(), &api.Spec{Lang: "javascript"})
	if err != nil {
		t.Skipf("no javascript session: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	c := newContextOf(t, s, "js")
	if c.Language() != "javascript" {
		t.Errorf("language %q", c.Language())
	}
	if ex := runCode(t, c, "let x = 20; var y = 1; function f(a) { return a * 2 }"); ex.Result != nil || ex.Error != nil {
		t.Fatalf("declarations: %+v %+v", ex, ex.Error)
	}
	ex := runCode(t, c, "console.log('hi', {a: 1}); console.error('e'); process.stdout.write('raw\\n'); f(x) + y")
	if resultOf(ex) != "41" || ex.Stdout != "hi { a: 1 }\nraw\n" || ex.Stderr != "e\n" || ex.ExecutionCount != 2 || ex.Error != nil {
		t.Fatalf("%+v %+v", ex, ex.Error)
	}
	if ex := runCode(t, c, "({s: 'text', n: [1, 2]})"); resultOf(ex) != "{ s: 'text', n: [ 1, 2 ] }" {
		t.Errorf("an object: %+v", ex)
	}
	if ex := runCode(t, c, "new Promise(r => setTimeout(() => r(x + 1), 10))"); resultOf(ex) != "21" {
		t.Errorf("a promise: %+v %+v", ex, ex.Error)
	}
	// Top-level await, its declarations global as Node's REPL keeps them.
	if ex := runCode(t, c, "const wait = (v) => new Promise(r => setTimeout(() => r(v), 10));\nlet got = await wait(x * 2);\nconst {a, b} = await wait({a: 1, b: 2});\nconsole.log('awaited', got);\ngot + a + b"); resultOf(ex) != "43" || ex.Stdout != "awaited 40\n" || ex.Error != nil {
		t.Errorf("top-level await: %+v %+v", ex, ex.Error)
	}
	if ex := runCode(t, c, "[got, a, b, await wait('later')]"); resultOf(ex) != "[ 40, 1, 2, 'later' ]" {
		t.Errorf("after top-level await: %+v %+v", ex, ex.Error)
	}
	if ex := runCode(t, c, "await Promise.reject(new RangeError('no'))"); ex.Error == nil || ex.Error.Name != "RangeError" || ex.Error.Value != "no" {
		t.Errorf("a rejection awaited at the top level: %+v %+v", ex, ex.Error)
	}
	if ex := runCode(t, c, "await ("); ex.Error == nil || ex.Error.Name != "SyntaxError" {
		t.Errorf("await that does not parse: %+v %+v", ex, ex.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	ex, err = c.Run(ctx, "await new Promise(() => {})", nil, nil)
	cancel()
	if err != nil || ex.Error == nil || ex.Error.Name != "Interrupted" || ex.Restarted {
		t.Errorf("an await past the call's bound: %+v %v", ex, err)
	}
	if ex := runCode(t, c, "require('fs').writeFileSync('/box/made', 'by js'); require('child_process').execSync('cat /box/made').toString()"); resultOf(ex) != "'by js'" {
		t.Errorf("require: %+v %+v", ex, ex.Error)
	}
	// A child writing to the descriptors it inherits writes beside the
	// frames, never among them.
	if ex := runCode(t, c, "require('child_process').execSync('echo beside; echo more >&2', {stdio: 'inherit'}); 'kept'"); resultOf(ex) != "'kept'" || ex.Error != nil {
		t.Errorf("a child's inherited output: %+v %+v", ex, ex.Error)
	}
	ex = runCode(t, c, "function g() { throw new TypeError('bad ' + x) }\ng()")
	if ex.Error == nil || ex.Error.Name != "TypeError" || ex.Error.Value != "bad 20" || !strings.Contains(ex.Error.Traceback, "<cell 12>") || strings.Contains(ex.Error.Traceback, "[eval]") {
		t.Errorf("an exception: %+v %+v", ex, ex.Error)
	}
	if ex := runCode(t, c, "throw 42"); ex.Error == nil || ex.Error.Value != "42" {
		t.Errorf("a thrown value: %+v %+v", ex, ex.Error)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ex, err = c.Run(ctx, "for (;;) {}", nil, nil)
	if err != nil || ex.Error == nil || ex.Error.Name != "Interrupted" || ex.Restarted {
		t.Fatalf("a loop past its bound: %+v %v", ex, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ex, err = c.Run(ctx, "new Promise(() => {})", nil, nil)
	if err != nil || ex.Error == nil || ex.Error.Name != "Interrupted" {
		t.Fatalf("a promise past its bound: %+v %v", ex, err)
	}
	if ex := runCode(t, c, "x"); resultOf(ex) != "20" || ex.Restarted {
		t.Errorf("after the interrupts: %+v", ex)
	}
	if ex := runCode(t, c, "process.exit(4)"); ex.Error == nil || ex.Error.Name != codecontext.ErrorContextDied || !strings.HasPrefix(ex.Error.Value, "exited with code 4") {
		t.Errorf("process.exit: %+v %+v", ex, ex.Error)
	}
	if ex := runCode(t, c, "typeof x"); resultOf(ex) != "'undefined'" || !ex.Restarted {
		t.Errorf("after the exit: %+v", ex)
	}
}

// A Bash context keeps its variables, functions and working directory
// across calls; a non-zero status is the call's error; the call's end
// interrupts the command running.
func TestCodeContextBash(t *testing.T) {
	needRoot(t)
	s := startSession(t, newHost(t), &api.Spec{})
	c := newContextOf(t, s, "bash")
	if ex := runCode(t, c, "X=5; greet() { echo \"hi $1\"; }\ncd /tmp"); ex.Error != nil || ex.Result != nil {
		t.Fatalf("%+v %+v", ex, ex.Error)
	}
	ex := runCode(t, c, "greet $X; pwd; echo err >&2")
	if ex.Stdout != "hi 5\n/tmp\n" || ex.Stderr != "err\n" || ex.Error != nil || ex.ExecutionCount != 2 {
		t.Fatalf("%+v %+v", ex, ex.Error)
	}
	if ex := runCode(t, c, "echo before; false"); ex.Stdout != "before\n" || ex.Error == nil || ex.Error.Name != "ExitStatus" || ex.Error.Value != "exit status 1" {
		t.Errorf("a failing command: %+v %+v", ex, ex.Error)
	}
	if ex := runCode(t, c, "if then"); ex.Error == nil || !strings.Contains(ex.Stderr, "syntax error") {
		t.Errorf("a syntax error: %+v %+v", ex, ex.Error)
	}
	// The call's own env and cwd, for that call only.
	ex, err := c.Run(codecontext.WithCallOptions(context.Background(), codecontext.CallOptions{Env: []string{"X=call", "NEW=a b"}, Cwd: "/box"}),
		"echo \"$X $NEW\"; pwd", nil, nil)
	if err != nil || ex.Stdout != "call a b\n/box\n" {
		t.Errorf("with call options: %+v %v", ex, err)
	}
	if ex := runCode(t, c, "echo \"$X ${NEW-unset}\"; pwd"); ex.Stdout != "5 unset\n/tmp\n" {
		t.Errorf("after the call options: %+v", ex)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ex, err = c.Run(ctx, "echo start; sleep 60; echo after", nil, nil)
	if err != nil || ex.Error == nil || ex.Error.Name != "Interrupted" || ex.Restarted || !strings.HasPrefix(ex.Stdout, "start\n") {
		t.Fatalf("a command past its bound: %+v %v", ex, err)
	}
	if ex := runCode(t, c, "echo $X"); ex.Stdout != "5\n" || ex.Restarted {
		t.Errorf("after the interrupt: %+v", ex)
	}
	// A loop of builtins, in a function of the code's own.
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ex, err = c.Run(ctx, "spin() { while :; do :; done; }\nspin\nspin\necho after", nil, nil)
	if err != nil || ex.Error == nil || ex.Error.Name != "Interrupted" || ex.Restarted || strings.Contains(ex.Stdout, "after") {
		t.Fatalf("a loop past its bound: %+v %v", ex, err)
	}
	if ex := runCode(t, c, "echo $X"); ex.Stdout != "5\n" || ex.Restarted {
		t.Errorf("after the loop's interrupt: %+v", ex)
	}
	if _, err := c.Run(context.Background(), "echo \x00", nil, nil); !isFieldError(err, "code") {
		t.Errorf("a NUL byte: %v", err)
	}
	if ex := runCode(t, c, "exit 3"); ex.Error == nil || ex.Error.Name != codecontext.ErrorContextDied || ex.Error.Value != "exited with code 3" {
		t.Errorf("exit: %+v %+v", ex, ex.Error)
	}
	if ex := runCode(t, c, "echo ${X-gone}"); ex.Stdout != "gone\n" || !ex.Restarted {
		t.Errorf("after the exit: %+v", ex)
	}
}

func TestCodeLanguage(t *testing.T) {
	for in, want := range map[string]string{"": "python", "python": "python", "js": "javascript", "node": "javascript", "javascript": "javascript", "bash": "bash", "sh": "bash", "python-data": "python"} {
		if got, err := codecontext.CodeLanguage(in); got != want || err != nil {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	if _, err := codecontext.CodeLanguage("cobol"); !isFieldError(err, "language") {
		t.Errorf("cobol: %v", err)
	}
}

func isFieldError(err error, field string) bool {
	var fe *api.FieldError
	return errors.As(err, &fe) && fe.Field == field
}

// In the python-data image, a chart drawn with Matplotlib comes back as a
// PNG without plt.show(); a pandas DataFrame as HTML and text.
func TestCodeContextFigure(t *testing.T) {
	needRoot(t)
	s, err := newHost(t).StartSession(context.Background(), &api.Spec{Lang: "python-data"})
	if err != nil {
		t.Fatalf("%v (build the images first: scripts/images.sh)", err)
	}
	t.Cleanup(func() { s.Close() })
	c := newContextOf(t, s, "python-data")
	ex := runCode(t, c, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('chart')\nprint('drawn')")
	if ex.Error != nil || ex.Stdout != "drawn\n" || len(ex.Results) != 1 {
		t.Fatalf("%+v %+v", ex, ex.Error)
	}
	png, err := base64.StdEncoding.DecodeString(ex.Results[0].PNG)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 1000 || ex.Results[0].IsMainResult {
		t.Fatalf("the figure: %d bytes, %v, %+v", len(png), err, ex.Results[0].Text)
	}
	// Shown once: the figure was closed.
	if ex := runCode(t, c, "len(plt.get_fignums())"); resultOf(ex) != "0" || len(ex.Results) != 1 {
		t.Errorf("the next call: %+v", ex)
	}
	ex = runCode(t, c, "import pandas as pd\npd.DataFrame({'a': [1, 2]})")
	if len(ex.Results) != 1 || !strings.Contains(ex.Results[0].HTML, "<table") || !strings.Contains(ex.Results[0].Text, "a") {
		t.Errorf("a DataFrame: %+v", ex.Results)
	}
}
