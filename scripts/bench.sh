#!/bin/bash
# Benchmarks of isolate: what a run costs against a bare exec, bwrap and
# unshare, where its time goes, how it scales on two CPUs, and how precise
# its limits and accounting are (docs/PERFORMANCE.md). The bench installs
# nothing (scripts/setup.sh installs bubblewrap, its baseline; without it
# that variant is skipped).
#
#   scripts/bench.sh [isolate bench options]   print the results (make bench)
#   scripts/bench.sh --profile [RUNS]          CPU profile (perf) of RUNS
#                                              `isolate run -- /bin/true`,
#                                              in ms of CPU per run and part
#   scripts/bench.sh --judges [RUNS [IOI]]     the judges' path per process
#                                              (perf): RUNS `--run` of one
#                                              box handed to a service of its
#                                              own, and of ioi/isolate's IOI;
#                                              the network namespace's cost
#
# ISOLATE_BIN names the binary to measure (default bin/isolate, built by
# `make build` when missing; --profile builds its own with symbols). Run it
# on an otherwise idle machine: every figure moves with the load.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${ISOLATE_BIN:-bin/isolate}

case "${1:-}" in
--profile) mode=profile; shift ;;
--judges) mode=judges; shift ;;
*) mode=print ;;
esac

if [ "$mode" = profile ]; then
	runs=${1:-200}
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	command -v perf >/dev/null || { echo "bench.sh: --profile needs perf (apt-get install linux-perf)" >&2; exit 2; }
	if [ -z "${ISOLATE_BIN:-}" ]; then
		# As `make build` builds it, but with symbols for perf.
		godir=$(./scripts/deps.sh) # (a failure stops here)
		export PATH="$godir:$PATH"
		. scripts/cgo-env.sh
		./scripts/build-init.sh
		go build -tags urfave_cli_no_docs,netgo,osusergo,initbin -trimpath -o "$tmp/isolate" ./cmd/isolate
		bin=$tmp/isolate
	fi
	hz=10000
	perf record -q -e cpu-clock -F $hz -g -o "$tmp/perf.data" -- \
		sh -c 'for i in $(seq '"$runs"'); do "$0" run -- /bin/true 2>/dev/null; done' "$bin" >/dev/null 2>&1
	# Each sample is 1/hz s of CPU of one process: the supervisor (the
	# binary's own name), init (the small init, exec'd as
	# /proc/self/fd/N: "N"; or /proc/self/exe: "exe") or the program
	# (true). The first matching part of its stack names it.
	perf script -i "$tmp/perf.data" 2>/dev/null | awk -v hz=$hz -v runs="$runs" -v sup="$(basename "$bin" | cut -c1-15)" '
	function part(  s) {
		s = stack
		if (leaf ~ /intel_check_word|handle_intel|get_common_|init_cpu_features|update_active|get_extended_indices|init_cacheinfo/) return "glibc start-up: cpuid probing (a VM exit each)"
		# libseccomp runs in the supervisor only; its C frames have no
		# frame pointers, so the leaf often names it alone.
		if (who == "supervisor" && (s ~ / (db_|gen_bpf|_gen_bpf|_hsh_|_blk_|_bpf_|_db_|arch_|seccomp_|syscall_resolve)/ || leaf ~ /^(db_|gen_bpf|_gen_bpf|_hsh_|_blk_|_bpf_|_db_|arch_)/)) return "libseccomp: compile the policy"
		if (s ~ /seccomp\./) return "seccomp package (Go)"
		if (s ~ /runtime\.doInit1/) return "Go package initialisation"
		if (s ~ /runtime\.schedinit|runtime\.osinit|runtime\.args|cpuinit/) return "Go runtime start"
		if (s ~ /syscall\.forkExec|os\.StartProcess|forkAndExec/) return "spawn init: fork, namespaces, id maps, exec"
		if (s ~ /supervisor\)\.prepare|isolate\/cgroup\.|containerd\/cgroups/) return "box lock + cgroups"
		if (s ~ /supervisor\)\.teardown/) return "teardown"
		if (s ~ /supervisor\)\.start|rootfs\./) return "start: plan, pipes, waiting"
		if (s ~ /supervisor\)\.(supervise|account)/) return "supervise + account"
		if (s ~ /isolate\.Run/) return "isolate.Run, other"
		if (s ~ /urfave/) return "urfave/cli"
		if (s ~ /encoding\/json/) return "JSON"
		if (s ~ /sysmon|runtime\.usleep/) return "Go sysmon"
		if (s ~ /mstart|schedule|findRunnable|gcBgMark|bgsweep|bgscavenge|runtime\.main|mallocgc/) return "Go scheduler, GC, allocation"
		if (s ~ /do_exit|do_group_exit|exit_mmap/) return "process exit (kernel)"
		if (s ~ /execve|bprm/) return "execve (kernel)"
		if (s ~ /do_jit|bpf_convert|bpf_prog/) return "seccomp filter load (kernel)"
		if (s ~ /mount|pivot_root|mkdir/) return "mounts, mkdir (kernel)"
		if (s ~ /do_wp_page/) return "copy-on-write faults"
		if (s ~ /page_fault/) return "page faults, other"
		return "other"
	}
	/^[^ \t]/ { comm = $1; stack = ""; depth = 0; next }
	/^$/ {
		if (comm == sup) who = "supervisor"; else if (comm == "exe" || comm ~ /^[0-9]+$/) who = "init"; else if (comm == "true") who = "program"; else { comm = ""; next }
		n[who " | " part()]++; tot[who]++; all++; comm = ""; next
	}
	{ depth++; if (depth == 1) leaf = $2; stack = stack " " $2 }
	END {
		ms = 1000 / hz / runs
		# Sort key first: the header, then per process by cost.
		printf "0\t\t\tCPU per `isolate run -- /bin/true` (%d runs, perf cpu-clock at %d Hz): %.2f ms\n", runs, hz, all * ms
		for (w in tot) printf "1\t%s\t%.3f\t  %-10s %6.2f ms\n", w, tot[w] * ms, w, tot[w] * ms
		for (k in n) {
			split(k, a, " [|] ")
			if (n[k] * ms >= 0.02) printf "2\t%s\t%.3f\t  %-10s %6.3f ms  %s\n", a[1], n[k] * ms, a[1], n[k] * ms, a[2]
		}
	}' | sort -t"$(printf '\t')" -k1,1n -k2,2 -k3,3nr | cut -f4-
	exit 0
fi

if [ "$mode" = judges ]; then
	runs=${1:-500}
	ioi=${2:-}
	[ "$(id -u)" = 0 ] || { echo "bench.sh: --judges runs as root" >&2; exit 2; }
	command -v perf >/dev/null || { echo "bench.sh: --judges needs perf (apt-get install linux-perf)" >&2; exit 2; }
	[ -x "$bin" ] || make build
	bin=$(realpath "$bin")
	tmp=$(mktemp -d)
	id=997
	"$(dirname "$bin")/isolate-serve" --socket "$tmp/api.sock" --cli-socket "$tmp/cli.sock" \
		--cli-binary "$bin" --store "$tmp/files" > "$tmp/serve.log" 2>&1 &
	svc=$!
	trap 'ISOLATE_SERVICE_SOCKET="$tmp/cli.sock" "$bin" --box-id=$id --cleanup >/dev/null 2>&1; kill $svc 2>/dev/null; wait $svc 2>/dev/null; [ -z "$ioi" ] || "$ioi" --box-id=$id --cleanup >/dev/null 2>&1; rm -rf "$tmp"' EXIT
	until [ -S "$tmp/api.sock" ]; do
		kill -0 $svc 2>/dev/null || { cat "$tmp/serve.log" >&2; exit 1; }
		sleep 0.05
	done
	ISOLATE_SERVICE_SOCKET="$tmp/cli.sock" "$bin" --box-id=$id --init > /dev/null
	[ -z "$ioi" ] || "$ioi" --box-id=$id --init > /dev/null
	hz=4000
	busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
	# per NAME CMD...: CMD run RUNS times one after the other under perf,
	# then the machine's CPU per run by process, what of it is user space
	# (the rest is the kernel's work for it), and the wake-ups and
	# cross-CPU calls per run.
	per() {
		local name=$1
		shift
		for i in $(seq $((runs / 10))); do "$@" > /dev/null 2>&1; done
		perf record -q -a -e cpu-clock -F $hz -o "$tmp/perf.data" -- \
			sh -c 'n=$1; shift; for i in $(seq $n); do "$@" >/dev/null 2>&1; done' sh $runs "$@" > /dev/null 2>&1
		echo "$name, $runs runs: ms of the machine's CPU per run, by process (user space of it)"
		perf report -i "$tmp/perf.data" --no-children --sort comm,dso -F comm,dso,sample -t '|' --stdio 2>/dev/null |
			awk -F'|' -v hz=$hz -v runs=$runs '
			/^#/ || NF < 3 { next }
			{
				c = $1; gsub(/^ +| +$/, "", c); d = $2; gsub(/^ +| +$/, "", d); n = $3 + 0
				if (c == "swapper") next
				if (c ~ /^[0-9]+$/) c = "box init (PID 1 and its parent)"
				else if (c ~ /^(kworker|ksoftirqd|rcu_|migration|kthreadd)/) c = "kernel threads"
				else if (c == "sh" || c == "seq") c = "the loop (sh)"
				all[c] += n; tot += n
				if (d !~ /^\[kernel/) user[c] += n
				if (d ~ /ld-linux/) ld[c] += n
			}
			END {
				ms = 1000 / hz / runs
				printf "0\t%f\t  %-34s %6.2f\n", tot, "all", tot * ms
				for (c in all) if (all[c] * ms >= 0.02) printf "1\t%f\t  %-34s %6.2f  (%.2f%s)\n", all[c], c, all[c] * ms, user[c] * ms, (ld[c] > 0 ? sprintf(", dynamic loader %.2f", ld[c] * ms) : "")
			}' | sort -t"$(printf '\t')" -k1,1n -k2,2nr | cut -f3-
		perf stat -a -x, -e sched:sched_wakeup,irq_vectors:call_function_single_entry -o "$tmp/stat" -- \
			sh -c 'n=$1; shift; for i in $(seq $n); do "$@" >/dev/null 2>&1; done' sh $runs "$@" > /dev/null 2>&1
		awk -F, -v runs=$runs '$3 ~ /sched_wakeup/ {w = $1} $3 ~ /call_function_single/ {c = $1}
			END { printf "  per run: %.1f wake-ups, %.1f cross-CPU function calls\n", w / runs, c / runs }' "$tmp/stat"
	}
	export ISOLATE_SERVICE_SOCKET="$tmp/cli.sock"
	per "isolate --run, handed over" "$bin" --box-id=$id --run -- /bin/true
	unset ISOLATE_SERVICE_SOCKET
	[ -z "$ioi" ] || per "ioi/isolate --run" "$ioi" --box-id=$id --run -- /bin/true
	if command -v unshare > /dev/null; then
		echo "the machine's CPU per unshare ... true, $runs runs (the network namespace's cost is the difference)"
		for flags in -Urpimf -Urnpimf; do
			sleep 1
			b0=$(busy)
			for i in $(seq $runs); do unshare $flags true; done
			sleep 1
			b1=$(busy)
			awk -v d=$((b1 - b0)) -v runs=$runs -v f=$flags -v hz="$(getconf CLK_TCK)" \
				'BEGIN { printf "  unshare %-8s %6.2f ms\n", f, d * 1000 / hz / runs }'
		done
	fi
	exit 0
fi

if [ ! -x "$bin" ]; then
	make build
fi

exec "$bin" bench "$@"
