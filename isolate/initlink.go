package isolate

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// initLink is the supervisor's end of the conversation with one init
// (doc.go): the control socket, init's status messages, and init itself.
type initLink struct {
	ctx  context.Context // the run's: its end interrupts the wait for init
	init *boxinit.Proc
	ctl  *os.File // control socket to init (the plan, then control bytes)
	msgs chan boxinit.Message
}

// pendingBox is a box whose plan's box part init has: it builds the box
// and then waits for the command part. The one-shot run sends the two
// parts back to back; a pool of boxes built ahead keeps pendingBoxes and
// starts each with its command when one comes.
type pendingBox struct {
	link      *initLink
	announced bool
}

// startBox sends init the box part of a plan (see supervisor.boxPlan),
// files attached (the descriptors it places, plan.placeFD).
func (l *initLink) startBox(boxPart *boxinit.Plan, files []*os.File) (*pendingBox, error) {
	if err := sendWithFiles(l.ctl, boxPart.Buf, files); err != nil {
		return nil, l.sendFailed("send the plan to init", err)
	}
	return &pendingBox{link: l, announced: boxPart.Announces}, nil
}

// ready waits until the box is built (only for a box part that asked init
// to say so) and returns its PID 1 in the host's PID namespace, through
// which its root can be filled.
func (b *pendingBox) ready() (pid int, err error) {
	if !b.announced {
		return 0, fmt.Errorf("box setup: the box part did not ask init to say %q", boxinit.MsgReady)
	}
	m, err := b.link.await(boxinit.MsgReady)
	return m.Pid, err
}

// start sends the command part, files attached (they are the
// descriptors it names by index), and waits until the program runs:
// init's "started", or "exited" for a program that could not be started.
// Once the command is sent, the end of the run's context does not cut
// that wait short: the program may be running already (its first output
// may be what made the caller signal), and supervise ends and accounts
// for it as for any interrupted run, whenever the signal came. Init
// answers within milliseconds, or setupTimeout ends the wait.
func (b *pendingBox) start(commandPart *boxinit.Plan, files []*os.File) (boxinit.Message, error) {
	if err := b.link.ctx.Err(); err != nil {
		return boxinit.Message{}, interruption(b.link.ctx)
	}
	if err := sendWithFiles(b.link.ctl, commandPart.Buf, files); err != nil {
		return boxinit.Message{}, b.link.sendFailed("send the command to init", err)
	}
	return b.link.awaitMessage(boxinit.MsgStarted, nil)
}

// sendWithFiles writes buf to the stream socket sock, the descriptors of
// files attached to its first bytes.
func sendWithFiles(sock *os.File, buf []byte, files []*os.File) error {
	if len(files) == 0 {
		_, err := sock.Write(buf)
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	n, err := unix.SendmsgN(int(sock.Fd()), buf, unix.UnixRights(fds...), nil, 0)
	if err != nil || n == len(buf) {
		// Nothing left: no empty write either, which fails with EPIPE
		// when init has already run a short program and gone.
		return err
	}
	_, err = sock.Write(buf[n:])
	return err
}

// readMessages forwards init's status lines until init is gone.
func readMessages(r *os.File, out chan<- boxinit.Message) {
	defer close(out)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if m, ok := boxinit.DecodeMessage(sc.Bytes()); ok {
			out <- m
		}
	}
}

// await waits for message typ from init during setup (for msgStarted,
// msgExited does too). A failed step wraps a *StepError; init's death is an
// error saying how it died.
func (l *initLink) await(typ string) (boxinit.Message, error) {
	return l.awaitMessage(typ, l.ctx.Done())
}

// awaitMessage is await, cut short by done (nil: only by setupTimeout).
func (l *initLink) awaitMessage(typ string, done <-chan struct{}) (boxinit.Message, error) {
	timeout := time.NewTimer(setupTimeout)
	defer timeout.Stop()
	select {
	case m, ok := <-l.msgs:
		if !ok {
			return m, l.initDied()
		}
		switch m.Type {
		case typ:
			return m, nil
		case boxinit.MsgExited:
			if typ == boxinit.MsgStarted {
				return m, nil
			}
		case boxinit.MsgError:
			return m, fmt.Errorf("box setup failed: %w", m.StepError())
		}
		return m, fmt.Errorf("box setup: unexpected message %q from init", m.Type)
	case <-timeout.C:
		return boxinit.Message{}, fmt.Errorf("box setup: init did not answer within %v", setupTimeout)
	case <-done:
		return boxinit.Message{}, interruption(l.ctx)
	}
}

// sendFailed explains a failed write to init: init has most likely
// failed first and said why, or died; that is the real cause.
func (l *initLink) sendFailed(step string, err error) error {
	if _, cause := l.await(boxinit.MsgStarted); cause != nil {
		return cause
	}
	return fmt.Errorf("%s: %w", step, err)
}

// initDied explains why init ended without a word.
func (l *initLink) initDied() error {
	ws := l.init.Wait()
	l.init = nil
	return fmt.Errorf("box init died during setup: %s", boxinit.DescribeWait(ws))
}
