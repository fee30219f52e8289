package handover

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// The protocol's constants, as protocol.h (the C client's copy) has them;
// protocol_test.go checks that the two agree.
const (
	magic       = 0x314f4849 // "IHO1"
	maxBody     = 8 << 20
	nfds        = 4 // stdin, stdout, stderr, working directory
	tagAccepted = 'A'
	tagDeclined = 'D'
	tagExit     = 'X'
)

// maxStrings bounds a request's arguments and variables together: more
// than a command line can hold (ARG_MAX, 2 MiB of them and their
// pointers, is about 150 000 of the shortest).
const maxStrings = 1 << 18

// headerSize is the request's header: magic and body length.
const headerSize = 8

// answerSize is one answer of the service: tag, a, b.
const answerSize = 12

// fixedStrings are the strings before argv: build, dir, cpus, umask.
const fixedStrings = 4

// cpusHex is how a request carries a CPU affinity: the bytes of the
// kernel's mask (cpu_set_t) in hex, trailing zero bytes left out.
func cpusHex(set *unix.CPUSet) string {
	var b []byte
	for _, w := range set {
		b = binary.NativeEndian.AppendUint64(b, uint64(w))
	}
	return hex.EncodeToString(bytes.TrimRight(b, "\x00"))
}

// request is a decoded request body.
type request struct {
	build string // build id of the client's binary
	dir   string
	cpus  string // the caller's CPU affinity (cpusHex)
	umask string // the caller's umask, in octal (%04o)
	args  []string
	env   []string
}

// encodeRequest is the client's side (the C client's in Go, for tests):
// header and body.
func encodeRequest(r *request) []byte {
	var body bytes.Buffer
	binary.Write(&body, binary.NativeEndian, uint32(len(r.args)))
	binary.Write(&body, binary.NativeEndian, uint32(len(r.env)))
	for _, s := range append(append([]string{r.build, r.dir, r.cpus, r.umask}, r.args...), r.env...) {
		body.WriteString(s)
		body.WriteByte(0)
	}
	out := binary.NativeEndian.AppendUint32(nil, magic)
	out = binary.NativeEndian.AppendUint32(out, uint32(body.Len()))
	return append(out, body.Bytes()...)
}

// bodyLength checks a request's header and returns its body's length.
func bodyLength(h []byte) (int, error) {
	if binary.NativeEndian.Uint32(h) != magic {
		return 0, errors.New("not a handover request")
	}
	n := binary.NativeEndian.Uint32(h[4:])
	if n > maxBody {
		return 0, fmt.Errorf("request of %d bytes (at most %d)", n, maxBody)
	}
	return int(n), nil
}

// decodeRequest decodes a request's body.
func decodeRequest(body []byte) (*request, error) {
	if len(body) < 8 {
		return nil, errors.New("request too short")
	}
	argc := binary.NativeEndian.Uint32(body)
	envc := binary.NativeEndian.Uint32(body[4:])
	// Counted before anything is built: a body of NULs would otherwise be
	// millions of strings, 40 bytes of the service's memory each.
	if uint64(argc)+uint64(envc) > maxStrings {
		return nil, fmt.Errorf("request of %d arguments and %d variables (at most %d in all)", argc, envc, maxStrings)
	}
	if n := bytes.Count(body[8:], []byte{0}); uint64(n) != fixedStrings+uint64(argc)+uint64(envc) || body[len(body)-1] != 0 {
		return nil, fmt.Errorf("request does not hold %d+%d+%d strings", fixedStrings, argc, envc)
	}
	strs := bytes.Split(body[8:], []byte{0})
	s := make([]string, len(strs)-1)
	for i := range s {
		s[i] = string(strs[i])
	}
	if argc == 0 {
		return nil, errors.New("request without argv")
	}
	return &request{build: s[0], dir: s[1], cpus: s[2], umask: s[3], args: s[4 : 4+argc], env: s[4+argc:]}, nil
}

// answer encodes one answer of the service.
func answer(tag byte, a, b int32) []byte {
	out := binary.NativeEndian.AppendUint32(nil, uint32(tag))
	out = binary.NativeEndian.AppendUint32(out, uint32(a))
	return binary.NativeEndian.AppendUint32(out, uint32(b))
}

// decodeAnswer is the client's side of answer (for tests).
func decodeAnswer(b []byte) (tag byte, x, y int32) {
	return byte(binary.NativeEndian.Uint32(b)), int32(binary.NativeEndian.Uint32(b[4:])), int32(binary.NativeEndian.Uint32(b[8:]))
}
