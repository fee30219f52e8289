package isolate

import "testing"

// What a run leaves in a kept network namespace, read from its /proc/net
// files as the kernel writes them.
func TestNoSocketsLeft(t *testing.T) {
	const (
		stat = "sockets: used 2\nTCP: inuse 0 orphan 3 tw 0 alloc 9 mem 0\nUDP: inuse 1 mem 0\n" +
			"UDPLITE: inuse 0\nRAW: inuse 0\nFRAG: inuse 0 memory 0\n"
		stat6 = "TCP6: inuse 0\nUDP6: inuse 0\nUDPLITE6: inuse 0\nRAW6: inuse 0\nFRAG6: inuse 0 memory 0\n"
		// The next box's PID 1: a connected pair without names.
		unixPair = "Num       RefCount Protocol Flags    Type St Inode Path\n" +
			"0000000000d22ae0: 00000003 00000000 00000000 0005 03 48897924\n" +
			"0000000023a69499: 00000003 00000000 00000000 0005 03 48897925\n"
		unixNamed = unixPair + "00000000a1b2c3d4: 00000002 00000000 00010000 0001 01 48897930 @judge\n"
	)
	for _, c := range []struct {
		name             string
		stat, stat6, uds string
		want             bool
	}{
		{"nothing of the run's (orphans and allocations are the host's counts)", stat, stat6, unixPair, true},
		{"no IPv6", stat, "", unixPair, true},
		{"a TCP socket", "TCP: inuse 1 orphan 0 tw 0 alloc 1 mem 1\n", stat6, unixPair, false},
		{"one in TIME_WAIT", "TCP: inuse 0 orphan 0 tw 1 alloc 0 mem 0\n", stat6, unixPair, false},
		{"an IPv6 one", stat, "TCP6: inuse 2\n", unixPair, false},
		{"a unix socket with a name", stat, stat6, unixNamed, false},
		{"no TCP line", "sockets: used 0\n", stat6, unixPair, false},
		{"a TCP line cut short", "TCP: inuse 0 orphan 0 tw\n", stat6, unixPair, false},
	} {
		if got := noSocketsLeft(c.stat, c.stat6, c.uds); got != c.want {
			t.Errorf("%s: noSocketsLeft = %v", c.name, got)
		}
	}
}
