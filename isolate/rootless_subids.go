package isolate

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Subordinate ids, for a run without root: where the caller has a range
// in /etc/subuid and in /etc/subgid (shadow's name:start:count, by name or
// uid) and the setuid newuidmap and newgidmap exist (Debian's uidmap), the
// box user is a subordinate uid and gid of the caller's instead of the
// caller: box id N gets the range's N-th (wrapping round in a range
// smaller than the box ids), so that boxes of the user running at once
// have a host uid each that no one else has. The kernel lets an
// unprivileged process map only its own id: init runs the tools, which
// check the ranges and leave setgroups allowed, so the program's
// supplementary groups are dropped as in root's boxes. The box's uid 0 is
// the caller, whose rights the supervisor keeps: it fills /box and /tmp
// while they are uid 0's, and PID 1 hands them to the box user when the
// program starts and back once the box is reaped (HAND_OVER, protocol.h).

// Subordinate id files, as shadow's tools read them.
var (
	subUIDFile = "/etc/subuid"
	subGIDFile = "/etc/subgid"
)

// subIDs is a user's subordinate ranges and the tools that map them.
type subIDs struct {
	uid, gid             idRange
	newuidmap, newgidmap string
}

// idRange is a range of subordinate ids: count ids from start.
type idRange struct{ start, count int }

// of is box id box's id in the range.
func (r idRange) of(box int) int { return r.start + box%r.count }

// SubIDStatus says whether the runs without root of the user this
// process runs as have a subordinate id as box user and, if not, why
// and what would give them one.
type SubIDStatus struct {
	// Used: they do, UIDs and GIDs being the ranges (start-end).
	Used        bool
	UIDs, GIDs  string
	Why, Remedy string
}

// CheckSubIDs is SubIDStatus of the user this process runs as.
func CheckSubIDs(cfg *Config) SubIDStatus {
	sub, why, remedy := findSubIDs(cfg, os.Getuid(), os.Getgid())
	if sub == nil {
		return SubIDStatus{Why: why, Remedy: remedy}
	}
	span := func(r idRange) string { return fmt.Sprintf("%d-%d", r.start, r.start+r.count-1) }
	return SubIDStatus{Used: true, UIDs: span(sub.uid), GIDs: span(sub.gid)}
}

// findSubIDs finds the ranges and tools of user uid (whose gid is gid);
// without them, why not and, when the host lacks them, what as root
// would add them.
func findSubIDs(cfg *Config, uid, gid int) (*subIDs, string, string) {
	if cfg != nil && cfg.NoSubIDs {
		return nil, "use_subids = 0 in " + cfg.Path, ""
	}
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return nil, fmt.Sprintf("uid %d has no user name: %v", uid, err), ""
	}
	name := u.Username
	// newgidmap maps only for a process whose gid is the user's own.
	if u.Gid != strconv.Itoa(gid) {
		return nil, fmt.Sprintf("gid %d is not %s's own (%s), which newgidmap requires", gid, name, u.Gid), ""
	}
	var missing []string
	sub := &subIDs{}
	for _, t := range []struct {
		name string
		path *string
	}{{"newuidmap", &sub.newuidmap}, {"newgidmap", &sub.newgidmap}} {
		if *t.path = findSetuidTool(t.name); *t.path == "" {
			missing = append(missing, t.name)
		}
	}
	var why []string
	remedy := ""
	if len(missing) > 0 {
		why = append(why, "no setuid "+strings.Join(missing, " or "))
		remedy = "`apt install uidmap`"
	}
	var ok [2]bool
	sub.uid, ok[0] = subRange(subUIDFile, name, uid)
	sub.gid, ok[1] = subRange(subGIDFile, name, uid)
	if !ok[0] || !ok[1] {
		why = append(why, "no range for "+name+" in "+subUIDFile+" and "+subGIDFile)
		line := fmt.Sprintf("`echo %s:%d:65536 | tee -a %s %s`", name, freeSubStart(), subUIDFile, subGIDFile)
		if remedy == "" {
			remedy = line
		} else {
			remedy += " and " + line
		}
	}
	if len(why) > 0 {
		return nil, strings.Join(why, ", "), remedy
	}
	return sub, "", ""
}

// findSetuidTool is the absolute path of name, setuid root, from PATH or
// /usr/bin; "" if there is none.
func findSetuidTool(name string) string {
	for _, p := range []string{name, "/usr/bin/" + name} {
		path, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		if path, err = filepath.Abs(path); err != nil {
			continue
		}
		fi, err := os.Stat(path)
		if st, ok := fi.Sys().(*syscall.Stat_t); err == nil && ok && fi.Mode()&os.ModeSetuid != 0 && st.Uid == 0 {
			return path
		}
	}
	return ""
}

// subRange is the first range of user name (or uid) in file, as shadow
// reads it: name:start:count lines, the user by name or by number.
func subRange(file, name string, uid int) (idRange, bool) {
	f, err := os.Open(file)
	if err != nil {
		return idRange{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(fields) != 3 || (fields[0] != name && fields[0] != strconv.Itoa(uid)) {
			continue
		}
		start, err1 := strconv.ParseUint(fields[1], 10, 32)
		count, err2 := strconv.ParseUint(fields[2], 10, 32)
		if err1 != nil || err2 != nil || count < 1 || start+count > 1<<32-1 {
			continue
		}
		return idRange{int(start), int(count)}, true
	}
	return idRange{}, false
}

// freeSubStart is where a new range of 65536 may start: after every
// range of both files, from 524288 on (the first ranges Debian's useradd
// gives start at 100000).
func freeSubStart() int {
	start := 524288
	for _, file := range []string{subUIDFile, subGIDFile} {
		data, _ := os.ReadFile(file)
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Split(strings.TrimSpace(line), ":")
			if len(f) != 3 {
				continue
			}
			s, err1 := strconv.Atoi(f[1])
			n, err2 := strconv.Atoi(f[2])
			if err1 == nil && err2 == nil && s+n > start {
				start = (s + n + 65535) &^ 65535
			}
		}
	}
	return start
}

// subIDs is the subordinate ids of this run's box user, nil for the
// caller's own: a session keeps the caller (its files are handled between
// commands without a hand-over). A box built ahead maps what the run that
// claims it would map had it built its own box: the same box user, the
// same hand-over, and PID 1 (the box's uid 0) another uid than the
// program's.
func (s *supervisor) subIDs() *subIDs {
	if r := s.host.rootless; r != nil && !s.session {
		return r.sub
	}
	return nil
}
