package cmdline

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestFlagNamesAsCLI: flagNames gives what urfave/cli's FlagNames gives,
// for plain names, aliases and the v1 forms its regexp cuts.
func TestFlagNamesAsCLI(t *testing.T) {
	cases := []struct {
		name    string
		aliases []string
	}{
		{"time", nil}, {"time", []string{"t"}}, {"mem", []string{"m", "memory"}},
		{"a, b", nil}, {"x y", []string{"z,w", " v"}}, {"", nil}, {"trailing,", []string{"lead ing"}},
	}
	for _, c := range cases {
		got, want := flagNames(c.name, c.aliases), cli.FlagNames(c.name, c.aliases)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("flagNames(%q, %q) = %q, want %q", c.name, c.aliases, got, want)
		}
	}
}

// BenchmarkParse: what parsing a run's command line costs (it ends in a
// usage error: no command), with no box.
func BenchmarkParse(b *testing.B) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	for i := 0; i < b.N; i++ {
		Main(context.Background(), &Invocation{Args: []string{"isolate", "run", "--json", "-t", "1", "--"},
			Env: []string{"PATH=/bin"}, Dir: "/", Stdin: null, Stdout: null, Stderr: null})
	}
}
