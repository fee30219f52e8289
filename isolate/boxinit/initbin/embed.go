//go:build initbin

package initbin

import _ "embed"

// isolate-init is generated (scripts/build-init.sh) and not committed.
//
//go:embed isolate-init
var binary []byte

// Binary returns the small init executable.
func Binary() []byte { return binary }
