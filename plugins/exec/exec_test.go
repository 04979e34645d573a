package exec_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

// recordingRunner is a fake Runner returning a fixed result and recording
// what it was called with.
type recordingRunner struct {
	out []byte
	err error

	calls   int
	id      string
	cmd     []string
	timeout time.Duration
}

func (r *recordingRunner) RunInContainer(_ context.Context, id string, cmd []string, timeout time.Duration) ([]byte, error) {
	r.calls++
	r.id, r.cmd, r.timeout = id, append([]string(nil), cmd...), timeout
	return r.out, r.err
}

// exitErr is a runner error carrying an exit status, like the CRI client's
// CodeExitError.
type exitErr int

func (e exitErr) Error() string   { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitErr) ExitStatus() int { return int(e) }

func execSpec(timeoutSeconds int32, env []v1.EnvVar, cmd ...string) *runtime.Spec {
	return &runtime.Spec{
		Kind:      runtime.KindExec,
		ProbeType: runtime.Liveness,
		Container: &v1.Container{Name: "c", Env: env},
		Probe: &v1.Probe{
			ProbeHandler:   v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}},
			TimeoutSeconds: timeoutSeconds,
		},
	}
}

// probeOnce prepares spec with h and makes one attempt with the probe's
// deadline on ctx, as the runtime does (P3).
func probeOnce(t *testing.T, h runtime.Handler, spec *runtime.Spec) (runtime.Outcome, error) {
	t.Helper()
	p, err := h.Prepare(spec)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), spec.Timeout())
	defer cancel()
	return p.Probe(ctx, runtime.Target{ContainerID: "test://cOnTaInEr_Id", Attempt: 1})
}

// TestEX1_Verdicts is spec 8.5 EX1 (exec_test.go TestExec) with a fake
// runner: the E3 mapping of runner results to verdicts.
func TestEX1_Verdicts(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 11*1024)
	cases := []struct {
		name     string
		out      []byte
		err      error
		result   runtime.Result
		output   string
		exitCode int
		errored  bool
	}{
		{name: "nil error OK", out: []byte("OK"), result: runtime.Success, output: "OK"},
		{name: "exit status 0 error", out: []byte("OK"), err: exitErr(0), result: runtime.Success, output: "OK"},
		{name: "11 KiB output cut to 10 KiB", out: big, result: runtime.Success, output: string(big[:10*1024])},
		{name: "generic error is unknown and errored", out: []byte("partial"), err: errors.New("runtime down"), result: runtime.Unknown, output: "", exitCode: -1, errored: true},
		{name: "exit 1 is failure with output", out: []byte("bad"), err: exitErr(1), result: runtime.Failure, output: "bad", exitCode: 1},
		{name: "timeout error is failure with its text", err: &exec.TimeoutError{Cmd: []string{"sh", "-c", "sleep 5"}, Timeout: time.Second}, result: runtime.Failure, output: `command "sh -c sleep 5" timed out`, exitCode: -1},
		{name: "a runtime's timeout text is the output as it is", err: &exec.TimeoutError{Cmd: []string{"sh", "-c", "sleep 5"}, Timeout: time.Second, Message: `command timed out: "sh -c sleep 5" timed out after 1s`}, result: runtime.Failure, output: `command timed out: "sh -c sleep 5" timed out after 1s`, exitCode: -1},
		{name: "wrapped deadline is a timeout", err: fmt.Errorf("rpc: %w", context.DeadlineExceeded), result: runtime.Failure, output: `command "sh -c sleep 5" timed out`, exitCode: -1},
		{name: "cancelled is errored", err: context.Canceled, result: runtime.Unknown, exitCode: -1, errored: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &recordingRunner{out: tc.out, err: tc.err}
			got, err := probeOnce(t, exec.New(r), execSpec(1, nil, "sh", "-c", "sleep 5"))
			if tc.errored {
				if err == nil || !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
			} else if err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			if got.Result != tc.result || got.Output != tc.output || got.ExitCode != tc.exitCode {
				t.Fatalf("outcome = {%v %q… (%d bytes) exit %d}, want {%v (%d bytes) exit %d}",
					got.Result, trunc(got.Output), len(got.Output), got.ExitCode, tc.result, len(tc.output), tc.exitCode)
			}
		})
	}
}

// TestEX1_RealCommands is EX1 with real processes through LocalRunner.
func TestEX1_RealCommands(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		cmd      []string
		result   runtime.Result
		output   string // exact, unless outLen is set
		outLen   int
		exitCode int
		errored  bool
		maxTime  time.Duration
	}{
		{name: "echo OK", cmd: []string{"sh", "-c", "echo OK"}, result: runtime.Success, output: "OK\n"},
		{name: "exit 1", cmd: []string{"sh", "-c", "echo nope; exit 1"}, result: runtime.Failure, output: "nope\n", exitCode: 1},
		{name: "11 KiB output truncated to exactly 10 KiB", cmd: []string{"sh", "-c", "head -c 11264 /dev/zero | tr '\\0' a"}, result: runtime.Success, outLen: 10 * 1024},
		{name: "missing binary is errored", cmd: []string{"/no/such/binary"}, result: runtime.Unknown, exitCode: -1, errored: true},
		{name: "missing binary in PATH is errored", cmd: []string{"no-such-binary-probed"}, result: runtime.Unknown, exitCode: -1, errored: true},
		{name: "timeout is failure with the timeout text", cmd: []string{"sh", "-c", "sleep 5"}, result: runtime.Failure, output: `command "sh -c sleep 5" timed out`, exitCode: -1, maxTime: 1500 * time.Millisecond},
		{name: "quote in a timed-out command is %q-escaped", cmd: []string{"sh", "-c", `sleep 5 # "q"`}, result: runtime.Failure, output: `command "sh -c sleep 5 # \"q\"" timed out`, exitCode: -1, maxTime: 1500 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			got, err := probeOnce(t, exec.New(&exec.LocalRunner{}), execSpec(1, nil, tc.cmd...))
			elapsed := time.Since(start)
			if tc.errored != (err != nil) {
				t.Fatalf("err = %v, want errored=%v", err, tc.errored)
			}
			if got.Result != tc.result || got.ExitCode != tc.exitCode {
				t.Fatalf("outcome = %v exit %d (%q), want %v exit %d", got.Result, got.ExitCode, trunc(got.Output), tc.result, tc.exitCode)
			}
			if tc.outLen > 0 {
				if len(got.Output) != tc.outLen || strings.Trim(got.Output, "a") != "" {
					t.Fatalf("output: %d bytes, want exactly %d bytes of 'a'", len(got.Output), tc.outLen)
				}
			} else if got.Output != tc.output {
				t.Fatalf("output = %q, want %q", got.Output, tc.output)
			}
			if tc.maxTime > 0 && elapsed > tc.maxTime {
				t.Fatalf("took %v, want ≤ %v", elapsed, tc.maxTime)
			}
		})
	}
}

// TestBR09b_ExitCodes126And127AreFailure: a shell reporting "not
// executable" (126) or "not found" (127) is a normal exit, so a Failure, not
// an errored probe (BR-09 b); a command killed by a foreign signal reports
// 128+signal, as container runtimes do.
func TestBR09b_ExitCodes126And127AreFailure(t *testing.T) {
	t.Parallel()
	cases := []struct {
		script string
		code   int
	}{
		{"exit 126", 126},
		{"exit 127", 127},
		{"/no/such/binary", 127},
		{"kill -9 $$$$", 137}, // E1 turns $$$$ into the shell's $$
	}
	for _, tc := range cases {
		t.Run(tc.script, func(t *testing.T) {
			t.Parallel()
			got, err := probeOnce(t, exec.New(&exec.LocalRunner{}), execSpec(1, nil, "sh", "-c", tc.script))
			if err != nil {
				t.Fatalf("err = %v, want nil (a Failure is not errored)", err)
			}
			if got.Result != runtime.Failure || got.ExitCode != tc.code {
				t.Fatalf("outcome = %v exit %d, want failure exit %d", got.Result, got.ExitCode, tc.code)
			}
		})
	}
}

// TestHostExecDisabled: with DisabledRunner (and New(nil)) every exec probe
// is errored (P5) with the exported ErrHostExecDisabled; nothing runs.
func TestHostExecDisabled(t *testing.T) {
	marker := t.TempDir() + "/ran"
	for name, h := range map[string]runtime.Handler{
		"DisabledRunner": exec.New(exec.DisabledRunner{}),
		"nil runner":     exec.New(nil),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := probeOnce(t, h, execSpec(1, nil, "touch", marker))
			if !errors.Is(err, exec.ErrHostExecDisabled) {
				t.Fatalf("err = %v, want ErrHostExecDisabled", err)
			}
			if err.Error() != "host exec disabled: exec probes run on this host only with --allow-host-exec" {
				t.Fatalf("err text = %q", err)
			}
			if got.Result != runtime.Unknown || got.Output != "" || got.ExitCode != -1 {
				t.Fatalf("outcome = %+v, want unknown, no output, exit -1", got)
			}
		})
	}
	if _, err := (exec.DisabledRunner{}).RunInContainer(context.Background(), "", []string{"touch", marker}, time.Second); !errors.Is(err, exec.ErrHostExecDisabled) {
		t.Fatalf("DisabledRunner err = %v", err)
	}
}

// TestPR1_ExecExpansion is spec 8.3 PR1's exec cases: the command is passed
// through verbatim when it has no references, and "$(A) $(B)" with only A
// declared gives "some script $(B)" (E1); valueFrom expands to "", $$ escapes.
func TestPR1_ExecExpansion(t *testing.T) {
	env := []v1.EnvVar{
		{Name: "A", Value: "script"},
		{Name: "FROM", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}
	cases := []struct {
		name string
		cmd  []string
		want []string
	}{
		{"verbatim", []string{"/bin/probe", "--flag=1", "a b", "*"}, []string{"/bin/probe", "--flag=1", "a b", "*"}},
		{"declared and undeclared", []string{"sh", "-c", "some $(A) $(B)"}, []string{"sh", "-c", "some script $(B)"}},
		{"valueFrom expands to empty", []string{"echo", "[$(FROM)]"}, []string{"echo", "[]"}},
		{"$$ escapes", []string{"echo", "$$(A) $$ $(A)$$"}, []string{"echo", "$(A) $ script$"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &recordingRunner{}
			if _, err := probeOnce(t, exec.New(r), execSpec(1, env, tc.cmd...)); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.cmd, tc.want) {
				t.Fatalf("runner got %q, want %q", r.cmd, tc.want)
			}
		})
	}
}

// TestE1_ExpandOnceInPrepare: the command is expanded in Prepare; later
// changes to the container's env do not change the prepared command, and
// the spec's command is not modified.
func TestE1_ExpandOnceInPrepare(t *testing.T) {
	spec := execSpec(1, []v1.EnvVar{{Name: "A", Value: "one"}}, "echo", "$(A)")
	r := &recordingRunner{}
	p, err := exec.New(r).Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Container.Env[0].Value = "two"
	for i := 0; i < 2; i++ {
		if _, err := p.Probe(context.Background(), runtime.Target{}); err != nil {
			t.Fatal(err)
		}
		if r.cmd[1] != "one" {
			t.Fatalf("run %d: arg = %q, want %q", i, r.cmd[1], "one")
		}
	}
	if spec.Probe.Exec.Command[1] != "$(A)" {
		t.Fatalf("spec command modified: %q", spec.Probe.Exec.Command)
	}
}

// TestPR2_RunnerContract is spec 8.3 PR2 (TestNewExecInContainer): the
// runner receives the container ID, the exact argv and the probe timeout;
// on a runner error the delivered output is kept and the error's verdict
// returned; output beyond 10 KiB is cut by the handler.
func TestPR2_RunnerContract(t *testing.T) {
	r := &recordingRunner{out: append([]byte("out"), bytes.Repeat([]byte("e"), 20*1024)...), err: exitErr(3)}
	got, err := probeOnce(t, exec.New(r), execSpec(7, nil, "/bin/check", "--a", "b c"))
	if err != nil {
		t.Fatal(err)
	}
	if r.calls != 1 || r.id != "test://cOnTaInEr_Id" || !reflect.DeepEqual(r.cmd, []string{"/bin/check", "--a", "b c"}) || r.timeout != 7*time.Second {
		t.Fatalf("runner called %d× with id %q cmd %q timeout %v", r.calls, r.id, r.cmd, r.timeout)
	}
	if got.Result != runtime.Failure || got.ExitCode != 3 || len(got.Output) != runtime.MaxOutputBytes || !strings.HasPrefix(got.Output, "oute") {
		t.Fatalf("outcome = %v exit %d, %d bytes %q…", got.Result, got.ExitCode, len(got.Output), trunc(got.Output))
	}
}

// TestPrepareErrors: a spec without an exec action or with an empty command
// cannot be prepared, which makes the probe errored (P5).
func TestPrepareErrors(t *testing.T) {
	h := exec.New(&recordingRunner{})
	for name, spec := range map[string]*runtime.Spec{
		"nil spec":      nil,
		"nil probe":     {Kind: runtime.KindExec},
		"no exec":       {Kind: runtime.KindExec, Probe: &v1.Probe{}},
		"empty command": execSpec(1, nil),
	} {
		if p, err := h.Prepare(spec); err == nil || p != nil {
			t.Errorf("%s: Prepare = (%v, %v), want an error", name, p, err)
		}
	}
	// A nil Container is fine: no env, nothing expands.
	spec := execSpec(1, nil, "echo", "$(A)")
	spec.Container = nil
	r := &recordingRunner{}
	if _, err := probeOnce(t, exec.New(r), spec); err != nil || r.cmd[1] != "$(A)" {
		t.Fatalf("nil container: err %v, cmd %q", err, r.cmd)
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40]
	}
	return s
}

// An annotation probe's timeoutMilliseconds reaches the runner
// (spec.Timeout: timeoutSeconds 1 and -700 ms is 300 ms).
func TestSubSecondTimeoutReachesRunner(t *testing.T) {
	r := &recordingRunner{out: []byte("ok")}
	spec := execSpec(1, nil, "true")
	spec.Milliseconds = &runtime.Milliseconds{Timeout: -700}
	if _, err := probeOnce(t, exec.New(r), spec); err != nil {
		t.Fatal(err)
	}
	if r.timeout != 300*time.Millisecond {
		t.Fatalf("runner timeout %v, want 300ms", r.timeout)
	}
}
