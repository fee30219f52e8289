package boxinit

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Init's status lines decode as encoding/json decodes them: each message
// init writes, escapes, keys the decoder does not know, and lines it must
// refuse.
func TestDecodeInitMessageAsJSON(t *testing.T) {
	lines := []string{
		`{"type":"ready","pid":4242}`,
		`{"type":"started","stages":{"clone":120334,"mounts":833120,"exec":12},"pid":77,"exec_ns":918273645546372}`,
		`{"type":"started","stages":{},"pid":1}`,
		`{"type":"exited","id":3,"pid":77,"ws":35072,"wall_ns":1234567,"utime_ns":1000000,"stime_ns":0,"maxrss_kb":2048,"nvcsw":4,"nivcsw":0}`,
		`{"type":"exited","pid":77,"ws":32512,"wall_ns":5,"utime_ns":0,"stime_ns":0,"maxrss_kb":0,"nvcsw":0,"nivcsw":0,"exec_err":"/no/such: No such file or directory","step":"execve","errno":2}`,
		`{"type":"error","step":"bind /data on /box/d","op":"mount","path":"/r/\"q\"\\x\u0001\u001f","err":"Permission denied","errno":13}`,
		`{"type":"error","path":"caf\u00e9 \ud83d\ude00 \ud800 \u00e9\/\b\f\n\r\t","err":"x"}`,
		"{\"type\":\"error\",\"path\":\"bytes \xff\xfe and \xc3\xa9\",\"err\":\"x\"}",
		` { "type" : "ready" , "pid" : -1 } `,
		`{"type":"ready","later":{"a":[1,2.5e3,"s",true,false,null,{}]},"n":-0.5,"pid":9}`,
		`{}`,
		`{"pid":-0}`,
	}
	bad := []string{
		``, `{`, `}`, `{"type":}`, `{"type":"x"`, `{"type":"x",}`, `{"type" "x"}`, `["x"]`,
		`{"pid":1.5}`, `{"pid":1e3}`, `{"pid":01}`, `{"pid":+1}`, `{"ws":99999999999}`,
		`{"ws":-1}`, `{"id":-1}`, `{"type":"a\qb"}`, `{"type":"a\u12"}`, "{\"type\":\"a\nb\"}",
		`{"type":"x"} trailing`, `{"x":tru}`, `{"x":[1,}`,
	}
	for _, line := range lines {
		var want Message
		if err := json.Unmarshal([]byte(line), &want); err != nil {
			t.Fatalf("the test's line %q is not JSON for Message: %v", line, err)
		}
		got, ok := DecodeMessage([]byte(line))
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %+v (%v)\nwant %+v", line, got, ok, want)
		}
	}
	for _, line := range bad {
		var m Message
		if json.Unmarshal([]byte(line), &m) == nil {
			t.Fatalf("the test's bad line %q is JSON for Message", line)
		}
		if got, ok := DecodeMessage([]byte(line)); ok {
			t.Errorf("%q decoded as %+v, want refused", line, got)
		}
	}
}
