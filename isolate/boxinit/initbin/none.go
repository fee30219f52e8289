//go:build !initbin

package initbin

// Binary returns nil: this build embeds no small init (see doc.go).
func Binary() []byte { return nil }
