package resident

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/probed/probed/agent/kube/cri"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

// Runtime is what the runner needs of the container runtime (*cri.Client):
// Resolve confirms that the container a pod's status names
// ("containerd://<id>") is that pod's, before anything runs in it; Stream
// starts the helper (CRI Exec), ExecSync kills a helper that stopped
// answering; ContainerID maps a status's ID to the runtime's, for Mode.
type Runtime interface {
	ContainerID(statusID string) (string, error)
	Resolve(ctx context.Context, statusID string, want probeexec.PodContainer) (cri.Container, error)
	Stream(ctx context.Context, ctr cri.Container, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error
	ExecSync(ctx context.Context, ctr cri.Container, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error)
}

// inbox is the helper's stdin: the lines probed sends, queued without
// blocking (a helper that stops reading never stalls a probe), read by the
// session's copy to the runtime. Close makes Read return io.EOF, which
// closes the helper's stdin: it ends what runs and exits.
type inbox struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	closed bool
}

// maxQueued bounds the lines waiting for a helper that does not read them.
const maxQueued = 1 << 20

var errClosed = errors.New("the exec helper's session is closed")

func newInbox() *inbox {
	q := &inbox{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *inbox) Read(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.buf) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, q.buf)
	if q.buf = q.buf[n:]; len(q.buf) == 0 {
		q.buf = nil // the script sent at start is the largest: let it go
	}
	return n, nil
}

func (q *inbox) send(s string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return errClosed
	}
	if len(q.buf)+len(s) > maxQueued {
		return fmt.Errorf("%w: over %d bytes of requests unread", errProtocol, maxQueued)
	}
	q.buf = append(q.buf, s...)
	q.cond.Signal()
	return nil
}

func (q *inbox) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// helper is one resident helper: a streaming exec session in one
// container, running one command at a time.
type helper struct {
	ctr       cri.Container // the container, as its first run resolved it
	id        string        // the container's CRI ID (ctr.ID)
	statusID  string        // its ID in the pod's status (ctr.StatusID)
	in        *inbox
	out, errs *stream
	cancel    context.CancelFunc // ends the session (set before it starts)
	done      chan struct{}      // closed when the session ended
	end       error              // why it ended; read after done
	procs     []string           // "PID:STARTTIME" of the helper's shell, reader and runner in the container (for kill)
}

func newHelper(ctr cri.Container) *helper {
	return &helper{ctr: ctr, id: ctr.ID, statusID: ctr.StatusID, in: newInbox(), out: newStream(true), errs: newStream(false),
		done: make(chan struct{})}
}

// finish records the end of the session.
func (h *helper) finish(err error) {
	h.end = err
	h.in.close()
	close(h.done)
}

// broken returns the first protocol error of either stream.
func (h *helper) broken() error {
	if err := h.out.failed(); err != nil {
		return err
	}
	return h.errs.failed()
}

// errUnsupported wraps why a container cannot host a helper: its runs go
// through ExecSync for good.
type errUnsupported struct{ why string }

func (e *errUnsupported) Error() string { return e.why }

// handshake sends the script, reads the exec's environment, sends the
// line that restores it for commands and waits for the ready record, all
// within timeout. An *errUnsupported says the container cannot host a
// helper; any other error is a failed start (tried again later).
func (h *helper) handshake(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	if err := h.in.send(script + "\n.\n"); err != nil {
		return err
	}
	wait := func() (any, error) {
		select {
		case e := <-h.out.event:
			return e, nil
		case <-h.done:
			return nil, startEnded(h.end)
		case <-t.C:
			return nil, fmt.Errorf("the exec helper did not start within %v", timeout)
		case <-h.out.broke:
		case <-h.errs.broke:
		}
		return nil, h.broken()
	}
	e, err := wait()
	if errors.Is(err, errEnvTooLarge) {
		return &errUnsupported{why: err.Error()}
	}
	if err != nil {
		return err
	}
	switch e := e.(type) {
	case unsupportedRecord:
		// Only helper.sh's own reasons: the record is shown in an Event
		// and on the status page.
		if !knownUnsupported.MatchString(string(e)) {
			return fmt.Errorf("%w: unsupported record %q", errProtocol, cut([]byte(e)))
		}
		return &errUnsupported{why: string(e)}
	case startupDone:
	default:
		return fmt.Errorf("%w: %T at start", errProtocol, e)
	}
	env := h.out.takeEnv()
	if err := h.in.send(fixLine(env[0], env[1])); err != nil {
		return err
	}
	if e, err = wait(); err != nil {
		return err
	}
	r, ok := e.(readyRecord)
	f := strings.Fields(string(r))
	if !ok || len(f) < 2 || f[0] != "1" {
		return fmt.Errorf("%w: ready record %q", errProtocol, string(r))
	}
	for _, id := range f[1:] {
		pid, start, ok := strings.Cut(id, ":")
		if !ok || !numeric(pid) || !numeric(start) {
			return fmt.Errorf("%w: ready record %q", errProtocol, string(r))
		}
	}
	h.procs = f[1:]
	h.errs.idle()
	return nil
}

// knownUnsupported are helper.sh's reasons for not running.
var knownUnsupported = regexp.MustCompile(`^(no cat in PATH|/proc/[0-9]+/environ is not readable)$`)

// startEnded says why a session that ended before the helper was ready
// ended: a container without sh cannot host one (runc's "executable file
// not found"), anything else is a failed start.
func startEnded(err error) error {
	if err != nil && (strings.Contains(err.Error(), "executable file not found") || strings.Contains(err.Error(), `"sh": stat`)) {
		return &errUnsupported{why: "no sh in the container's PATH"}
	}
	if err == nil {
		err = errors.New("exit 0")
	}
	return fmt.Errorf("the exec helper ended at start: %w", err)
}

func numeric(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil && s != ""
}

// lost says that the helper must be replaced (the run that found out is
// errored).
type lost struct{ reason, detail string }

// Reasons a helper is replaced (probed_exec_helpers_lost_total's reason).
const (
	LostEnded        = "ended"        // its session ended (killed from outside, container stopped)
	LostUnresponsive = "unresponsive" // it did not answer a kill within KillGrace
	LostProtocol     = "protocol"     // it wrote out of turn
)

// run runs cmd through the helper (which the caller holds: one run at a
// time) with the exec.Runner contract's verdicts. A non-nil *lost means the
// helper must be replaced; the run is then errored.
func (h *helper) run(ctx context.Context, statusID string, cmd []string, timeout, killGrace time.Duration) ([]byte, error, *lost) {
	tok := newToken()
	req, err := request(tok, cmd)
	if err != nil {
		return nil, err, nil
	}
	budget := newRunBudget()
	h.out.expect(tok, budget)
	h.errs.expect(tok, budget)
	if err := h.in.send(req); err != nil {
		return h.lostErr(statusID, err)
	}
	var stop <-chan time.Time
	if timeout > 0 && !runtime.OnInjectedClock(ctx) {
		t := time.NewTimer(timeout)
		defer t.Stop()
		stop = t.C
	}
	var fo, fe *frame
	collect := func(stop <-chan time.Time, done, over <-chan struct{}) string {
		for fo == nil || fe == nil {
			select {
			case <-over:
				return "flood"
			case e := <-h.out.event:
				if fo, _ = e.(*frame); fo == nil {
					return LostProtocol
				}
			case e := <-h.errs.event:
				if fe, _ = e.(*frame); fe == nil {
					return LostProtocol
				}
			case <-h.done:
				return LostEnded
			case <-stop:
				return "timeout"
			case <-done:
				return "ctx"
			case <-h.out.broke:
				return LostProtocol
			case <-h.errs.broke:
				return LostProtocol
			}
		}
		return ""
	}
	why := collect(stop, ctx.Done(), budget.over)
	if why == "ctx" && ctx.Err() == context.DeadlineExceeded {
		why = "timeout"
	}
	switch why {
	case "":
		return h.verdict(statusID, cmd, fo, fe)
	case "timeout", "ctx", "flood":
		// The timeout passed, the run is cancelled or it printed more
		// than a run may: kill what the command started, and wait for
		// its end to be reported (what it still prints is read and
		// dropped, up to maxAfterKill).
		if err := h.in.send("k\n"); err != nil {
			return h.lostErr(statusID, err)
		}
		grace := time.NewTimer(killGrace)
		defer grace.Stop()
		switch w := collect(grace.C, nil, nil); w {
		case "":
		case "timeout":
			return h.lostErr(statusID, fmt.Errorf("%w: its command was not killed within %v", errUnanswered, killGrace))
		default:
			return h.lostErr(statusID, h.why(w))
		}
		switch why {
		case "ctx":
			return nil, fmt.Errorf("exec in container %s: %w", statusID, ctx.Err()), nil
		case "flood":
			return nil, &probeexec.OutputLimitError{Cmd: cmd, Limit: maxRunOutput}, nil
		}
		return nil, cri.TimeoutError(cmd, timeout), nil
	}
	return h.lostErr(statusID, h.why(why))
}

var errUnanswered = errors.New("the exec helper stopped answering")

// why is the error of a lost reason.
func (h *helper) why(reason string) error {
	switch reason {
	case LostEnded:
		if h.end == nil {
			return errors.New("the exec helper ended")
		}
		return fmt.Errorf("the exec helper ended: %w", h.end)
	case LostProtocol:
		if err := h.broken(); err != nil {
			return err
		}
		return errProtocol
	}
	return errors.New(reason)
}

// lostErr is the errored run of a lost helper.
func (h *helper) lostErr(statusID string, err error) ([]byte, error, *lost) {
	reason := LostEnded
	switch {
	case errors.Is(err, errProtocol):
		reason = LostProtocol
	case errors.Is(err, errUnanswered):
		reason = LostUnresponsive
	}
	return nil, fmt.Errorf("exec in container %s: %w", statusID, err), &lost{reason: reason, detail: err.Error()}
}

// verdict maps a finished run (exec.Runner's contract): an exit status as
// ExecSync reports it; a command runc would not have started (not found,
// not executable) errored with runc's words.
func (h *helper) verdict(statusID string, cmd []string, fo, fe *frame) ([]byte, error, *lost) {
	out := cri.Output(fo.data, fe.data)
	switch fo.status {
	case "0":
		return out, nil, nil
	case "n":
		if strings.Contains(cmd[0], "/") {
			return nil, fmt.Errorf("exec in container %s: exec: %q: stat %s: no such file or directory", statusID, cmd[0], cmd[0]), nil
		}
		return nil, fmt.Errorf("exec in container %s: exec: %q: executable file not found in $PATH", statusID, cmd[0]), nil
	case "p":
		return nil, fmt.Errorf("exec in container %s: exec: %q: permission denied", statusID, cmd[0]), nil
	case "k":
		// Not killed by probed: something in the container killed the
		// helper's shell of this run.
		return nil, fmt.Errorf("exec in container %s: the exec helper's shell of this run was killed", statusID), nil
	}
	code, err := strconv.Atoi(fo.status)
	if err != nil || code < 0 || code > 255 {
		return h.lostErr(statusID, fmt.Errorf("%w: status %q", errProtocol, fo.status))
	}
	return out, &probeexec.CodeExitError{Cmd: cmd, Code: code}, nil
}

// killCommand is the ExecSync command that ends a helper that stopped
// answering: its three processes (shell, reader, runner), every process
// under them, and whatever holds its run's output (helper.sh's reap),
// each only if the process with that PID is still the one that started at
// that time (not a later process given its PID). The runner first (with
// its run), so that nothing of the run is orphaned before it is found. The
// helper's stdout and stderr are its shell's fd 1 and 2, or the runner's 3
// and 4.
func (h *helper) killCommand() []string {
	return append([]string{"sh", "-c", reapScript + `
keep= live= ko= ke= i=0
for x in "$@"; do
	i=$((i + 1))
	IFS= read -r s 2>/dev/null </proc/${x%%:*}/stat || continue
	s=${s##*) }
	set -- $s
	[ "$1" != Z ] && [ "${20}" = "${x#*:}" ] || continue
	live="${x%%:*} $live"
	if [ $i = 1 ] && [ -p /proc/${x%%:*}/fd/1 ]; then ko=/proc/${x%%:*}/fd/1 ke=/proc/${x%%:*}/fd/2; fi
	if [ $i = 3 ] && [ -z "$ko" ]; then ko=/proc/${x%%:*}/fd/3 ke=/proc/${x%%:*}/fd/4; fi
done
for p in $live; do reap "$p" "$ko" "$ke" all; done`, Name + "-kill"}, h.procs...)
}

// reapScript is helper.sh's process functions (ps_, desc, reap), for the
// kill through ExecSync.
var reapScript = func() string {
	from := strings.Index(script, "# ps_:")
	to := strings.Index(script, "# found CMD:")
	if from < 0 || to < from {
		panic("resident: helper.sh has no ps_ ... found section")
	}
	return script[from:to]
}()
