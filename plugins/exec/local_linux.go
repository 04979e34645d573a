//go:build linux

package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	goruntime "runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probed/probed/internal/procstat"
	"github.com/probed/probed/runtime"
)

// DefaultWaitDelay is LocalRunner's default for WaitDelay.
const DefaultWaitDelay = 250 * time.Millisecond

// LocalRunner runs exec probe commands on this host (the agent's manifest
// mode, where there is no container runtime). It ignores the container ID.
//
// The command is started directly (argv[0] looked up in $PATH when it has no
// slash), never through a shell, with the agent's environment and working
// directory and stdin from /dev/null. It runs in a process group of its own
// (Setpgid) and, where the host allows it (HostTreeKill), in a cgroup v2
// leaf of its own, created for the run and removed after it.
//
// Output: stdout followed by stderr, each captured through a limit writer of
// runtime.MaxOutputBytes (so at most 2 × 10 KiB is ever held), then cut to
// 10 KiB (spec E2). Output beyond the limit is read and discarded, so a
// chatty command never blocks on a full pipe.
//
// Ending (BR-02): when timeout (or ctx's deadline) expires, or ctx is
// cancelled (an attempt whose deadline runs on an injected clock,
// runtime.OnInjectedClock, is bounded by ctx alone: timeout only names the
// limit in the error), the whole tree receives SIGKILL, so a command that ignores
// SIGTERM and the children it forked die with it; the command is then
// reaped, so it leaves no zombie. Once the command exits by itself, whatever
// it left running is killed too, so no probe-spawned process outlives the
// run. The tree is the command's cgroup leaf, killed through cgroup.kill,
// which reaches every descendant whatever it did with sessions and process
// groups. Where HostTreeKill reports the process-group mode, or with
// ProcessGroupOnly, the fallback: the command's process group, and at a
// timeout or cancel also every descendant still linked to the command
// through its parent (stopDescendants), so a child that called setsid dies
// too; a descendant whose parent had already exited (a double fork), or one
// that left the group after the command exited, escapes the fallback. A
// process that escaped and keeps the output pipes open is not waited for
// longer than WaitDelay. Grandchildren
// become orphans when their parent dies and are reaped by PID 1 (or the
// nearest subreaper), as in a container; when that is this process (probed
// as PID 1 of its container, or a subreaper), the runner reaps the killed
// tree's members itself, so none is left a zombie.
//
// Tied to probed's life: the command gets SIGKILL when probed dies, even by
// kill -9 (Pdeathsig). Pdeathsig fires when the OS thread that started the
// child exits, not the process (golang/go#27505), and the Go runtime ends a
// thread when a goroutine locked to it exits; so the goroutine that starts
// the command stays locked to its thread (LockOSThread) until the command
// has been reaped, and that thread cannot end meanwhile. Pdeathsig reaches
// the command itself, not its descendants: in the cgroup mode these stay in
// their leaf, which the next probed started in the same cgroup kills and
// removes (HostTreeKill, LeftoversKilled); in the process-group mode they
// are left running.
//
// Errors (mapped by the handler, E3):
//   - exit status ≠ 0 → *CodeExitError (killed by a foreign signal:
//     128+signal);
//   - timeout or ctx deadline → *TimeoutError (`command "<cmd>" timed out`);
//   - ctx cancelled without its deadline passing → an error wrapping
//     context.Canceled (errored, not a Failure: nothing timed out);
//   - empty command, missing binary or any other start failure → a plain
//     error (errored, BR-09 b).
//
// A LocalRunner is stateless and safe for concurrent use; its zero value is
// ready to use.
type LocalRunner struct {
	// WaitDelay bounds how long, after the command's process group has been
	// killed or has exited, the runner waits for the output pipes to reach
	// EOF before closing them itself. Zero means DefaultWaitDelay.
	WaitDelay time.Duration
	// ProcessGroupOnly keeps the runner to the process-group kill (the
	// fallback) even where HostTreeKill reports the cgroup mode.
	ProcessGroupOnly bool
}

// Mode is "host": exec probes run on this host.
func (*LocalRunner) Mode(string) string { return "host" }

// TreeKill reports how this runner kills a command's tree: HostTreeKill,
// or the process-group mode when ProcessGroupOnly is set.
func (r *LocalRunner) TreeKill() TreeKill {
	if r.ProcessGroupOnly {
		return TreeKill{Mode: TreeKillProcessGroup, Reason: "ProcessGroupOnly set"}
	}
	return HostTreeKill()
}

// newLeaf returns the cgroup leaf for one run, or nil in the process-group
// mode. When the leaf cannot be created (the cgroup was removed or made
// read-only since detection) the run falls back to the process group.
func (r *LocalRunner) newLeaf() *leaf {
	if r.ProcessGroupOnly {
		return nil
	}
	p, _ := hostCgroup()
	if p == nil {
		return nil
	}
	l, err := p.newLeaf()
	if err != nil {
		leafFailures.Add(1)
		return nil
	}
	return l
}

// RunInContainer runs cmd on this host; see LocalRunner for the rules.
// timeout ≤ 0 means no timeout beyond ctx.
func (r *LocalRunner) RunInContainer(ctx context.Context, _ string, cmd []string, timeout time.Duration) ([]byte, error) {
	if len(cmd) == 0 {
		return nil, errors.New("exec: empty command")
	}
	if timeout > 0 && !runtime.OnInjectedClock(ctx) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return nil, endError(err, cmd, timeout)
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("exec: stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, fmt.Errorf("exec: stderr pipe: %w", err)
	}

	c := osexec.Command(cmd[0], cmd[1:]...)
	c.Stdout = outW
	c.Stderr = errW
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cg := r.newLeaf()
	if cg != nil {
		c.SysProcAttr.UseCgroupFD, c.SysProcAttr.CgroupFD = true, cg.fd
	}
	// Pdeathsig is tied to this OS thread: keep it until the command is
	// reaped (see LocalRunner).
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := c.Start(); err != nil {
		closeAll(outR, outW, errR, errW)
		if cg != nil {
			_ = cg.remove(r.waitDelay())
		}
		return nil, err
	}
	// The child holds its own copies of the write ends.
	closeAll(outW, errW)
	if cg != nil {
		cg.closeFD()
	}

	stdout := &limitBuffer{max: runtime.MaxOutputBytes}
	stderr := &limitBuffer{max: runtime.MaxOutputBytes}
	var readers sync.WaitGroup
	readers.Go(func() { _, _ = io.Copy(stdout, outR) })
	readers.Go(func() { _, _ = io.Copy(stderr, errR) })

	pid := c.Process.Pid
	exited := make(chan struct{})
	go func() {
		waitExited(pid)
		close(exited)
	}()

	var endErr error
	select {
	case <-exited:
	case <-ctx.Done():
		select {
		case <-exited: // it exited by itself just in time
		default:
			if cg == nil {
				stopDescendants(pid)
			}
			killTree(cg, pid)
			<-exited
			endErr = endError(ctx.Err(), cmd, timeout)
		}
	}
	// The leader is a zombie (exited, not yet reaped) here, so its pid, which
	// is the group's id, cannot have been reused: killing the group now only
	// reaches what the command left behind.
	killTree(cg, pid)
	waitErr := c.Wait() // reaps the leader
	reapGroup(pid, r.waitDelay())
	if cg != nil {
		if isReaper() {
			cg.reapZombies()
		}
		_ = cg.remove(r.waitDelay())
	}

	r.drain(&readers, outR, errR)
	out := append(stdout.buf, stderr.buf...)
	if len(out) > runtime.MaxOutputBytes {
		out = out[:runtime.MaxOutputBytes]
	}

	if endErr != nil {
		return out, endErr
	}
	if waitErr != nil {
		return out, exitError(cmd, c.ProcessState, waitErr)
	}
	return out, nil
}

// drain waits up to WaitDelay for both readers to reach EOF, then closes the
// read ends, which ends the readers, and waits for them.
func (r *LocalRunner) drain(readers *sync.WaitGroup, pipes ...*os.File) {
	delay := r.waitDelay()
	done := make(chan struct{})
	go func() {
		readers.Wait()
		close(done)
	}()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	closeAll(pipes...)
	<-done
}

func (r *LocalRunner) waitDelay() time.Duration {
	if r.WaitDelay <= 0 {
		return DefaultWaitDelay
	}
	return r.WaitDelay
}

// reapGroup reaps the processes of the killed group pgid that have become
// children of this process. The command's own children are re-parented when
// it dies: to PID 1 or the nearest child subreaper. When that is probed
// itself (PID 1 of a container without an init, or a subreaper), nobody
// else would ever reap them, and every timed-out run would leave its
// killed grandchildren as zombies (BR-02: no <defunct> entries may build
// up). Otherwise none of them is our child and wait4 fails at once with
// ECHILD. Only members of pgid are waited for, so other commands' children
// are never taken from their os/exec.Cmd. The group was SIGKILLed, so its
// members die promptly; within bounds the wait anyway.
func reapGroup(pgid int, within time.Duration) {
	deadline := time.Now().Add(within)
	for {
		var ws unix.WaitStatus
		reaped, err := unix.Wait4(-pgid, &ws, unix.WNOHANG, nil)
		switch {
		case err == unix.EINTR || err == nil && reaped > 0:
			continue
		case err != nil:
			return // ECHILD: no child of ours left in the group
		}
		// Children of ours in the group, none of them dead yet.
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// endError is the error for a run ended by ctx.
func endError(ctxErr error, cmd []string, timeout time.Duration) error {
	if errors.Is(ctxErr, context.DeadlineExceeded) {
		return &TimeoutError{Cmd: cmd, Timeout: timeout}
	}
	return fmt.Errorf("exec: command %q not completed: %w", cmd[0], ctxErr)
}

// exitError turns the result of Wait into a *CodeExitError, or returns the
// Wait error itself when it is not about the exit status.
func exitError(cmd []string, ps *os.ProcessState, waitErr error) error {
	var ee *osexec.ExitError
	if !errors.As(waitErr, &ee) || ps == nil {
		return waitErr
	}
	code := ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return &CodeExitError{Cmd: cmd, Code: code}
}

// waitExited blocks until the process pid has exited, without reaping it
// (WNOWAIT): the zombie keeps the pid, and so the process group id, reserved
// until Wait reaps it.
func waitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// stopDescendants is the process-group mode's reach beyond the group, at
// a timeout or cancel while the command still runs: it stops (SIGSTOP) the
// group and then every descendant of the leader found through the parent
// links of /proc, again until a pass finds no new one, and leaves them
// stopped for killTree (stopDescendants sends them SIGKILL itself as
// well). A stopped process can neither fork nor exit, so the links hold
// while the tree is walked, and a child that called setsid is found
// through its parent. What it cannot find: a descendant whose parent
// exited before the walk (a double fork, a daemon), re-parented to PID 1
// or a subreaper; only the cgroup mode reaches those.
func stopDescendants(leader int) {
	_ = unix.Kill(-leader, unix.SIGSTOP)
	stopped := map[int]bool{leader: true}
	for range 100 {
		children := childrenByParent()
		found := false
		stack := []int{leader}
		seen := map[int]bool{leader: true}
		for len(stack) > 0 {
			p := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, c := range children[p] {
				if seen[c] {
					continue
				}
				seen[c] = true
				stack = append(stack, c)
				if !stopped[c] {
					_ = unix.Kill(c, unix.SIGSTOP)
					stopped[c] = true
					found = true
				}
			}
		}
		if !found {
			break
		}
	}
	for pid := range stopped {
		if pid != leader {
			_ = unix.Kill(-pid, unix.SIGKILL) // its own group, if it leads one
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// childrenByParent maps each parent pid to its live (not zombie)
// children's pids, from /proc/PID/stat.
func childrenByParent() map[int][]int {
	out := map[int][]int{}
	for _, p := range procstat.All() {
		if p.State != 'Z' {
			out[p.PPID] = append(out[p.PPID], p.PID)
		}
	}
	return out
}

// killTree kills the command's cgroup leaf (when it has one) and its
// process group.
func killTree(cg *leaf, pgid int) {
	if cg != nil {
		cg.kill()
	}
	killGroup(pgid)
}

// killGroup sends SIGKILL to every process of the group pgid. ESRCH (the
// group is empty) is expected and ignored.
func killGroup(pgid int) {
	_ = unix.Kill(-pgid, unix.SIGKILL)
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}
