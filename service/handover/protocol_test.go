package handover

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// The C client's protocol.h and this package's constants agree.
func TestProtocolHeaderAgrees(t *testing.T) {
	h, err := os.ReadFile("protocol.h")
	if err != nil {
		t.Fatal(err)
	}
	defines := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^#define (HANDOVER_\w+) (\S+)`).FindAllStringSubmatch(string(h), -1) {
		defines[m[1]] = m[2]
	}
	for name, want := range map[string]int64{
		"HANDOVER_MAGIC": magic, "HANDOVER_MAX_BODY": maxBody, "HANDOVER_NFDS": nfds,
		"HANDOVER_ACCEPTED": tagAccepted, "HANDOVER_DECLINED": tagDeclined, "HANDOVER_EXIT": tagExit,
	} {
		v := defines[name]
		var got int64
		switch {
		case len(v) == 3 && v[0] == '\'':
			got = int64(v[1])
		default:
			got, err = strconv.ParseInt(regexp.MustCompile(`u$`).ReplaceAllString(v, ""), 0, 64)
			if err != nil {
				t.Errorf("%s: %q: %v", name, v, err)
				continue
			}
		}
		if got != want {
			t.Errorf("%s is %q (%d) in protocol.h, %d in Go", name, v, got, want)
		}
	}
}

// Requests round-trip, and truncated or inconsistent bodies are refused.
func TestRequestCoding(t *testing.T) {
	r := &request{build: "b", dir: "/d", cpus: "0f", umask: "0022", args: []string{"isolate", "run", ""}, env: []string{"A=1"}}
	enc := encodeRequest(r)
	n, err := bodyLength(enc[:headerSize])
	if err != nil || n != len(enc)-headerSize {
		t.Fatalf("body length %d (%v), want %d", n, err, len(enc)-headerSize)
	}
	got, err := decodeRequest(enc[headerSize:])
	if err != nil || got.build != "b" || got.dir != "/d" || got.cpus != "0f" || got.umask != "0022" || len(got.args) != 3 || got.args[2] != "" || len(got.env) != 1 {
		t.Fatalf("decoded %+v (%v)", got, err)
	}
	body := enc[headerSize:]
	for _, bad := range [][]byte{body[:4], body[:len(body)-1], append(append([]byte{}, body...), 'x', 0)} {
		if _, err := decodeRequest(bad); err == nil {
			t.Errorf("decoded the bad body %q", bad)
		}
	}
	if _, err := bodyLength([]byte("GET / HT")); err == nil {
		t.Error("took an HTTP request for a handover")
	}
}
