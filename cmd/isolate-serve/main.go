// The runtime need not size GOMAXPROCS from cgroup files: the service's
// parallelism is --parallel, and its boxes wait on the kernel.
//go:debug containermaxprocs=0

// Command isolate-serve is `isolate serve`: the sandbox as a long-running
// HTTP/JSON service (docs/API.md) on a unix socket, or on TCP with a
// bearer token. It is a binary of its own so that the one-shot `isolate`
// links none of the service's dependencies (net/http, Prometheus);
// `isolate serve` execs it from beside itself. It links the isolate
// package, whose ELF constructor makes it the init of the boxes it
// starts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/internal/connlimit"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
	"github.com/isolate-sandbox/isolate/service/caller"
	"github.com/isolate-sandbox/isolate/service/filestore"
	"github.com/isolate-sandbox/isolate/service/handover"
	"github.com/isolate-sandbox/isolate/service/mcp"
	"github.com/isolate-sandbox/isolate/service/server"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	boxinit.MaybeInit()
	// The constructor that dispatches init boots every process of this
	// binary with one P (isolate/boxinit/procs.c). The service's own Go code is a
	// small part of a run (the boxes' processes and the kernel's work for
	// them are the rest), and every further P adds idle threads that spin
	// and wake: half the CPUs it may use, at least one. On 2 CPUs, one P
	// instead of two took up to 1.9 ms less CPU per run and gave as much
	// throughput or more (isolate bench --service, run in turns against a
	// build of each).
	runtime.GOMAXPROCS(max(1, usableCPUs()/2))
	run := serve
	if len(os.Args) == 2 && os.Args[1] == "help-man" {
		run = func([]string) error { return writeMan(os.Stdout) }
	}
	if len(os.Args) >= 2 && os.Args[1] == "probe" {
		run = func(args []string) error { return probe(args[1:]) }
	}
	if len(os.Args) >= 2 && os.Args[1] == "mcp" {
		run = func(args []string) error { return mcpStdio(args[1:]) }
	}
	if len(os.Args) >= 2 && os.Args[1] == "drain" {
		run = func(args []string) error { return drain(args[1:]) }
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "isolate serve: "+err.Error())
		os.Exit(2)
	}
}

// options are the service's flags.
type options struct {
	socket, socketGroup  string
	cliSocket, cliBinary string
	listen, tokenFile    string
	parallel, queue      int
	pool                 int
	grace                time.Duration
	storeDir             string
	storeQuota, storeTTL string
	caps                 capFlags
	storeCallerQuota     string
	netHostGroups        groupList
	seccompNoneGroups    groupList
	netAllowGroups       []string
	maxBody              string
	writeTimeout         time.Duration
	conns                connlimit.Limits
	q                    queueOptions
	maxSessions          int
	maxSessionsPerCaller int
	sessionMaxTimeout    time.Duration
	auditFile            string
	monitorListen        string
	monitorSocket        string
	heldBytes            string
	totalHeldBytes       string
	maxBackground        int
	subuidFile           string
	quotas               quotaList
	quotaWindow          time.Duration
	// A service without root (rootless.go).
	cgroupRoot      string
	allowRlimitOnly bool
	// printVersion: --version, print the version and exit.
	printVersion bool
	// set are the flags given on the command line.
	set map[string]bool
}

// groupList is a repeatable flag of groups, each a name or a gid, also
// given as a comma-separated list.
type groupList []string

func (g *groupList) String() string { return strings.Join(*g, ",") }

func (g *groupList) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name == "" {
			return errors.New("an empty group name")
		}
		*g = append(*g, name)
	}
	return nil
}

// gids looks up each group of the flag named flag.
func (g groupList) gids(flag string) ([]int, error) {
	var ids []int
	for _, name := range g {
		id, err := lookupGroup(flag, name)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

type capFlags struct{ time, wall, mem, pids, tmp, fsize, output, cpus string }

// newFlagSet is the service's flags, bound to o.
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("isolate serve", flag.ContinueOnError)
	fs.StringVar(&o.socket, "socket", server.DefaultSocket, "unix socket to listen on (root-owned, mode 0660)")
	fs.StringVar(&o.socketGroup, "socket-group", "", "group (name or gid) that may use the socket besides root")
	fs.StringVar(&o.cliSocket, "cli-socket", handover.DefaultSocket, "unix socket the isolate CLI hands its runs to (same owner, group and mode as --socket; \"none\": off)")
	fs.StringVar(&o.cliBinary, "cli-binary", "", "the isolate binary whose runs --cli-socket takes (default: isolate beside this binary)")
	fs.StringVar(&o.listen, "listen", "", "also listen on this TCP address (needs --token-file)")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the bearer token every request must carry (mode 0600)")
	fs.IntVar(&o.parallel, "parallel", usableCPUs(), "commands running at once (default: the CPUs it may use)")
	fs.IntVar(&o.queue, "queue", 0, "requests that may wait for a slot (default 4 x --parallel); more get 429")
	fs.IntVar(&o.pool, "pool", -1, "boxes built ahead of demand, at most (default 2 x --parallel; 0: none)")
	fs.DurationVar(&o.grace, "grace", 30*time.Second, "on SIGTERM, how long running requests may finish")
	fs.StringVar(&o.storeDir, "store", filestore.DefaultRoot, "directory of the file store (root-only)")
	fs.StringVar(&o.storeQuota, "store-quota", "256M", "bytes the file store may hold")
	fs.StringVar(&o.storeTTL, "store-ttl", "1h", "how long a stored file lives")
	fs.StringVar(&o.storeCallerQuota, "store-caller-quota", "", "bytes of the file store one caller who is not root may hold (default a quarter of --store-quota)")
	fs.Var(&o.netHostGroups, "net-host-group", "a group (name or gid; repeatable, or a comma list) whose members who are not root may ask net: host (default: root only)")
	fs.Var(&o.seccompNoneGroups, "seccomp-none-group", "a group (name or gid; repeatable, or a comma list) whose members who are not root may ask seccomp: none (default: root only)")
	fs.Func("net-allow-group", "`GROUP=LIST`: what members of GROUP who are not root may put in a box's network allowlist (names, *.names, addresses, CIDRs, :PORT; repeatable)", func(v string) error {
		o.netAllowGroups = append(o.netAllowGroups, v)
		return nil
	})
	o.q.flags(fs)
	fs.StringVar(&o.caps.time, "max-time", "", "largest cpu_time_ms a request may ask (DUR)")
	fs.StringVar(&o.caps.wall, "max-wall-time", "", "largest wall_time_ms (DUR)")
	fs.StringVar(&o.caps.mem, "max-mem", "", "largest memory_bytes (SIZE)")
	fs.StringVar(&o.caps.pids, "max-pids", "", "largest pids")
	fs.StringVar(&o.caps.tmp, "max-tmp-size", "", "largest tmp_size_bytes (SIZE)")
	fs.StringVar(&o.caps.fsize, "max-fsize", "", "largest file_size_bytes (SIZE)")
	fs.StringVar(&o.caps.cpus, "max-cpus", "", "largest cpus, a run's or a session's CPU bandwidth (e.g. 1.5)")
	fs.StringVar(&o.caps.output, "max-output", megs(server.DefaultMaxOutputBytes), "largest output_limit_bytes, and collected max_bytes (SIZE; at most 1G)")
	fs.StringVar(&o.maxBody, "max-body", megs(server.DefaultMaxBodyBytes), "largest request body (SIZE; at most 1G)")
	fs.DurationVar(&o.writeTimeout, "write-timeout", server.DefaultWriteTimeout, "how long a client may leave its answer unread before its run is cancelled")
	fs.IntVar(&o.conns.Total, "max-conns", connlimit.DefaultTotal, "connections held at once on each socket; more are closed as they come")
	fs.IntVar(&o.conns.PerPeer, "max-conns-per-uid", connlimit.DefaultPerPeer, "connections one uid (over TCP: the token; one address until a request carried it) may hold on each socket")
	fs.IntVar(&o.maxSessions, "max-sessions", server.DefaultMaxSessions, "sessions alive at once, in all; more get 429")
	fs.IntVar(&o.maxSessionsPerCaller, "max-sessions-per-caller", server.DefaultMaxSessionsPerCaller, "sessions one caller (a uid; over TCP: the token) may hold at once")
	fs.StringVar(&o.heldBytes, "max-held-bytes-per-caller", megs(caller.DefaultHeldBytes), "bytes the service keeps for one caller at once: the captured output of its requests and sessions' commands (SIZE; at most 1G; by default at least what one command at --max-output may hold)")
	fs.StringVar(&o.totalHeldBytes, "max-held-bytes", megs(caller.DefaultTotalHeldBytes), "bytes the service keeps for all its callers at once (SIZE; at most 16G)")
	fs.Var(&o.quotas, "quota", "WHO=RUNS,CPU: runs and CPU time one caller may use in each --quota-window (0: no bound); WHO is default, group:NAME (its members; the first that matches), tcp (the token) or queue (repeatable; none: no quotas)")
	fs.DurationVar(&o.quotaWindow, "quota-window", time.Minute, "the window of --quota")
	fs.StringVar(&o.subuidFile, "subuid-file", caller.SubUIDFile, "subordinate uid ranges (name:start:count): a uid in a user's range counts as that user for sessions and budgets")
	fs.IntVar(&o.maxBackground, "max-background-per-caller", caller.DefaultBackground, "background commands one caller's sessions run at once")
	fs.DurationVar(&o.sessionMaxTimeout, "session-max-timeout", server.DefaultSessionMaxTimeout, "longest lease a session may ask (timeout_ms)")
	fs.StringVar(&o.auditFile, "audit-file", "", "also append the audit trail (a JSON line per request, always on standard error) to this `FILE` (mode 0600)")
	fs.StringVar(&o.monitorListen, "monitor-listen", "", "serve /metrics and /v1/health only, without a token, on this TCP `ADDR`")
	fs.StringVar(&o.monitorSocket, "monitor-socket", "", "serve /metrics and /v1/health only on this unix socket `PATH` (anyone on the host may connect)")
	fs.StringVar(&o.cgroupRoot, "cgroup-root", "", "run by a user who is not root: a delegated cgroup v2 `DIR` for the boxes' cgroups (default: the service's own cgroup, if delegated)")
	fs.BoolVar(&o.printVersion, "version", false, "print the version and exit")
	fs.BoolVar(&o.allowRlimitOnly, "allow-rlimit-only", false, "run by a user who is not root: go on with rlimits alone where no cgroup is delegated (it then takes only runs that allow that too)")
	return fs
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := newFlagSet(o)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.parallel < 1 {
		return nil, errors.New("--parallel: must be 1 or more")
	}
	if o.queue == 0 {
		o.queue = 4 * o.parallel
	}
	if o.pool < 0 {
		o.pool = 2 * o.parallel
	}
	if o.writeTimeout <= 0 {
		return nil, errors.New("--write-timeout: must be above 0")
	}
	if o.conns.Total < 1 || o.conns.PerPeer < 1 {
		return nil, errors.New("--max-conns, --max-conns-per-uid: must be 1 or more")
	}
	if o.maxSessions < 1 || o.maxSessionsPerCaller < 1 {
		return nil, errors.New("--max-sessions, --max-sessions-per-caller: must be 1 or more")
	}
	if o.maxBackground < 1 {
		return nil, errors.New("--max-background-per-caller: must be 1 or more")
	}
	if o.sessionMaxTimeout < time.Second {
		return nil, errors.New("--session-max-timeout: must be 1s or more")
	}
	if o.listen != "" && o.tokenFile == "" {
		return nil, errors.New("--listen needs --token-file: TCP clients are known by their token only")
	}
	return o, nil
}

// quotaList is the repeatable --quota flag.
type quotaList []string

func (q *quotaList) String() string { return strings.Join(*q, " ") }

func (q *quotaList) Set(v string) error { *q = append(*q, v); return nil }

// parse reads each WHO=RUNS,CPU of --quota.
func (q quotaList) parse(window time.Duration) (caller.Quotas, error) {
	qs := caller.Quotas{}
	if len(q) == 0 {
		return qs, nil
	}
	if window <= 0 {
		return qs, errors.New("--quota-window: must be above 0")
	}
	qs.Window = window
	for _, v := range q {
		bad := func(why string) error {
			return fmt.Errorf("--quota %s: %s (WHO=RUNS,CPU, e.g. default=600,5m)", v, why)
		}
		who, limits, ok := strings.Cut(v, "=")
		runs, cpu, ok2 := strings.Cut(limits, ",")
		if !ok || !ok2 {
			return qs, bad("expected WHO=RUNS,CPU")
		}
		var quota caller.Quota
		n, err := strconv.ParseInt(runs, 10, 64)
		if err != nil || n < 0 {
			return qs, bad("RUNS: a number of runs, 0 for no bound")
		}
		quota.Runs = n
		if quota.CPU, err = api.ParseDuration(cpu); err != nil || quota.CPU < 0 {
			return qs, bad("CPU: a duration (30s, 5m), 0 for no bound")
		}
		switch {
		case who == "default":
			qs.Default = quota
		case who == "tcp":
			qs.TCP = &quota
		case who == "queue":
			qs.Queue = &quota
		case strings.HasPrefix(who, "group:"):
			gid, err := lookupGroup("--quota", strings.TrimPrefix(who, "group:"))
			if err != nil || gid < 0 {
				return qs, bad("no such group")
			}
			qs.Groups = append(qs.Groups, caller.GroupQuota{GID: gid, Quota: quota})
		default:
			return qs, bad("WHO: default, group:NAME, tcp or queue")
		}
	}
	return qs, nil
}

// caps reads the --max-* flags.
func (c capFlags) parse() (caller.Caps, error) {
	var caps caller.Caps
	dur := func(flag, v string, ms *int64) error {
		if v == "" {
			return nil
		}
		d, err := api.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s %s: %v", flag, v, err)
		}
		*ms = api.Millis(d)
		return nil
	}
	size := func(flag, v string, n *int64, parse func(string) (int64, error)) error {
		if v == "" {
			return nil
		}
		x, err := parse(v)
		if err != nil {
			return fmt.Errorf("%s %s: %v", flag, v, err)
		}
		*n = max(x, 0) // unlimited: no cap
		return nil
	}
	cpus := func() error {
		if c.cpus == "" {
			return nil
		}
		x, err := strconv.ParseFloat(c.cpus, 64)
		if err != nil || x <= 0 || x > 4096 {
			return fmt.Errorf("--max-cpus %s: a number of CPUs above 0 is needed (e.g. 1.5)", c.cpus)
		}
		caps.CPUs = x
		return nil
	}
	return caps, errors.Join(
		cpus(),
		dur("--max-time", c.time, &caps.CPUTimeMs),
		dur("--max-wall-time", c.wall, &caps.WallTimeMs),
		size("--max-mem", c.mem, &caps.MemoryBytes, api.ParseSize),
		size("--max-pids", c.pids, &caps.Pids, api.ParseCount),
		size("--max-tmp-size", c.tmp, &caps.TmpSizeBytes, api.ParseSize),
		size("--max-fsize", c.fsize, &caps.FileSizeBytes, api.ParseSize),
		bounded("--max-output", c.output, &caps.OutputLimitBytes),
	)
}

// megs writes a default size of the service's, a whole number of MiB,
// as its flag takes it: the flag's default is the service's own.
func megs(n int64) string { return strconv.FormatInt(n>>20, 10) + "M" }

// maxServiceBytes bounds the sizes of what the service itself holds per
// request (--max-output, --max-body): never unlimited.
const maxServiceBytes = 1 << 30

// bounded reads a size of the service's own that cannot be turned off
// ("": the service's default).
func bounded(flag, v string, n *int64) error {
	if v == "" {
		return nil
	}
	x, err := api.ParseSize(v)
	if err != nil || x <= 0 || x > maxServiceBytes {
		return fmt.Errorf("%s %s: a size from 1 to 1G is needed (the service holds this much per request)", flag, v)
	}
	*n = x
	return nil
}

// lookupGroup is the gid of group g (a name or a number) of the flag
// named flag; "": -1.
func lookupGroup(flag, g string) (int, error) {
	if g == "" {
		return -1, nil
	}
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	gr, err := user.LookupGroup(g)
	var unknown user.UnknownGroupError
	if errors.As(err, &unknown) {
		return 0, fmt.Errorf("%s %s: no such group: make it first (`groupadd %s`), then add its members (`adduser USER %s`)", flag, g, g, g)
	} else if err != nil {
		return 0, fmt.Errorf("%s: %v", flag, err)
	}
	return strconv.Atoi(gr.Gid)
}

func serve(args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	if o.printVersion {
		fmt.Println("isolate-serve " + version)
		return nil
	}
	rootless := os.Geteuid() != 0
	if rootless {
		if err := o.ownPaths(); err != nil {
			return err
		}
	} else if o.set["cgroup-root"] || o.set["allow-rlimit-only"] {
		return errors.New("--cgroup-root and --allow-rlimit-only are for a service run by a user who is not root (root's boxes go under cg_root of the configuration)")
	}
	caps, err := o.caps.parse()
	if err != nil {
		return err
	}
	var maxBody int64
	if err := bounded("--max-body", o.maxBody, &maxBody); err != nil {
		return err
	}
	caller.SetSubUIDFile(o.subuidFile)
	budget := caller.Budget{Bytes: caller.DefaultHeldBytes, TotalBytes: caller.DefaultTotalHeldBytes, Background: o.maxBackground}
	if budget.Quotas, err = o.quotas.parse(o.quotaWindow); err != nil {
		return err
	}
	if err := bounded("--max-held-bytes-per-caller", o.heldBytes, &budget.Bytes); err != nil {
		return err
	}
	if x, err := api.ParseSize(o.totalHeldBytes); err != nil || x <= 0 || x > 16<<30 {
		return fmt.Errorf("--max-held-bytes %s: a size from 1 to 16G is needed", o.totalHeldBytes)
	} else {
		budget.TotalBytes = x
	}
	// The default budget holds a command at --max-output; one the
	// operator set is theirs (a request beyond it is a 400).
	if !o.set["max-held-bytes-per-caller"] {
		budget.Bytes = max(budget.Bytes, server.OneCommandBytes(caps.OutputLimitBytes))
	}
	if !o.set["max-held-bytes"] {
		budget.TotalBytes = max(budget.TotalBytes, budget.Bytes)
	}
	quota, err := api.ParseSize(o.storeQuota)
	if err != nil || quota <= 0 {
		return fmt.Errorf("--store-quota %s: a size above 0 is needed", o.storeQuota)
	}
	ttl, err := api.ParseDuration(o.storeTTL)
	if err != nil || ttl <= 0 {
		return fmt.Errorf("--store-ttl %s: a duration above 0 is needed", o.storeTTL)
	}
	gid, err := lookupGroup("--socket-group", o.socketGroup)
	if err != nil {
		return err
	}
	policy := &caller.Policy{Caps: caps}
	if policy.NetHostGroups, err = o.netHostGroups.gids("--net-host-group"); err != nil {
		return err
	}
	if policy.SeccompNoneGroups, err = o.seccompNoneGroups.gids("--seccomp-none-group"); err != nil {
		return err
	}
	for _, v := range o.netAllowGroups {
		g, err := caller.ParseNetGrant(v, func(name string) (int, error) { return lookupGroup("--net-allow-group", name) })
		if err != nil {
			return fmt.Errorf("--net-allow-group %w", err)
		}
		policy.NetGrants = append(policy.NetGrants, g)
	}
	var token string
	if o.tokenFile != "" {
		if token, err = server.ReadToken(o.tokenFile); err != nil {
			return fmt.Errorf("--token-file: %v", err)
		}
	}
	if err := o.q.readURL(); err != nil {
		return err
	}
	// Set once, here, for the whole process: files the service creates
	// for callers (the ioi form's meta and output files, copy-outs) get
	// the modes the CLI gives them in-process (ioi/isolate's umask 022),
	// and the CLI hands over only runs of callers with this umask. The
	// library never changes it: this process is shared by every run.
	syscall.Umask(0o022)
	// Signals are taken from here on: one that comes while the service
	// starts (its pool building boxes) waits for the loop below, which
	// drains, so that nothing it made is left (the default action would
	// end the process with its boxes' cgroups in place).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	host, err := newHost(o)
	if err != nil {
		return err
	}
	// In a container's cgroup namespace (cgroup v2), the service's cgroup
	// is readied while the service is the container's only process; on
	// failure each box tries again.
	if err := host.PrepareCgroups(); err != nil {
		fmt.Fprintln(os.Stderr, "isolate serve: warning: cgroups: "+err.Error())
	}
	// What a killed service left: box cgroups (its boxes died with it),
	// stored files, work directories.
	if err := host.SweepStale(); err != nil {
		fmt.Fprintln(os.Stderr, "isolate serve: warning: "+err.Error())
	}
	var callerQuota int64
	if o.storeCallerQuota != "" {
		if callerQuota, err = api.ParseSize(o.storeCallerQuota); err != nil || callerQuota <= 0 {
			return fmt.Errorf("--store-caller-quota %s: a size above 0 is needed", o.storeCallerQuota)
		}
	}
	store, err := filestore.Open(o.storeDir, quota, callerQuota, ttl)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := server.SweepWork(); err != nil {
		return err
	}
	// Once every request is done (Shutdown below has drained them).
	defer server.RemoveWork()
	// Boxes built ahead; the pool holds the image trees it builds from
	// until it stops, after the last request.
	if err := host.StartPool(isolate.PoolConfig{Max: o.pool}); err != nil {
		return err
	}
	defer host.StopPool()

	auditor, closeAudit, err := o.openAuditor()
	if err != nil {
		return err
	}
	defer closeAudit()
	monitors, err := o.monitorListeners()
	if err != nil {
		return err
	}
	cli, err := startCLI(o, gid, host, policy)
	if err != nil {
		return err
	}
	// The self-test: at start, before the service listens (so that its
	// box never races a caller's first run for a box id), after a run's
	// XX, and while it fails; stopped before the pool.
	ready := newReadiness(host)
	readyCtx, stopReady := context.WithCancel(context.Background())
	ready.test(readyCtx)
	readyDone := make(chan struct{})
	go func() { ready.run(readyCtx); close(readyDone) }()
	defer func() { stopReady(); <-readyDone }()
	cli.auditTo(auditor)
	var srv *server.Server
	worker, err := o.q.worker(o.parallel, maxBody, &srv, ready)
	if err != nil {
		return err
	}
	srv = server.New(server.Config{
		Runner:   checkedRunner{hostRunner{host}, ready},
		Exec:     checkedExec{server.Judge{Host: host}, ready},
		Store:    store,
		Version:  version,
		Parallel: o.parallel,
		Queue:    o.queue,
		Policy:   *policy,
		Health:   func() server.Health { return health(host, ready) },
		Token:    token,
		Metrics:  append(cli.metrics(), queueMetrics(worker)...),

		MaxBodyBytes: maxBody,
		WriteTimeout: o.writeTimeout,
		Conns:        o.conns,

		Sessions:             server.HostSessions{Host: host},
		MaxSessions:          o.maxSessions,
		MaxSessionsPerCaller: o.maxSessionsPerCaller,
		SessionMaxTimeout:    o.sessionMaxTimeout,

		Audit:  auditor,
		Ledger: caller.NewLedger(budget),
	})
	for _, l := range monitors {
		go func() {
			if err := srv.ServeMonitor(l); err != nil {
				fmt.Fprintln(os.Stderr, "isolate serve: monitor: "+err.Error())
			}
		}()
		fmt.Fprintf(os.Stderr, "isolate serve: monitor (/metrics, /v1/health) on %s\n", l.Addr())
	}
	cli.serve(srv.SlotFor, srv.Ledger())
	// MCP over streamable HTTP: each MCP session speaks as the caller
	// that opened it, through the API's own handlers.
	mcp.Version = version
	srv.Mount("/mcp", "mcp", mcp.HTTPHandler(server.OwnerOf, func(r *http.Request) mcp.API {
		return mcp.HandlerAPI(srv.HandlerAs(server.CallerOf(r)))
	}))
	ul, err := server.ListenUnix(o.socket, gid)
	if err != nil {
		return err
	}
	listeners := []net.Listener{ul}
	if o.listen != "" {
		tl, err := net.Listen("tcp", o.listen)
		if err != nil {
			ul.Close()
			return err
		}
		listeners = append(listeners, tl)
	}
	errs := make(chan error, len(listeners))
	for _, l := range listeners {
		go func() { errs <- srv.Serve(l) }()
	}
	fmt.Fprintf(os.Stderr, "isolate serve: listening on %s", o.socket)
	if o.listen != "" {
		fmt.Fprintf(os.Stderr, " and %s", listeners[1].Addr())
	}
	fmt.Fprintf(os.Stderr, " (%d at once, up to %d boxes built ahead)\n", o.parallel, o.pool)
	notify("READY=1")
	stopQueue := func(time.Duration) {}
	stopTaking := func() {}
	if worker != nil {
		ctx, stop := context.WithCancel(context.Background())
		go worker.Run(ctx)
		stopQueue = func(grace time.Duration) { stop(); worker.Drain(grace) }
		stopTaking = stop
		fmt.Fprintf(os.Stderr, "isolate serve: taking jobs from the queue %s:jobs as %s\n", o.q.prefix, worker.Name())
	}

wait:
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGUSR1 {
				// `isolate-serve drain` (a pod's preStop): take nothing
				// more, finish what is held, stay up until SIGTERM.
				if !srv.Draining() {
					fmt.Fprintln(os.Stderr, "isolate serve: SIGUSR1: draining: taking no more runs, handovers or jobs; finishing those held (until SIGTERM)")
				}
				notify("STOPPING=1")
				srv.Drain()
				stopTaking()
				continue
			}
			fmt.Fprintf(os.Stderr, "isolate serve: %v: draining (up to %v)\n", s, o.grace)
			notify("STOPPING=1")
			break wait
		case err := <-errs:
			stopQueue(0)
			cli.Shutdown(0)
			srv.Shutdown(0)
			return err
		}
	}
	// The queue stops taking jobs and finishes its own within the grace
	// (its hard stop comes first, so that a job it cuts short stays
	// pending rather than answered "the service is stopping").
	done := make(chan struct{}, 2)
	go func() { cli.Shutdown(o.grace); done <- struct{}{} }()
	go func() { stopQueue(o.grace); done <- struct{}{} }()
	srv.Shutdown(o.grace + time.Second)
	<-done
	<-done
	return nil
}

// hostRunner runs each command on the host, in a box its pool built
// ahead when one is ready.
type hostRunner struct{ h *isolate.Host }

func (r hostRunner) Run(ctx context.Context, spec *api.Spec, stdio isolate.IO) (*api.Report, error) {
	return r.h.Run(ctx, spec, stdio)
}

func (r hostRunner) Ready() int { return r.h.PoolReady() }

// health is what only the host knows: its cgroups, the self-test's
// outcome, its images and the languages they serve. The cgroups are
// checked anew (they may have gone since the start), at the root the
// Host's configuration names.
func health(host *isolate.Host, ready *readiness) server.Health {
	h := server.Health{Ready: true, Cgroup: string(cgroup.DetectMode())}
	if _, err := cgroup.NewManager(host.Config.CgroupRoot); err != nil {
		h.Ready = false
		h.Reasons = append(h.Reasons, "cgroups: "+err.Error())
	}
	if err := ready.Err(); err != nil {
		h.Ready = false
		h.Reasons = append(h.Reasons, err.Error())
	}
	var err error
	if h.Images, h.Langs, err = images(); err != nil {
		h.Reasons = append(h.Reasons, "images: "+err.Error())
	}
	return h
}

// usableCPUs counts the CPUs this process may run on (runtime.NumCPU
// counted them while the constructor's one-CPU mask was in force).
func usableCPUs() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() < 1 {
		return 1
	}
	return set.Count()
}
