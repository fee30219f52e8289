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
#
# ISOLATE_BIN names the binary to measure (default bin/isolate, built by
# `make build` when missing; --profile builds its own with symbols). Run it
# on an otherwise idle machine: every figure moves with the load.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${ISOLATE_BIN:-bin/isolate}

case "${1:-}" in
--profile) mode=profile; shift ;;
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

if [ ! -x "$bin" ]; then
	make build
fi

exec "$bin" bench "$@"
