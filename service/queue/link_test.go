package queue

import (
	"debug/buildinfo"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneShotCLILinksNoRedis: the Redis client is isolate-serve's alone;
// the one-shot isolate links none of it.
func TestOneShotCLILinksNoRedis(t *testing.T) {
	bin := os.Getenv("ISOLATE_BIN")
	if bin == "" {
		t.Skip("ISOLATE_BIN: the isolate binary, with isolate-serve beside it")
	}
	links := func(path string) bool {
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range info.Deps {
			if strings.HasPrefix(d.Path, "github.com/redis/go-redis") {
				return true
			}
		}
		return false
	}
	if links(bin) {
		t.Errorf("%s links go-redis", bin)
	}
	if serve := filepath.Join(filepath.Dir(bin), "isolate-serve"); !links(serve) {
		t.Errorf("%s does not link go-redis: the check sees nothing", serve)
	}
}
