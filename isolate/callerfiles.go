package isolate

import "github.com/isolate-sandbox/isolate/isolate/hostfs"

// Cred are the file-system credentials of whoever a run's host files
// are opened for (see hostfs.Cred).
type Cred = hostfs.Cred

// boxCred is the host identity of box id's program: FirstUID+id, no
// supplementary groups.
func boxCred(id int) Cred { return Cred{UID: FirstUID + id, GID: FirstUID + id} }

// SetCaller makes caller whose rights the run's host paths (copy-in
// sources, copy-out destinations) are opened with; nil: this process's.
func (p *Prepared) SetCaller(caller *Cred) { p.spec.Caller = caller }
