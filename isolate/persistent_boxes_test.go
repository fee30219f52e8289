package isolate_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
)

// A run that chooses no box id never takes the id of a persistent box
// (`isolate init` made it): that id is its owner's, whose --run needs it.
func TestFreeIDSkipsPersistentBoxes(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	const persistent = 100 // more than the boxes other tests hold at once
	for id := 0; id < persistent; id++ {
		if err := os.MkdirAll(filepath.Join(root, strconv.Itoa(id), "box"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h, err := isolate.NewHost(&isolate.Config{BoxRoot: root, NumBoxes: isolate.DefaultNumBoxes})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := h.Run(context.Background(), &api.Spec{Args: []string{"/bin/true"}}, isolate.IO{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != api.StatusOK || rep.BoxID < persistent {
		t.Errorf("%s %q in box %d: want a box id of %d or more", rep.Status, rep.Message, rep.BoxID, persistent)
	}
}
