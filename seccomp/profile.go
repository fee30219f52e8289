package seccomp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/opencontainers/runc/libcontainer/configs"
	lcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// dockerProfile is Docker's seccomp profile format: the OCI runtime-spec's
// linux.seccomp object plus archMap and per-entry includes/excludes. An
// OCI profile is a Docker profile that uses none of the extras; a whole
// OCI config.json is accepted too (its linux.seccomp is used).
type dockerProfile struct {
	DefaultAction    specs.LinuxSeccompAction `json:"defaultAction"`
	DefaultErrnoRet  *uint                    `json:"defaultErrnoRet,omitempty"`
	Architectures    []specs.Arch             `json:"architectures,omitempty"`
	ArchMap          []dockerArch             `json:"archMap,omitempty"`
	Flags            []specs.LinuxSeccompFlag `json:"flags,omitempty"`
	ListenerPath     string                   `json:"listenerPath,omitempty"`
	ListenerMetadata string                   `json:"listenerMetadata,omitempty"`
	Syscalls         []json.RawMessage        `json:"syscalls,omitempty"`
}

type dockerArch struct {
	Arch      specs.Arch   `json:"architecture"`
	SubArches []specs.Arch `json:"subArchitectures"`
}

type dockerSyscall struct {
	Name     string                   `json:"name,omitempty"` // Docker's older single-name form
	Names    []string                 `json:"names,omitempty"`
	Action   specs.LinuxSeccompAction `json:"action"`
	ErrnoRet *uint                    `json:"errnoRet,omitempty"`
	Args     []specs.LinuxSeccompArg  `json:"args,omitempty"`
	Comment  string                   `json:"comment,omitempty"`
	Includes *dockerFilter            `json:"includes,omitempty"`
	Excludes *dockerFilter            `json:"excludes,omitempty"`
}

type dockerFilter struct {
	Caps      []string `json:"caps,omitempty"`
	Arches    []string `json:"arches,omitempty"`
	MinKernel string   `json:"minKernel,omitempty"`
}

// essential are the syscalls the box's init makes in the program's process
// after loading the filter and before the program's execve (isolate/boxinit/init_proc.c,
// start_child): the execve itself and reporting its failure (write,
// exit_group); with a listener, also sending it to the supervisor
// (sendmsg, close). A profile must allow them, or the sandbox could not
// start the program (or, with SCMP_ACT_NOTIFY, would wait for a listener
// it is still sending).
var essential = []string{"execve", "write", "exit_group"}

var essentialNotify = []string{"sendmsg", "close"}

// compileProfile compiles an OCI or Docker JSON profile. The JSON is
// checked entry by entry so that an error names the entry; conversion and
// validation of actions, operators and architectures are libcontainer's
// (specconv.SetupSeccomp and its seccomp package); the rules go through
// libseccomp as libcontainer's InitSeccomp adds them. libcontainer's
// -ENOSYS stub (patchbpf) is only reachable through loading the filter
// into the calling process, which the supervisor must not do: the same
// behaviour comes from our own prologue (syscalls newer than any the
// profile names fail with ENOSYS, for the native architecture).
func compileProfile(path string) (*Program, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &ProfileError{Path: path, Err: err}
	}
	perr := func(entry string, format string, a ...any) error {
		return &ProfileError{Path: path, Entry: entry, Err: fmt.Errorf(format, a...)}
	}
	data = unwrapOCIConfig(data)
	var dp dockerProfile
	if err := strictDecode(data, &dp); err != nil {
		return nil, perr("", "%s", jsonError(data, err))
	}
	if dp.DefaultAction == "" {
		return nil, perr("defaultAction", "missing")
	}
	if _, err := lcseccomp.ConvertStringToAction(string(dp.DefaultAction)); err != nil {
		return nil, perr("defaultAction", "unknown action %q (known: %s)", dp.DefaultAction, strings.Join(lcseccomp.KnownActions(), ", "))
	}
	if dp.DefaultAction == specs.ActNotify {
		return nil, perr("defaultAction", "SCMP_ACT_NOTIFY cannot be the default action: the sandbox's own fork of the program runs under the filter")
	}
	spec := specs.LinuxSeccomp{
		DefaultAction:   dp.DefaultAction,
		DefaultErrnoRet: dp.DefaultErrnoRet,
		// Load-time flags are not applied (TSYNC is meaningless for a
		// single thread, the others are tuning); known ones are accepted.
		Flags: []specs.LinuxSeccompFlag{},
	}
	for i, f := range dp.Flags {
		if !slices.Contains(lcseccomp.KnownFlags(), string(f)) {
			return nil, perr(fmt.Sprintf("flags[%d]", i), "unknown flag %q (known: %s)", f, strings.Join(lcseccomp.KnownFlags(), ", "))
		}
	}
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return nil, err
	}
	archs := dp.Architectures
	for i, am := range dp.ArchMap {
		if _, err := lcseccomp.ConvertStringToArch(string(am.Arch)); err != nil {
			return nil, perr(fmt.Sprintf("archMap[%d].architecture", i), "unknown architecture %q", am.Arch)
		}
		if scmpArchName(am.Arch) == native.String() {
			archs = append(archs, am.Arch)
			archs = append(archs, am.SubArches...)
		}
	}
	for i, a := range archs {
		if _, err := lcseccomp.ConvertStringToArch(string(a)); err != nil {
			return nil, perr(fmt.Sprintf("architectures[%d]", i), "unknown architecture %q (known: %s)", a, strings.Join(lcseccomp.KnownArchs(), ", "))
		}
	}
	spec.Architectures = archs
	// labels[k] names the entry of the k-th flattened (entry, name) pair,
	// which is the order specconv.SetupSeccomp produces.
	var labels []string
	var notify bool
	kernel := kernelVersion()
	for i, raw := range dp.Syscalls {
		entry := fmt.Sprintf("syscalls[%d]", i)
		var ds dockerSyscall
		if err := strictDecode(raw, &ds); err != nil {
			return nil, perr(entry, "%s", jsonError(raw, err))
		}
		names := ds.Names
		if ds.Name != "" {
			names = append([]string{ds.Name}, names...)
		}
		if len(names) > 0 {
			entry = fmt.Sprintf("syscalls[%d] (%s)", i, strings.Join(names, ","))
		}
		if len(names) == 0 {
			return nil, perr(entry, "no syscall names")
		}
		for j, n := range names {
			if n == "" {
				return nil, perr(entry, "names[%d] is empty", j)
			}
		}
		if ds.Action == "" {
			return nil, perr(entry, "missing action")
		}
		if _, err := lcseccomp.ConvertStringToAction(string(ds.Action)); err != nil {
			return nil, perr(entry, "unknown action %q (known: %s)", ds.Action, strings.Join(lcseccomp.KnownActions(), ", "))
		}
		if ds.Action == specs.ActNotify {
			notify = true
		}
		for j, a := range ds.Args {
			if a.Index >= 6 {
				return nil, perr(entry, "args[%d]: index %d out of range 0-5", j, a.Index)
			}
			if _, err := lcseccomp.ConvertStringToOperator(string(a.Op)); err != nil {
				return nil, perr(entry, "args[%d]: unknown operator %q (known: %s)", j, a.Op, strings.Join(lcseccomp.KnownOperators(), ", "))
			}
		}
		if skip, err := dockerSkips(&ds, kernel); err != nil {
			return nil, perr(entry, "%v", err)
		} else if skip {
			continue
		}
		spec.Syscalls = append(spec.Syscalls, specs.LinuxSyscall{Names: names, Action: ds.Action, ErrnoRet: ds.ErrnoRet, Args: ds.Args})
		for range names {
			labels = append(labels, entry)
		}
	}
	cfg, err := specconv.SetupSeccomp(&spec)
	if err != nil {
		return nil, perr("", "%v", err)
	}
	if cfg == nil { // no default action and no syscalls: nothing to filter but vsock
		return &Program{Name: path, Filter: guardNone(auditArch(native))}, nil
	}
	filter, horizonNr, err := buildProfile(cfg, labels, native, perr)
	if err != nil {
		return nil, err
	}
	head := prologue{arch: auditArch(native)}
	if needsEnosysStub(cfg) && horizonNr > 0 {
		head.horizon = horizonNr
	}
	pre, err := head.assemble()
	if err != nil {
		return nil, err
	}
	// The vsock guard first, whatever the profile allows.
	full, err := checkLength(append(append(vsockGuard(auditArch(native)), pre...), filter...))
	if err != nil {
		return nil, perr("", "%v", err)
	}
	if err := checkEssential(full, native, notify, spec.Syscalls, labels); err != nil {
		return nil, &ProfileError{Path: path, Entry: err.entry, Err: err}
	}
	return &Program{Name: path, Filter: full, Notify: notify}, nil
}

// buildProfile adds the converted rules to a libseccomp filter the way
// libcontainer's InitSeccomp does (which loads the filter into the calling
// process, so it cannot serve here), and returns the BPF and the highest
// native syscall number the profile names.
func buildProfile(cfg *configs.Seccomp, labels []string, native libseccomp.ScmpArch, perr func(string, string, ...any) error) ([]byte, uint32, error) {
	defAct, err := scmpAction(cfg.DefaultAction, cfg.DefaultErrnoRet)
	if err != nil {
		return nil, 0, perr("defaultAction", "%v", err)
	}
	f, err := libseccomp.NewFilter(defAct)
	if err != nil {
		return nil, 0, fmt.Errorf("new filter: %w", err)
	}
	defer f.Release()
	// Architectures before rules: a rule added first would exist only for
	// the native architecture, and another ABI would bypass it.
	for i, a := range cfg.Architectures {
		arch, err := libseccomp.GetArchFromString(a)
		if err != nil {
			return nil, 0, perr(fmt.Sprintf("architectures[%d]", i), "%v", err)
		}
		if present, _ := f.IsArchPresent(arch); present {
			continue
		}
		if err := f.AddArch(arch); err != nil {
			return nil, 0, perr(fmt.Sprintf("architectures[%d]", i), "%v", err)
		}
	}
	if err := f.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		return nil, 0, err
	}
	if err := f.SetNoNewPrivsBit(false); err != nil {
		return nil, 0, err
	}
	if len(cfg.Syscalls) > 32 {
		_ = f.SetOptimize(2) // libseccomp < 2.5.4 misbehaves with a tree and no rules
	}
	var maxNr uint32
	for k, call := range cfg.Syscalls {
		label := labels[k]
		act, err := scmpAction(call.Action, call.ErrnoRet)
		if err != nil {
			return nil, 0, perr(label, "%v", err)
		}
		nr, err := libseccomp.GetSyscallFromName(call.Name)
		if err != nil {
			// Unknown to libseccomp: a syscall this system does not
			// have, or a typo. libcontainer ignores it; so do we.
			continue
		}
		if n, err := libseccomp.GetSyscallFromNameByArch(call.Name, native); err == nil && uint32(n) > maxNr && uint32(n) < x32Bit {
			maxNr = uint32(n)
		}
		if act == defAct {
			continue // redundant: libseccomp would refuse it
		}
		if err := addRule(f, nr, act, call.Args); err != nil {
			return nil, 0, perr(label, "%s: %v", call.Name, err)
		}
	}
	prog, err := exportBPF(f)
	if err != nil {
		return nil, 0, err
	}
	return prog, maxNr, nil
}

// addRule is libcontainer's matchCall: conditions on distinct arguments go
// in one rule; if an argument is tested twice, each condition becomes its
// own rule (libseccomp cannot test one argument twice in a rule).
func addRule(f *libseccomp.ScmpFilter, nr libseccomp.ScmpSyscall, act libseccomp.ScmpAction, args []*configs.Arg) error {
	if len(args) == 0 {
		return f.AddRule(nr, act)
	}
	var conds []libseccomp.ScmpCondition
	var perArg [6]int
	for _, a := range args {
		op, err := scmpOperator(a.Op)
		if err != nil {
			return err
		}
		c, err := libseccomp.MakeCondition(a.Index, op, a.Value, a.ValueTwo)
		if err != nil {
			return err
		}
		perArg[a.Index]++
		conds = append(conds, c)
	}
	for _, n := range perArg {
		if n > 1 {
			for _, c := range conds {
				if err := f.AddRuleConditional(nr, act, []libseccomp.ScmpCondition{c}); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return f.AddRuleConditional(nr, act, conds)
}

// scmpAction maps a libcontainer action to libseccomp's, as libcontainer
// does (SCMP_ACT_KILL kills the thread; errno defaults to EPERM).
func scmpAction(act configs.Action, errnoRet *uint) (libseccomp.ScmpAction, error) {
	errno := int16(unix.EPERM)
	if errnoRet != nil {
		if *errnoRet > 4095 {
			return libseccomp.ActInvalid, fmt.Errorf("errnoRet %d out of range", *errnoRet)
		}
		errno = int16(*errnoRet)
	}
	switch act {
	case configs.Kill, configs.KillThread:
		return libseccomp.ActKillThread, nil
	case configs.KillProcess:
		return libseccomp.ActKillProcess, nil
	case configs.Errno:
		return libseccomp.ActErrno.SetReturnCode(errno), nil
	case configs.Trap:
		return libseccomp.ActTrap, nil
	case configs.Allow:
		return libseccomp.ActAllow, nil
	case configs.Trace:
		return libseccomp.ActTrace.SetReturnCode(errno), nil
	case configs.Log:
		return libseccomp.ActLog, nil
	case configs.Notify:
		return libseccomp.ActNotify, nil
	}
	return libseccomp.ActInvalid, errors.New("invalid action")
}

func scmpOperator(op configs.Operator) (libseccomp.ScmpCompareOp, error) {
	switch op {
	case configs.EqualTo:
		return libseccomp.CompareEqual, nil
	case configs.NotEqualTo:
		return libseccomp.CompareNotEqual, nil
	case configs.GreaterThan:
		return libseccomp.CompareGreater, nil
	case configs.GreaterThanOrEqualTo:
		return libseccomp.CompareGreaterEqual, nil
	case configs.LessThan:
		return libseccomp.CompareLess, nil
	case configs.LessThanOrEqualTo:
		return libseccomp.CompareLessOrEqual, nil
	case configs.MaskEqualTo:
		return libseccomp.CompareMaskedEqual, nil
	}
	return libseccomp.CompareInvalid, errors.New("invalid operator")
}

// needsEnosysStub is patchbpf's rule: syscalls newer than the profile get
// ENOSYS unless the default action already allows (a profile that allows
// by default lets new syscalls through) or already answers ENOSYS.
func needsEnosysStub(cfg *configs.Seccomp) bool {
	if cfg.DefaultErrnoRet != nil && *cfg.DefaultErrnoRet == uint(unix.ENOSYS) {
		return false
	}
	switch cfg.DefaultAction {
	case configs.Allow, configs.Log, configs.Trace:
		return false
	}
	return true
}

type essentialError struct {
	entry string
	name  string
	ret   uint32
}

func (e *essentialError) Error() string {
	return fmt.Sprintf("refuses %s (%s), which the sandbox needs to start the program: allow it", e.name, describeRet(e.ret))
}

// checkEssential runs the compiled filter over the syscalls the sandbox
// makes after loading it, and names the entry that refuses one.
func checkEssential(filter []byte, native libseccomp.ScmpArch, notify bool, calls []specs.LinuxSyscall, labels []string) *essentialError {
	prog, err := decode(filter)
	if err != nil {
		return &essentialError{entry: "", name: "?", ret: 0}
	}
	names := essential
	if notify {
		names = append(names, essentialNotify...)
	}
	for _, name := range names {
		nr, err := libseccomp.GetSyscallFromNameByArch(name, native)
		if err != nil {
			continue
		}
		c := call{Nr: uint32(nr), Arch: auditArch(native)}
		ret, err := eval(prog, &c)
		if err != nil {
			return &essentialError{entry: "", name: name, ret: 0}
		}
		if act := ret & retActionFull; act == retAllow || act == unix.SECCOMP_RET_LOG {
			continue
		}
		entry := "defaultAction"
		k := 0
		for _, sc := range calls {
			for _, n := range sc.Names {
				if n == name {
					entry = labels[k]
				}
				k++
			}
		}
		return &essentialError{entry: entry, name: name, ret: ret}
	}
	return nil
}

func describeRet(ret uint32) string {
	switch ret & retActionFull {
	case retKillProcess:
		return "kill process"
	case unix.SECCOMP_RET_KILL_THREAD:
		return "kill thread"
	case unix.SECCOMP_RET_TRAP:
		return "trap"
	case retErrno:
		return "errno " + unix.ErrnoName(unix.Errno(ret&unix.SECCOMP_RET_DATA))
	case retUserNotif:
		return "notify"
	case unix.SECCOMP_RET_TRACE:
		return "trace"
	case unix.SECCOMP_RET_LOG:
		return "log"
	case retAllow:
		return "allow"
	}
	return fmt.Sprintf("%#x", ret)
}

// dockerSkips applies Docker's includes/excludes to an entry: the box has
// no capabilities, runs this architecture (runtime.GOARCH names, as
// Docker's profiles use them) and this kernel.
func dockerSkips(ds *dockerSyscall, kernel [2]int) (bool, error) {
	if in := ds.Includes; in != nil {
		if len(in.Caps) > 0 {
			return true, nil // only for boxes holding capabilities: never ours
		}
		if len(in.Arches) > 0 && !slices.Contains(in.Arches, runtime.GOARCH) {
			return true, nil
		}
		if in.MinKernel != "" {
			v, err := parseKernel(in.MinKernel)
			if err != nil {
				return false, fmt.Errorf("includes.minKernel: %v", err)
			}
			if kernelLess(kernel, v) {
				return true, nil
			}
		}
	}
	if ex := ds.Excludes; ex != nil {
		if len(ex.Arches) > 0 && slices.Contains(ex.Arches, runtime.GOARCH) {
			return true, nil
		}
		if ex.MinKernel != "" {
			v, err := parseKernel(ex.MinKernel)
			if err != nil {
				return false, fmt.Errorf("excludes.minKernel: %v", err)
			}
			if !kernelLess(kernel, v) {
				return true, nil
			}
		}
		// excludes.caps: the box holds no capability, so nothing excludes.
	}
	return false, nil
}

func parseKernel(s string) ([2]int, error) {
	var v [2]int
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return v, fmt.Errorf("%q is not a kernel version like 5.8", s)
	}
	for i := 0; i < 2; i++ {
		digits := parts[i]
		if j := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			digits = digits[:j]
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			return v, fmt.Errorf("%q is not a kernel version like 5.8", s)
		}
		v[i] = n
	}
	return v, nil
}

func kernelLess(a, b [2]int) bool {
	return a[0] < b[0] || a[0] == b[0] && a[1] < b[1]
}

func kernelVersion() [2]int {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return [2]int{}
	}
	v, _ := parseKernel(unix.ByteSliceToString(u.Release[:]))
	return v
}

// scmpArchName maps an SCMP_ARCH_* name to libseccomp's own name of the
// architecture (ScmpArch.String), e.g. SCMP_ARCH_X86_64 -> amd64.
func scmpArchName(a specs.Arch) string {
	s, err := lcseccomp.ConvertStringToArch(string(a))
	if err != nil {
		return ""
	}
	return s
}

// unwrapOCIConfig returns linux.seccomp when data is a whole OCI config.json.
func unwrapOCIConfig(data []byte) []byte {
	var cfg struct {
		Linux *struct {
			Seccomp json.RawMessage `json:"seccomp"`
		} `json:"linux"`
	}
	if json.Unmarshal(data, &cfg) == nil && cfg.Linux != nil && len(cfg.Linux.Seccomp) > 0 {
		return cfg.Linux.Seccomp
	}
	return data
}

func strictDecode(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// jsonError adds the line and column to a JSON syntax error.
func jsonError(data []byte, err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of file (an unclosed { or [?)"
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	off := int64(-1)
	if errors.As(err, &se) {
		off = se.Offset
	} else if errors.As(err, &te) {
		off = te.Offset
	}
	if off < 0 || off > int64(len(data)) {
		return err.Error()
	}
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - int64(bytes.LastIndexByte(data[:off], '\n'))
	return fmt.Sprintf("line %d, column %d: %v", line, col, err)
}
