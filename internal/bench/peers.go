package bench

// Peers: other sandboxes measured in the same interleaved rounds as
// isolate, each in the form its users run it. ioi/isolate as judges
// (CMS, Judge0, Piston) use it: a box initialised once, `--run` on it
// every round, cleaned up at the end. go-judge as its callers use it:
// POST /run of one command. The bench installs and starts neither: a
// peer that is not there is skipped with one line saying what to install.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/isolate-sandbox/isolate/cgroup"
)

// Names of the peers' variants.
const (
	VarIOI       = "ioi/isolate --run, initialised box"
	VarIOICg     = "ioi/isolate --cg --run, initialised box"
	VarGoJudge   = "go-judge POST /run"
	ioiInstall   = "ioi/isolate not found (build it from github.com/ioi/isolate and put it on PATH, or give --ioi PATH)"
	goJudgeGiven = "no go-judge URL (start go-judge and give --go-judge URL)"
)

// IOIBox is the box id the bench initialises in ioi/isolate (its default
// configuration has boxes 0-999; judges count up from 0). Its --cg form
// takes IOICgBox: ioi/isolate records in a box's lock whether it was
// initialised with --cg and refuses the other mode on it.
const (
	IOIBox   = 999
	IOICgBox = 992
)

// Peers is which peers to measure.
type Peers struct {
	// IOI is ioi/isolate's binary; "" looks for one on PATH.
	IOI string
	// GoJudge is the base URL of a running go-judge; "" skips it.
	GoJudge string
}

// ParseGoJudgeURL checks a --go-judge URL: http, with a host (the bench
// speaks plain HTTP/1.1, so the isolate binary links no net/http or TLS;
// go-judge listens on plain HTTP).
func ParseGoJudgeURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return "", fmt.Errorf("--go-judge %q: want the http:// URL of a go-judge", s)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// IsIOI says whether bin is ioi/isolate's, by its --version output:
// ioi's first line is "The process isolator VERSION"; ours says it is
// compatible with ioi/isolate.
func IsIOI(bin string) bool {
	out, err := exec.Command(bin, "--version").Output()
	return err == nil && isIOIVersion(string(out))
}

func isIOIVersion(out string) bool {
	return strings.HasPrefix(out, "The process isolator ") && !strings.Contains(out, "compatible with ioi/isolate")
}

// FindIOI looks for ioi/isolate on PATH: the first `isolate` there that is
// ioi's (ours may come first).
func FindIOI() (string, bool) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "isolate")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 && IsIOI(p) {
			return p, true
		}
	}
	return "", false
}

// peerSet is the peers' variants, what was skipped and why, and how to
// undo what the variants set up.
type peerSet struct {
	vs      []variant
	skipped map[string]string
	closers []func()
}

func (p *peerSet) close() {
	for _, c := range p.closers {
		c()
	}
}

// peers sets up the peers' variants: ioi/isolate's box initialised (also
// with --cg on a pure cgroup v2 host, the only one ioi/isolate 2.x takes
// cgroups on), go-judge answering.
func (c Peers) peers() (*peerSet, error) {
	ps := &peerSet{skipped: map[string]string{}}
	ioi := c.ioiBinary()
	if ioi == "" {
		ps.skipped[VarIOI] = ioiInstall
	} else {
		type form struct {
			name string
			box  int
			opts []string
		}
		forms := []form{{VarIOI, IOIBox, nil}}
		if cgroup.DetectMode() == cgroup.V2 {
			forms = append(forms, form{VarIOICg, IOICgBox, []string{"--cg"}})
		} else {
			ps.skipped[VarIOICg] = "ioi/isolate takes cgroups on pure cgroup v2 hosts only; this one is " + string(cgroup.DetectMode())
		}
		for _, f := range forms {
			v, done, err := ioiVariant(f.name, ioi, f.box, f.opts)
			if err != nil {
				ps.close()
				return nil, err
			}
			ps.vs = append(ps.vs, v)
			ps.closers = append(ps.closers, done)
		}
	}
	if c.GoJudge == "" {
		ps.skipped[VarGoJudge] = goJudgeGiven
	} else {
		v, err := goJudgeVariant(c.GoJudge)
		if err != nil {
			ps.close()
			return nil, err
		}
		ps.vs = append(ps.vs, v)
	}
	return ps, nil
}

// ioiBinary is ioi/isolate's binary: --ioi, else one found on PATH; ""
// when there is none.
func (c Peers) ioiBinary() string {
	if c.IOI != "" {
		return c.IOI
	}
	ioi, _ := FindIOI()
	return ioi
}

// ioiVariant initialises box id of ioi/isolate (bin, with opts) and
// returns the variant that runs /bin/true on it, and what cleans it up.
func ioiVariant(name, bin string, id int, opts []string) (variant, func(), error) {
	box := []string{bin, "--box-id=" + strconv.Itoa(id)}
	box = append(box, opts...)
	init := append(append([]string(nil), box...), "--init")
	if out, err := exec.Command(init[0], init[1:]...).CombinedOutput(); err != nil {
		return variant{}, nil, fmt.Errorf("%s: %v: %s", strings.Join(init, " "), err, lastLine(out))
	}
	cleanup := func() {
		c := append(append([]string(nil), box...), "--cleanup")
		exec.Command(c[0], c[1:]...).Run()
	}
	return variant{name: name, argv: append(append([]string(nil), box...), "--run", "--", "/bin/true")}, cleanup, nil
}

// goJudgeRequest is go-judge's POST /run body for /bin/true: no input,
// stdout and stderr collected, limits a judge would set.
const goJudgeRequest = `{"cmd":[{"args":["/bin/true"],"env":["PATH=/usr/bin:/bin"],` +
	`"files":[{"content":""},{"name":"stdout","max":10240},{"name":"stderr","max":10240}],` +
	`"cpuLimit":10000000000,"memoryLimit":268435456,"procLimit":50}]}`

// goJudgeVariant posts /bin/true to go-judge at base (http://HOST:PORT),
// once to check that it answers and runs it. The request is written by
// hand over one kept-alive connection, as the service's API is posted:
// the isolate binary links no net/http.
func goJudgeVariant(base string) (variant, error) {
	u, err := url.Parse(base) // checked by ParseGoJudgeURL
	if err != nil {
		return variant{}, err
	}
	path := strings.TrimSuffix(u.Path, "/") + "/run"
	var conn net.Conn
	var r *bufio.Reader
	post := func(*sink) (sample, error) {
		start := time.Now()
		if conn == nil {
			c, err := net.DialTimeout("tcp", u.Host, 30*time.Second)
			if err != nil {
				return sample{}, fmt.Errorf("go-judge at %s: %w", base, err)
			}
			conn, r = c, bufio.NewReader(c)
		}
		conn.SetDeadline(start.Add(30 * time.Second))
		code, body, err := postJSON(conn, r, u.Host, path, goJudgeRequest)
		took := sample{wall: time.Since(start)}
		if err != nil {
			conn.Close()
			conn = nil // dialled again by the next round
			return took, fmt.Errorf("go-judge at %s: %w", base, err)
		}
		return took, goJudgeStatus(code, body)
	}
	if _, err := post(nil); err != nil {
		return variant{}, err
	}
	return variant{name: VarGoJudge, argv: []string{"POST", base + "/run"}, run: post}, nil
}

// goJudgeStatus checks go-judge's answer: HTTP 200 and one result,
// Accepted.
func goJudgeStatus(code int, body []byte) error {
	if code != 200 {
		return fmt.Errorf("go-judge POST /run: HTTP %d: %s", code, lastLine(body))
	}
	var results []struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(body), &results); err != nil || len(results) != 1 {
		return fmt.Errorf("go-judge POST /run: not one result: %q", body)
	}
	if results[0].Status != "Accepted" {
		return errors.New("go-judge POST /run: /bin/true ended " + results[0].Status + " " + results[0].Error)
	}
	return nil
}
