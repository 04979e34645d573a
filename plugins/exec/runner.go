package exec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Runner runs a command in a container and returns its output. It has the
// shape of the kubelet's CommandRunner (RunInContainer, spec E2).
//
// Contract, which the exec handler relies on for its verdict (E3):
//   - The returned output is the command's stdout followed by its stderr
//     (not interleaved). The handler keeps at most runtime.MaxOutputBytes of
//     it; a runner should not buffer more than it needs to deliver that.
//   - The output is returned even when err is non-nil (spec PR2).
//   - A command that ran and exited returns nil (exit 0) or an error
//     implementing ExitError (any exit status, 0 included).
//   - A command that did not finish within timeout (or before ctx's
//     deadline) returns a *TimeoutError (or an error wrapping
//     context.DeadlineExceeded).
//   - A command that printed more than the runner takes from one run
//     returns an *OutputLimitError (a Failure).
//   - Anything else (the command could not be started, the runtime failed,
//     ctx was cancelled, the container is not the pod's: ContainerOf) is a
//     plain error: the probe is errored (P5).
//
// timeout is the probe's timeoutSeconds as a duration (P3); zero means no
// timeout beyond ctx. When runtime.OnInjectedClock(ctx) reports true, the
// attempt's deadline runs on an injected clock (manager Options.Clock, a
// fake clock in tests): ctx, cut with context.DeadlineExceeded when that
// clock passes the deadline, must alone end the command, and timeout only
// names the limit (a runner that bounds the command by timeout on the
// real clock would cut it however the injected clock stands). containerID is the runtime ID of the container
// ("containerd://abc"); runners that do not run in containers ignore it.
// RunInContainer must not modify cmd and must be safe for concurrent use.
type Runner interface {
	RunInContainer(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, error)
}

// ModeRunner is a Runner that says how it runs the exec probes of a
// container (its status ID, "containerd://<id>"), for `probed status -o
// wide` and the status page: "host", "disabled", "execsync", "resident",
// or the runner's own word with its reason.
type ModeRunner interface {
	Runner
	Mode(containerID string) string
}

// ExitError is implemented by runner errors that carry the exit status of a
// command that ran to its end (k8s.io/utils/exec.ExitError's ExitStatus).
// Status 0 is a Success and any other status a Failure (spec E3).
type ExitError interface {
	error
	ExitStatus() int
}

// CodeExitError is the ExitError LocalRunner returns for a non-zero exit: the
// command and its exit status. A command killed by a signal it did not
// expect (not by the runner's timeout) reports 128+signal, as container
// runtimes do (e.g. 137 for SIGKILL).
type CodeExitError struct {
	// Cmd is the command as run (argv).
	Cmd []string
	// Code is the exit status, 1–255.
	Code int
}

// Error returns "command '<cmd>' exited with <code>", the wording of the
// CRI client's exit error (without the stderr it appends).
func (e *CodeExitError) Error() string {
	return fmt.Sprintf("command '%s' exited with %d", strings.Join(e.Cmd, " "), e.Code)
}

// ExitStatus returns Code.
func (e *CodeExitError) ExitStatus() int { return e.Code }

// TimeoutError reports that a command did not finish within the probe's
// timeout and was killed. The exec handler turns it into a Failure whose
// output is Error() (spec E3, ExecProbeTimeout locked on since 1.35).
type TimeoutError struct {
	// Cmd is the command as run (argv).
	Cmd []string
	// Timeout is the probe timeout that expired.
	Timeout time.Duration
	// Message, when set, is the text of the runtime that timed the command
	// out, which Error returns as it is: the CRI runner's is the kubelet's
	// own (k8s.io/cri-client ExecSync: `command timed out: "<cmd>" timed
	// out after 1s`).
	Message string
}

// Error returns Message, or `command "<cmd joined by spaces>" timed out`
// (Go %q quoting, so a '"' inside the command appears as `\"`): LocalRunner's
// text, which the kubelet's CRI client once returned (pkg/kubelet/cri/remote,
// before k8s.io/cri-client).
func (e *TimeoutError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("command %q timed out", strings.Join(e.Cmd, " "))
}

// Tree-kill modes reported by HostTreeKill.
const (
	// TreeKillCgroup: each command runs in a cgroup v2 leaf of its own and
	// is ended by writing 1 to the leaf's cgroup.kill, which kills every
	// process in it whatever it did with sessions and process groups.
	TreeKillCgroup = "cgroup"
	// TreeKillProcessGroup: the fallback; each command runs in a process
	// group of its own, which is sent SIGKILL. A descendant that left the
	// group (setsid, setpgid) escapes it.
	TreeKillProcessGroup = "process-group"
)

// TreeKill describes how LocalRunner kills the process tree of an exec
// probe's command on this host.
type TreeKill struct {
	// Mode is TreeKillCgroup or TreeKillProcessGroup.
	Mode string
	// Cgroup is the cgroup v2 directory the leaves are created in (this
	// process's own cgroup); empty in process-group mode.
	Cgroup string
	// Reason says why the cgroup mode is not available (process-group
	// mode only), e.g. "no cgroup2 mount" or the error of creating a leaf.
	Reason string
	// LeafFailures counts the runs that fell back to the process group
	// because their leaf could not be created (cgroup mode only).
	LeafFailures uint64
	// LeftoversKilled counts the leaves of earlier, no longer running
	// probed processes (killed with -9, say) found in Cgroup at detection:
	// their processes were killed and the leaves removed.
	LeftoversKilled int
}

// ErrHostExecDisabled is returned by DisabledRunner for every run. The exec
// handler reports it as an errored probe (Unknown plus this error, spec P5):
// the probe is not run, and the worker discards the attempt. Recognise it
// with errors.Is.
var ErrHostExecDisabled = errors.New("host exec disabled: exec probes run on this host only with --allow-host-exec")

// DisabledRunner is the Runner used when host exec is switched off: it runs
// nothing and returns ErrHostExecDisabled, so every exec probe is errored
// with that reason.
type DisabledRunner struct{}

// RunInContainer returns (nil, ErrHostExecDisabled) without running cmd.
func (DisabledRunner) RunInContainer(context.Context, string, []string, time.Duration) ([]byte, error) {
	return nil, ErrHostExecDisabled
}

// Mode is "disabled": no exec probe runs.
func (DisabledRunner) Mode(string) string { return "disabled" }

// limitBuffer keeps the first max bytes written to it and silently discards
// the rest, never failing a write: the command's pipe keeps being drained so
// the command cannot block on a full pipe (spec E2's limit writer).
type limitBuffer struct {
	buf []byte
	max int
}

func (b *limitBuffer) Write(p []byte) (int, error) {
	keep := min(len(p), b.max-len(b.buf))
	if keep <= 0 {
		return len(p), nil
	}
	if need := len(b.buf) + keep; need > cap(b.buf) {
		// Grow by doubling, but never past max.
		grown := make([]byte, len(b.buf), min(b.max, max(need, 2*cap(b.buf), 512)))
		copy(grown, b.buf)
		b.buf = grown
	}
	b.buf = append(b.buf, p[:keep]...)
	return len(p), nil
}

// OutputLimitError reports that a command printed more, stdout and stderr
// together, than a runner takes from one run (Limit bytes,
// tenant.ExecOutputBytes): its answer was refused or the command was
// killed, and its exit status is unknown. The exec handler turns it into
// a Failure whose output is Error(): a probe's command that floods its
// output fails, and costs the agent no more than Limit bytes (the kubelet
// takes up to 16 MiB of it from the runtime).
type OutputLimitError struct {
	// Cmd is the command as run (argv).
	Cmd []string
	// Limit is the most the runner takes, in bytes.
	Limit int
}

// Error returns `command "<cmd>" printed over <Limit/1024> KiB: its run
// was stopped (an exec probe's output is bounded per run)`.
func (e *OutputLimitError) Error() string {
	return fmt.Sprintf("command %q printed over %d KiB: its run was stopped (an exec probe's output is bounded per run)",
		strings.Join(e.Cmd, " "), e.Limit>>10)
}

// PodContainer names the container an exec command is meant for: the pod
// (namespace, name, UID) and the container's name. The exec handler puts
// it in the context of every run (WithContainer); a runner that acts on a
// container runtime checks the container ID it is given against it before
// it runs anything (agent/kube/cri: the runtime's own labels of the
// container must name this pod and container), since a pod's status is
// not proof that an ID is that pod's.
type PodContainer struct {
	Namespace, Pod string
	PodUID         types.UID
	Container      string
}

// String is "namespace/pod, container name".
func (c PodContainer) String() string {
	return fmt.Sprintf("%s/%s, container %s", c.Namespace, c.Pod, c.Container)
}

type podContainerKey struct{}

// WithContainer returns ctx carrying c.
func WithContainer(ctx context.Context, c PodContainer) context.Context {
	return context.WithValue(ctx, podContainerKey{}, c)
}

// ContainerOf returns the PodContainer ctx carries, if any.
func ContainerOf(ctx context.Context) (PodContainer, bool) {
	c, ok := ctx.Value(podContainerKey{}).(PodContainer)
	return c, ok
}
