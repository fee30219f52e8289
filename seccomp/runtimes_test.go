package seccomp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRuntimesUnderDefaultPolicy runs what the default allow-list was sized
// for, with the host's toolchains, under the filter: compilers (gcc, g++,
// javac, rustc) as well as programs using threads, processes, sockets and
// the runtimes' event loops. Nothing may be refused. Missing toolchains
// are skipped.
func TestRuntimesUnderDefaultPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts compilers and runtimes")
	}
	p := mustCompile(t, "default")
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// run runs argv under the policy and wants exit 0, nothing refused and
	// want in the output.
	run := func(t *testing.T, want string, argv ...string) {
		t.Helper()
		res := runChild(t, p, nil, argv...)
		if res.status.ExitStatus() != 0 || len(res.blocked) != 0 || !strings.Contains(res.output, want) {
			t.Fatalf("%v: status %v, blocked %v, want %q in output:\n%s", argv, res.status, res.blocked, want, res.output)
		}
	}
	tool := func(t *testing.T, names ...string) []string {
		t.Helper()
		var paths []string
		for _, n := range names {
			path, err := exec.LookPath(n)
			if err != nil {
				t.Skipf("no %s on this host", n)
			}
			paths = append(paths, path)
		}
		return paths
	}

	t.Run("C", func(t *testing.T) {
		gcc := tool(t, "gcc")[0]
		src := write("c.c", `#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>
static void *f(void *a) { return a; }
int main(void) {
	pthread_t t; pthread_create(&t, 0, f, 0); pthread_join(t, 0);
	pid_t p = fork(); if (p == 0) _exit(0); waitpid(p, 0, 0);
	printf("c ok\n"); return 0;
}`)
		run(t, "", gcc, "-O2", "-pthread", "-o", filepath.Join(dir, "c"), src)
		run(t, "c ok", filepath.Join(dir, "c"))
	})
	t.Run("C++", func(t *testing.T) {
		gxx := tool(t, "g++")[0]
		src := write("cpp.cpp", `#include <iostream>
#include <thread>
#include <vector>
#include <future>
int main() {
	std::vector<std::thread> v; for (int i = 0; i < 4; i++) v.emplace_back([] {});
	for (auto &t : v) t.join();
	std::cout << "cpp ok " << std::async(std::launch::async, [] { return 42; }).get() << "\n";
}`)
		run(t, "", gxx, "-O2", "-pthread", "-o", filepath.Join(dir, "cpp"), src)
		run(t, "cpp ok 42", filepath.Join(dir, "cpp"))
	})
	t.Run("Go", func(t *testing.T) {
		goBin := tool(t, "go")[0]
		src := write("main.go", `package main

import (
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"sync"
	"time"
)

func main() {
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = make([]byte, 4<<20); time.Sleep(time.Millisecond) }()
	}
	wg.Wait()
	runtime.GC()
	out, err := exec.Command("/bin/echo", "child").Output()
	l, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr == nil {
		go func() { c, _ := l.Accept(); c.Write([]byte("hi")); c.Close() }()
		c, _ := net.Dial("tcp", l.Addr().String())
		b := make([]byte, 2)
		c.Read(b)
		fmt.Println("go ok", string(out[:5]), err, string(b))
	}
}
`)
		bin := filepath.Join(dir, "gobin")
		build := exec.Command(goBin, "build", "-o", bin, src)
		build.Dir = dir
		build.Env = append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		run(t, "go ok child <nil> hi", bin)
	})
	t.Run("Java", func(t *testing.T) {
		jt := tool(t, "javac", "java")
		src := write("T.java", `public class T {
	public static void main(String[] a) throws Exception {
		Thread t = new Thread(() -> {}); t.start(); t.join();
		var pool = java.util.concurrent.Executors.newFixedThreadPool(4);
		System.out.println("java ok " + pool.submit(() -> 42).get());
		pool.shutdown();
		System.gc();
	}
}`)
		// No perf data: the JVM would leave /tmp/hsperfdata_root on the host.
		run(t, "", jt[0], "-J-XX:-UsePerfData", "-d", dir, src)
		run(t, "java ok 42", jt[1], "-XX:-UsePerfData", "-Xmx256m", "-cp", dir, "T")
	})
	t.Run("Python", func(t *testing.T) {
		py := tool(t, "python3")[0]
		src := write("p.py", `import asyncio, multiprocessing, os, socket, subprocess, threading
t = threading.Thread(target=lambda: None); t.start(); t.join()
assert subprocess.run(['/bin/true']).returncode == 0
with multiprocessing.Pool(2) as p: assert p.map(abs, [-1, -2]) == [1, 2]
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); s.close()
async def f(): await asyncio.sleep(0.001); return 1
assert asyncio.run(f()) == 1 and len(os.urandom(8)) == 8
print('python ok')
`)
		run(t, "python ok", py, src)
	})
	t.Run("Node", func(t *testing.T) {
		node := tool(t, "node")[0]
		src := write("n.js", `const { Worker, isMainThread } = require('worker_threads');
const cp = require('child_process'), fs = require('fs'), http = require('http');
if (isMainThread) {
	new Worker(__filename).on('exit', async () => {
		const echoed = cp.execSync('/bin/echo hi').toString().trim();
		await fs.promises.writeFile(__filename + '.out', 'x');
		const s = http.createServer((q, r) => r.end('ok')).listen(0, '127.0.0.1', () => {
			http.get({ port: s.address().port, host: '127.0.0.1' }, r => r.on('data', d => {
				console.log('node ok', echoed, d.toString()); s.close();
			}));
		});
	});
}
`)
		run(t, "node ok hi ok", node, src)
	})
	t.Run("Rust", func(t *testing.T) {
		rustc := tool(t, "rustc")[0]
		src := write("r.rs", `use std::{process::Command, sync::mpsc, thread};
fn main() {
	let (tx, rx) = mpsc::channel();
	for i in 0..4 { let tx = tx.clone(); thread::spawn(move || tx.send(i).unwrap()); }
	drop(tx);
	let sum: i32 = rx.iter().sum();
	let st = Command::new("/bin/true").status().unwrap();
	println!("rust ok {} {}", sum, st.success());
}`)
		bin := filepath.Join(dir, "r")
		// rustc drives cc (the linker) and a jobserver: also under the policy.
		run(t, "", rustc, "-O", "-o", bin, src)
		run(t, "rust ok 6 true", bin)
	})
}
