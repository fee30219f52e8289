package boxinit

import (
	"strconv"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// DecodeMessage reads one of init's status lines, as init_io.c writes
// them: a JSON object whose values are strings, integers and, for stages,
// an object of integers. It is decoded by hand: encoding/json's first use
// in a process (its reflection over Message) costs about 1 % of a
// one-shot run's CPU. Keys it does not know are skipped; a line that is
// not such an object is refused (false), as encoding/json would refuse it.
func DecodeMessage(line []byte) (Message, bool) {
	var m Message
	d := msgDecoder{b: line}
	ok := d.object(func(key string) bool {
		switch key {
		case "type":
			m.Type = d.str()
		case "step":
			m.Step = d.str()
		case "op":
			m.Op = d.str()
		case "path":
			m.Path = d.str()
		case "err":
			m.Err = d.str()
		case "exec_err":
			m.ExecErr = d.str()
		case "id":
			m.ID = uint64(d.integer(0, 1<<63-1))
		case "pid":
			m.Pid = int(d.int64())
		case "errno":
			m.Errno = int(d.int64())
		case "ws":
			m.WaitStatus = uint32(d.integer(0, 1<<32-1))
		case "exec_ns":
			m.ExecNs = d.int64()
		case "wall_ns":
			m.WallNs = d.int64()
		case "utime_ns":
			m.UserNs = d.int64()
		case "stime_ns":
			m.SysNs = d.int64()
		case "maxrss_kb":
			m.MaxRSS = d.int64()
		case "nvcsw":
			m.NVCSW = d.int64()
		case "nivcsw":
			m.NIVCSW = d.int64()
		case "stages":
			m.Stages = map[string]int64{}
			return d.object(func(stage string) bool {
				m.Stages[stage] = d.int64()
				return d.ok
			})
		default:
			d.skip()
		}
		return d.ok
	})
	d.space()
	return m, ok && d.i == len(d.b)
}

// msgDecoder reads b from i; ok turns false at the first thing it cannot
// read, and stays false.
type msgDecoder struct {
	b  []byte
	i  int
	ok bool
}

func (d *msgDecoder) space() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\r' || d.b[d.i] == '\n') {
		d.i++
	}
}

// next is the next byte after spaces (0 at the end).
func (d *msgDecoder) next() byte {
	d.space()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// expect consumes c, or fails.
func (d *msgDecoder) expect(c byte) bool {
	if d.next() != c {
		d.ok = false
		return false
	}
	d.i++
	return true
}

// object reads {"key": value, ...}, calling member at each value.
func (d *msgDecoder) object(member func(key string) bool) bool {
	d.ok = true
	if !d.expect('{') {
		return false
	}
	if d.next() == '}' {
		d.i++
		return true
	}
	for {
		key := d.str()
		if !d.ok || !d.expect(':') || !member(key) {
			d.ok = false
			return false
		}
		switch d.next() {
		case ',':
			d.i++
		case '}':
			d.i++
			return true
		default:
			d.ok = false
			return false
		}
	}
}

// str reads a JSON string; bytes that are not UTF-8 become U+FFFD, as
// encoding/json makes them.
func (d *msgDecoder) str() string {
	if !d.expect('"') {
		return ""
	}
	start := d.i
	for d.i < len(d.b) && d.b[d.i] != '"' && d.b[d.i] != '\\' && d.b[d.i] >= 0x20 && d.b[d.i] < utf8.RuneSelf {
		d.i++
	}
	if d.i < len(d.b) && d.b[d.i] == '"' {
		d.i++
		return string(d.b[start : d.i-1])
	}
	out := append([]byte(nil), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return string(out)
		case c < 0x20:
			d.ok = false
			return ""
		case c == '\\':
			if d.i+1 >= len(d.b) {
				d.ok = false
				return ""
			}
			e := d.b[d.i+1]
			d.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					d.ok = false
					return ""
				}
				if r >= 0xd800 && r < 0xdc00 && d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
					save := d.i
					d.i += 2
					if lo, ok := d.hex4(); ok && lo >= 0xdc00 && lo < 0xe000 {
						r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
					} else {
						d.i = save
					}
				}
				if r >= 0xd800 && r < 0xe000 {
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
			default:
				d.ok = false
				return ""
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			d.i++
		default:
			r, n := utf8.DecodeRune(d.b[d.i:])
			out = utf8.AppendRune(out, r)
			d.i += n
		}
	}
	d.ok = false
	return ""
}

// hex4 reads the four hex digits of a \u escape.
func (d *msgDecoder) hex4() (rune, bool) {
	if d.i+4 > len(d.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(d.b[d.i:d.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	d.i += 4
	return rune(v), true
}

// number is the text of a JSON number.
func (d *msgDecoder) number() string {
	d.space()
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		if (c < '0' || c > '9') && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' {
			break
		}
		d.i++
	}
	return string(d.b[start:d.i])
}

// integer reads an integer from lo to hi; anything else fails, as
// encoding/json fails on a number its field cannot hold.
func (d *msgDecoder) integer(lo, hi int64) int64 {
	text := d.number()
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil || v < lo || v > hi || !jsonNumber(text) {
		d.ok = false
		return 0
	}
	return v
}

func (d *msgDecoder) int64() int64 { return d.integer(-1<<63, 1<<63-1) }

// skip reads a value of a key it does not know: a string, a number,
// true, false, null, or an object or array of them.
func (d *msgDecoder) skip() {
	switch c := d.next(); {
	case c == '"':
		d.str()
	case c == '{':
		d.object(func(string) bool { d.skip(); return d.ok })
	case c == '[':
		d.i++
		if d.next() == ']' {
			d.i++
			return
		}
		for d.ok {
			d.skip()
			switch d.next() {
			case ',':
				d.i++
			case ']':
				d.i++
				return
			default:
				d.ok = false
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		if !jsonNumber(d.number()) {
			d.ok = false
		}
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
				d.i += len(lit)
				return
			}
		}
		d.ok = false
	}
}

// jsonNumber tells whether text is a JSON number:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func jsonNumber(text string) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(text) && text[i] >= '0' && text[i] <= '9' {
			i, n = i+1, n+1
		}
		return n
	}
	if i < len(text) && text[i] == '-' {
		i++
	}
	if i < len(text) && text[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(text) && text[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(text) && (text[i] == 'e' || text[i] == 'E') {
		i++
		if i < len(text) && (text[i] == '+' || text[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(text)
}

// ExecTime is when init saw the program's execve return: m says so on
// the host's CLOCK_MONOTONIC, which Go's clock reads too but does not
// show. Init tells a start late; without a time (a program that could not
// be started), now. Never before the command was sent.
func ExecTime(m *Message, sent time.Time) time.Time {
	now := time.Now()
	var ts unix.Timespec
	if m.ExecNs <= 0 || unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return now
	}
	at := now.Add(-time.Duration(ts.Nano() - m.ExecNs))
	if at.Before(sent) {
		return sent
	}
	if at.After(now) {
		return now
	}
	return at
}
