package hostfs

// Host-side opens for a front end that acts for a caller other than this
// process (the service running a command line handed over to it): the
// same per-thread file-system credentials as the runtime's own opens.

// AsCaller runs fn with caller's file-system credentials, on a locked
// thread of its own that no other goroutine runs on meanwhile; with a nil
// caller, fn runs as it is, with this process's.
func AsCaller(caller *Cred, fn func() error) error {
	if caller == nil {
		return fn()
	}
	return WithFSThread(func(t *FSThread) error {
		if err := t.Become(*caller); err != nil {
			return err
		}
		return fn()
	})
}
