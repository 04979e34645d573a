// Package exec is the built-in exec probe handler (spec §5.3, rules E1–E3).
//
// The handler expands the probe's command once per worker (E1), hands it to
// a Runner on every attempt (E2) and maps what the runner returns to a
// verdict (E3). Runners: LocalRunner runs the command on this host (the
// agent's manifest mode) and kills its whole process tree when the run ends
// (a cgroup v2 leaf per run where the host allows it, else the process
// group: HostTreeKill), DisabledRunner refuses to run anything; a CRI
// runner can implement the same interface.
package exec

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime"
)

// New returns the exec handler running its commands through r. A nil r
// behaves as DisabledRunner (every probe errored with ErrHostExecDisabled).
//
// Prepare fails (so every run of that probe is errored, P5) when the spec
// has no exec action or its command is empty. The returned Prober is safe for
// concurrent use.
func New(r Runner) runtime.Handler {
	if r == nil {
		r = DisabledRunner{}
	}
	return &handler{runner: r}
}

type handler struct {
	runner Runner
}

// Prepare expands the command from spec.Container.Env (E1) once and binds it,
// with spec.Timeout(), to a Prober.
func (h *handler) Prepare(spec *runtime.Spec) (runtime.Prober, error) {
	if spec == nil || spec.Probe == nil || spec.Probe.Exec == nil {
		return nil, errors.New("exec probe: the probe has no exec action")
	}
	if len(spec.Probe.Exec.Command) == 0 {
		return nil, errors.New("exec probe: the command is empty")
	}
	var env []v1.EnvVar
	if spec.Container != nil {
		env = spec.Container.Env
	}
	p := &prober{h: h, spec: spec}
	if cmd := ExpandCommand(spec.Probe.Exec.Command, env); &cmd[0] != &spec.Probe.Exec.Command[0] {
		// Only an expanded command is copied to the heap: taking cmd's own
		// address would move it there for every probe (24 bytes each).
		expanded := cmd
		p.expanded = &expanded
	}
	return p, nil
}

// prober is 24 bytes: the spec is an immutable snapshot kept by its
// worker, so the command and timeout (spec.Timeout, sub-second for an
// annotation probe) are read from it; only an expanded command is kept.
type prober struct {
	h        *handler
	spec     *runtime.Spec
	expanded *[]string // the command after $(VAR) expansion; nil: as written
}

func (p *prober) cmd() []string {
	if p.expanded != nil {
		return *p.expanded
	}
	return p.spec.Probe.Exec.Command
}

func (p *prober) timeout() time.Duration { return p.spec.Timeout() }

// Probe runs the command once in t.ContainerID and returns the E3 verdict:
//
//   - nil error → Success, output = the command's output, ExitCode 0;
//   - an ExitError with status 0 → Success (output), ExitCode 0;
//   - an ExitError with another status → Failure (output), ExitCode = status;
//   - a *TimeoutError, or an error wrapping context.DeadlineExceeded →
//     Failure with output `command "<cmd>" timed out`, ExitCode -1;
//   - an *OutputLimitError (the command printed more than its runner
//     takes) → Failure with its text, ExitCode -1;
//   - any other error → Unknown with that error (errored, P2/P5), output "",
//     ExitCode -1.
//
// The output is capped at runtime.MaxOutputBytes (10 KiB, E2).
func (p *prober) Probe(ctx context.Context, t runtime.Target) (runtime.Outcome, error) {
	cmd, timeout := p.cmd(), p.timeout()
	if pod, c := p.spec.Pod, p.spec.Container; pod != nil && c != nil {
		ctx = WithContainer(ctx, PodContainer{Namespace: pod.Namespace, Pod: pod.Name, PodUID: pod.UID, Container: c.Name})
	}
	out, err := p.h.runner.RunInContainer(ctx, t.ContainerID, cmd, timeout)
	return p.verdict(out, err)
}

func (p *prober) verdict(out []byte, err error) (runtime.Outcome, error) {
	if len(out) > runtime.MaxOutputBytes {
		out = out[:runtime.MaxOutputBytes]
	}
	if err == nil {
		return runtime.Outcome{Result: runtime.Success, Output: string(out)}, nil
	}
	// The kubelet checks the exit error first, then the timeout error.
	var exitErr ExitError
	if errors.As(err, &exitErr) {
		code := exitErr.ExitStatus()
		if code == 0 {
			return runtime.Outcome{Result: runtime.Success, Output: string(out)}, nil
		}
		return runtime.Outcome{Result: runtime.Failure, Output: string(out), ExitCode: code}, nil
	}
	var timeoutErr *TimeoutError
	if errors.As(err, &timeoutErr) {
		return runtime.Outcome{Result: runtime.Failure, Output: timeoutErr.Error(), ExitCode: -1}, nil
	}
	var flood *OutputLimitError
	if errors.As(err, &flood) {
		return runtime.Outcome{Result: runtime.Failure, Output: flood.Error(), ExitCode: -1}, nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		te := &TimeoutError{Cmd: p.cmd(), Timeout: p.timeout()}
		return runtime.Outcome{Result: runtime.Failure, Output: te.Error(), ExitCode: -1}, nil
	}
	return runtime.Outcome{Result: runtime.Unknown, ExitCode: -1}, err
}
