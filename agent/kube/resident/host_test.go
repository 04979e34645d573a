package resident_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/probed/probed/agent/kube/cri"
	"github.com/probed/probed/agent/kube/resident"
	probeexec "github.com/probed/probed/plugins/exec"
)

// The helper script on this host's shells, with real processes: the
// script's semantics (verdicts, kills, environment, lifecycle) under each
// sh a container may have — busybox ash, dash, bash — without a container
// runtime. hostRuntime plays the runtime: its Stream starts the helper as
// a child process (the streaming exec), its ExecSync runs a command
// directly. The comparison baseline is exec.LocalRunner, which runs a
// command directly on this host as ExecSync does in a container. The same
// cases run in a real container in resident_cri_test.go.

// shells are the sh implementations to run the helper under: found on
// this host, else skipped.
func shells(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	if p, err := exec.LookPath("busybox"); err == nil {
		out["busybox"] = []string{p, "sh"}
	}
	for _, sh := range []string{"dash", "bash"} {
		if p, err := exec.LookPath(sh); err == nil {
			out[sh] = []string{p}
		}
	}
	if len(out) == 0 {
		t.Skip("no busybox, dash or bash on this host")
	}
	return out
}

// hostRuntime starts helpers as children of the test ("host://<name>"
// container IDs), with the test's environment and working directory and
// a marker variable that finds their processes.
type hostRuntime struct {
	shell  []string
	marker string // PROBED_TEST_HELPER=<marker> in the helper's environment

	mu      sync.Mutex
	streams int
	kills   int
}

func (h *hostRuntime) ContainerID(statusID string) (string, error) {
	id, ok := strings.CutPrefix(statusID, "host://")
	if !ok || id == "" {
		return "", fmt.Errorf("container ID %q is not host://", statusID)
	}
	return id, nil
}

// command maps a "sh" argv to the shell under test.
func (h *hostRuntime) command(ctx context.Context, cmd []string) *exec.Cmd {
	argv := cmd
	if cmd[0] == "sh" {
		argv = append(append([]string{}, h.shell...), cmd[1:]...)
	}
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Env = append(os.Environ(), "PROBED_TEST_HELPER="+h.marker)
	c.WaitDelay = 200 * time.Millisecond
	return c
}

// Resolve confirms every host:// container (a host has no labels to check).
func (h *hostRuntime) Resolve(_ context.Context, statusID string, _ probeexec.PodContainer) (cri.Container, error) {
	id, err := h.ContainerID(statusID)
	return cri.Container{ID: id, StatusID: statusID}, err
}

func (h *hostRuntime) Stream(ctx context.Context, _ cri.Container, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error {
	h.mu.Lock()
	h.streams++
	h.mu.Unlock()
	c := h.command(ctx, cmd)
	// The process's stdin is a pipe this copy feeds (as the runtime's
	// stream does): exec.Cmd would wait for its own copy, which waits for
	// a request until the runner closes the session after Stream returns.
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	go func() {
		_, _ = io.Copy(pw, stdin)
		pw.Close()
	}()
	c.Stdin, c.Stdout, c.Stderr = pr, stdout, stderr
	err = c.Run()
	pr.Close()
	return err
}

func (h *hostRuntime) ExecSync(ctx context.Context, _ cri.Container, cmd []string, _ time.Duration) ([]byte, []byte, error) {
	h.mu.Lock()
	h.kills++
	h.mu.Unlock()
	c := h.command(ctx, cmd)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	return out.Bytes(), errb.Bytes(), err
}

// helperPIDs are the processes of this runtime's helpers (and of the
// commands they started that kept the marker).
func (h *hostRuntime) helperPIDs(t *testing.T) []int {
	t.Helper()
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, []byte("PROBED_TEST_HELPER="+h.marker+"\x00")) {
			if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && !bytes.Contains(stat, []byte(") Z ")) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// hostEnv is a runner of resident helpers on this host under shell, with
// LocalRunner as its ExecSync.
type hostEnv struct {
	rt     *hostRuntime
	runner *resident.Runner
	reg    *prometheus.Registry
}

func newHostEnv(t *testing.T, shell []string, opts resident.Options) *hostEnv {
	t.Helper()
	e := &hostEnv{rt: &hostRuntime{shell: shell, marker: fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())}, reg: prometheus.NewRegistry()}
	opts.Runtime, opts.ExecSync, opts.Registerer = e.rt, &probeexec.LocalRunner{}, e.reg
	t.Cleanup(func() { waitNoHelper(t, e.rt) }) // after the runner's Close (cleanups run last first)
	e.runner = newRunner(t, opts)
	return e
}

// newRunner is resident.New(opts) (its log discarded unless given),
// closed when the test ends.
func newRunner(t *testing.T, opts resident.Options) *resident.Runner {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := resident.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = r.Close(ctx)
	})
	return r
}

// waitLost waits until r has replaced a helper for reason.
func waitLost(t *testing.T, r *resident.Runner, reason string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(r.Lost().WithLabelValues(reason)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no helper lost for %s within 30 s", reason)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitNoHelper waits until no process of rt's helpers is left.
func waitNoHelper(t *testing.T, rt *hostRuntime) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(rt.helperPIDs(t)) > 0 {
		if time.Now().After(deadline) {
			t.Errorf("helper processes left: %v", rt.helperPIDs(t))
			for _, p := range rt.helperPIDs(t) {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// warm runs true until a run goes through the container's helper.
func (e *hostEnv) warm(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.runner.Mode(id) != resident.ModeResident {
		if _, err := e.runner.RunInContainer(context.Background(), id, []string{"true"}, time.Second); err != nil {
			t.Fatalf("warm-up: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no helper ready after 10 s: %s", e.runner.Mode(id))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *hostEnv) runs(mode, reason string) float64 {
	return testutil.ToFloat64(e.runner.Runs().WithLabelValues(mode, reason))
}

// result is a run as the exec handler sees it.
type result struct {
	out     string
	code    int    // -1: none (errored or timed out)
	timeout string // the TimeoutError's text
	err     string // an errored run's error
}

func toResult(out []byte, err error) result {
	r := result{out: string(out), code: -1}
	var exit probeexec.ExitError
	var te *probeexec.TimeoutError
	switch {
	case err == nil:
		r.code = 0
	case errors.As(err, &exit):
		r.code = exit.ExitStatus()
	case errors.As(err, &te):
		r.timeout, r.out = te.Error(), ""
	default:
		r.err = err.Error()
	}
	return r
}

// The verdicts of the helper are LocalRunner's (ExecSync's on this host):
// exit codes, stdout then stderr cut at 10 KiB, stdin at EOF, 128+signal
// for a command killed by a signal, an errored run for a command runc
// would not start; and the command's environment and working directory
// are the exec's own.
func TestHostVerdictsAsLocalRunner(t *testing.T) {
	for name, shell := range shells(t) {
		t.Run(name, func(t *testing.T) {
			e := newHostEnv(t, shell, resident.Options{})
			e.warm(t, "host://a")
			local := &probeexec.LocalRunner{}
			for _, cmd := range [][]string{
				{"true"},
				{"false"},
				{"sh", "-c", "echo out; echo err >&2; exit 7"},
				{"sh", "-c", "echo only-err >&2"},
				{"sh", "-c", "head -c 200000 /dev/zero | tr '\\0' a; echo tail >&2"},
				{"sh", "-c", "read x; echo read=$?; cat; echo cat=$?"},
				{"sh", "-c", "kill -9 $$"},
				{"sh", "-c", "kill -TERM $$"},
				{"sh", "-c", "exit 255"},
				{"env"},
				{"pwd"},
				{"sh", "-c", "ls /proc/self/fd"},
				{"sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status"},
				{"echo", "it's", "two\nlines", "$HOME", "*", `\"`},
				{"/bin/sh", "-c", `printf '%s|' "$0" "$@"`, "zero", "a b", ""},
			} {
				want := toResult(local.RunInContainer(context.Background(), "", cmd, 5*time.Second))
				got := toResult(e.runner.RunInContainer(context.Background(), "host://a", cmd, 5*time.Second))
				if cmd[0] == "env" {
					// The order of the variables is the shell's; bash also
					// gives every command it starts its path as $_.
					want.out, got.out = envSet(want.out, name == "bash"), envSet(got.out, name == "bash")
				}
				if got != want {
					t.Errorf("%q:\nhelper %+v\nlocal  %+v", cmd, got, want)
				}
			}
			if n := e.runs(resident.ModeResident, ""); n < 15 {
				t.Fatalf("%v runs through the helper, want all 15", n)
			}
		})
	}
}

// envSet is env's output sorted, without the test's marker (only the
// helper's environment has it) and, for bash, without $_.
func envSet(s string, noUnderscore bool) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if !strings.HasPrefix(l, "PROBED_TEST_HELPER=") && !(noUnderscore && strings.HasPrefix(l, "_=")) {
			keep = append(keep, l)
		}
	}
	slices.Sort(keep)
	return strings.Join(keep, "\n")
}

// A command runc would not start is an errored run, in runc's words.
func TestHostNotStartedIsErrored(t *testing.T) {
	for name, shell := range shells(t) {
		t.Run(name, func(t *testing.T) {
			e := newHostEnv(t, shell, resident.Options{})
			e.warm(t, "host://a")
			dir := t.TempDir()
			for cmd, want := range map[string]string{
				"no-such-command-xyz":   `exec: "no-such-command-xyz": executable file not found in $PATH`,
				"/no/such/file":         `exec: "/no/such/file": stat /no/such/file: no such file or directory`,
				dir:                     fmt.Sprintf(`exec: %q: permission denied`, dir),
				"cd":                    `exec: "cd": executable file not found in $PATH`, // a builtin only: not a program
				filepath.Join(dir, "x"): fmt.Sprintf(`exec: %q: stat %s: no such file or directory`, filepath.Join(dir, "x"), filepath.Join(dir, "x")),
			} {
				r := toResult(e.runner.RunInContainer(context.Background(), "host://a", []string{cmd}, time.Second))
				if r.code != -1 || !strings.HasSuffix(r.err, want) {
					t.Errorf("%s: %+v, want errored with %q", cmd, r, want)
				}
			}
			if e.runner.Mode("host://a") != resident.ModeResident {
				t.Fatal("the helper did not survive")
			}
		})
	}
}

// Nothing of a run is seen by the next: a cd, a variable, an exported
// variable, a umask, a trap.
func TestHostRunsShareNothing(t *testing.T) {
	for name, shell := range shells(t) {
		t.Run(name, func(t *testing.T) {
			e := newHostEnv(t, shell, resident.Options{})
			e.warm(t, "host://a")
			probe := []string{"sh", "-c", "pwd; echo X=$X Y=$Y; umask"}
			before := toResult(e.runner.RunInContainer(context.Background(), "host://a", probe, time.Second))
			r := toResult(e.runner.RunInContainer(context.Background(), "host://a", []string{"sh", "-c", "cd /; X=1; export Y=2; umask 077; trap '' TERM; pwd"}, time.Second))
			if r.out != "/\n" {
				t.Fatalf("cd: %+v", r)
			}
			after := toResult(e.runner.RunInContainer(context.Background(), "host://a", probe, time.Second))
			if before != after || before.code != 0 || !strings.Contains(before.out, "X= Y=\n") {
				t.Fatalf("before %+v\nafter  %+v", before, after)
			}
		})
	}
}

// At its timeout a command is killed with everything it started: a
// SIGTERM-ignoring shell and its child, and a setsid child that keeps the
// output open after its parent exited (with ExecSync it would hold the
// call until it ends). The run is the kubelet's timeout Failure, at the
// timeout.
func TestHostTimeoutKillsTheTree(t *testing.T) {
	for name, shell := range shells(t) {
		t.Run(name, func(t *testing.T) {
			e := newHostEnv(t, shell, resident.Options{})
			e.warm(t, "host://a")
			for _, tc := range []struct {
				cmd    []string
				marker string
			}{
				{[]string{"sh", "-c", "trap '' TERM; sleep 7771; echo done"}, "sleep 7771"},
				{[]string{"sh", "-c", "setsid sleep 7772 & echo parent"}, "sleep 7772"},
				{[]string{"sh", "-c", "sleep 7773 & sleep 7774"}, "sleep 777"},
			} {
				start := time.Now()
				r := toResult(e.runner.RunInContainer(context.Background(), "host://a", tc.cmd, 1500*time.Millisecond))
				took := time.Since(start)
				want := fmt.Sprintf(`command timed out: %q timed out after 1.5s`, strings.Join(tc.cmd, " "))
				if r.timeout != want {
					t.Errorf("%q: %+v, want the timeout %q", tc.cmd, r, want)
				}
				if took < 1500*time.Millisecond || took > 3*time.Second {
					t.Errorf("%q: ended after %v", tc.cmd, took)
				}
				if left := processesWith(t, tc.marker); len(left) > 0 {
					t.Errorf("%q: still running after its timeout: %v", tc.cmd, left)
				}
			}
			if e.runner.Mode("host://a") != resident.ModeResident {
				t.Fatal("the helper did not survive the kills")
			}
			if r := toResult(e.runner.RunInContainer(context.Background(), "host://a", []string{"echo", "ok"}, time.Second)); r.out != "ok\n" {
				t.Fatalf("after the kills: %+v", r)
			}
		})
	}
}

// processesWith returns the command lines of this host's processes that
// contain s.
func processesWith(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if c := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(c, s) && !strings.Contains(c, "probed-exec-helper") {
			if stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); !bytes.Contains(stat, []byte(") Z ")) {
				out = append(out, e.Name()+": "+c)
			}
		}
	}
	return out
}

// helperProcs are the helper's own processes (its shells and cats; not
// the commands it runs, whose command lines are theirs).
func (h *hostRuntime) helperProcs(t *testing.T) []int {
	t.Helper()
	var out []int
	for _, pid := range h.helperPIDs(t) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(b, []byte(resident.Name)) {
			out = append(out, pid)
		}
	}
	return out
}

// helperRoot is the helper's own shell among its processes procs: the one
// whose parent is not one of them (not the lowest PID: PIDs wrap around on
// a busy machine).
func helperRoot(t *testing.T, procs []int) int {
	t.Helper()
	root := 0
	for _, p := range procs {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			t.Fatal(err)
		}
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		ppid, err := strconv.Atoi(fields[1])
		if err != nil {
			t.Fatalf("stat of %d: %q", p, stat)
		}
		if !slices.Contains(procs, ppid) {
			if root != 0 {
				t.Fatalf("two roots among the helper's processes %v: %d and %d", procs, root, p)
			}
			root = p
		}
	}
	if root == 0 {
		t.Fatalf("no root among the helper's processes %v", procs)
	}
	return root
}

// A helper that stops answering (every process of it SIGSTOPped, its
// command too) is, at its run's timeout plus KillGrace, killed through
// ExecSync with all it started, and replaced; that run is errored, never a
// Failure.
func TestHostUnresponsiveHelperIsReplaced(t *testing.T) {
	for name, shell := range shells(t) {
		t.Run(name, func(t *testing.T) {
			e := newHostEnv(t, shell, resident.Options{KillGrace: time.Second, BackoffBase: 100 * time.Millisecond})
			e.warm(t, "host://a")
			stopped := make(chan []int, 1)
			go func() {
				time.Sleep(300 * time.Millisecond)
				pids := e.rt.helperPIDs(t)
				for _, p := range pids {
					_ = syscall.Kill(p, syscall.SIGSTOP)
				}
				stopped <- pids
			}()
			start := time.Now()
			r := toResult(e.runner.RunInContainer(context.Background(), "host://a", []string{"sleep", "7781"}, time.Second))
			took := time.Since(start)
			pids := <-stopped
			if r.code != -1 || r.timeout != "" || !strings.Contains(r.err, "stopped answering") {
				t.Fatalf("%+v: want an errored run (the helper stopped answering)", r)
			}
			if took < 2*time.Second || took > 5*time.Second {
				t.Fatalf("errored after %v, want the timeout (1 s) + KillGrace (1 s) + the kill", took)
			}
			if n := testutil.ToFloat64(e.runner.Lost().WithLabelValues(resident.LostUnresponsive)); n != 1 {
				t.Fatalf("lost{unresponsive} = %v", n)
			}
			for _, p := range pids {
				if alive(p) {
					stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
					cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
					t.Errorf("process %d of the stopped helper is still there: %s (%q)", p, stat, cmd)
				}
			}
			if left := processesWith(t, "sleep 7781"); len(left) > 0 {
				t.Errorf("its command still runs: %v", left)
			}
			e.warm(t, "host://a") // a new helper
		})
	}
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !bytes.Contains(stat, []byte(") Z "))
}

// A helper killed from outside between runs ends its session; the
// container's next run starts a new helper (it goes through ExecSync
// meanwhile), none is errored.
func TestHostKilledHelperIsReplaced(t *testing.T) {
	for name, shell := range shells(t) {
		t.Run(name, func(t *testing.T) {
			e := newHostEnv(t, shell, resident.Options{BackoffBase: 100 * time.Millisecond})
			e.warm(t, "host://a")
			for _, p := range e.rt.helperProcs(t) {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			waitLost(t, e.runner, resident.LostEnded)
			for range 5 {
				if r := toResult(e.runner.RunInContainer(context.Background(), "host://a", []string{"echo", "ok"}, time.Second)); r.out != "ok\n" {
					t.Fatalf("after the kill: %+v", r)
				}
			}
			e.warm(t, "host://a")
		})
	}
}

// A run whose command kills the helper's runner is errored (never a
// Failure), and the helper is replaced.
func TestHostCommandKillingTheHelper(t *testing.T) {
	for name, shell := range shells(t) {
		t.Run(name, func(t *testing.T) {
			e := newHostEnv(t, shell, resident.Options{BackoffBase: 100 * time.Millisecond})
			e.warm(t, "host://a")
			procs := e.rt.helperProcs(t)
			cmd := []string{"kill", "-9"}
			for _, p := range procs {
				cmd = append(cmd, strconv.Itoa(p))
			}
			r := toResult(e.runner.RunInContainer(context.Background(), "host://a", cmd, 2*time.Second))
			if r.code != -1 || r.timeout != "" || r.err == "" {
				t.Fatalf("%+v: want an errored run", r)
			}
			e.warm(t, "host://a")
		})
	}
}

// What a helper writes out of turn (here a command's child writing into
// the helper's own stdout after its run ended) replaces it at once: no
// later run is errored for it.
func TestHostProtocolErrorBetweenRuns(t *testing.T) {
	for name, shell := range shells(t) {
		t.Run(name, func(t *testing.T) {
			e := newHostEnv(t, shell, resident.Options{BackoffBase: 100 * time.Millisecond})
			e.warm(t, "host://a")
			root := helperRoot(t, e.rt.helperProcs(t))
			r := toResult(e.runner.RunInContainer(context.Background(), "host://a",
				[]string{"sh", "-c", fmt.Sprintf("(sleep 0.3; echo junk >/proc/%d/fd/1) </dev/null >/dev/null 2>&1 &", root)}, time.Second))
			if r.code != 0 {
				t.Fatalf("%+v", r)
			}
			waitLost(t, e.runner, resident.LostProtocol)
			if r := toResult(e.runner.RunInContainer(context.Background(), "host://a", []string{"true"}, time.Second)); r.code != 0 {
				t.Fatalf("a run errored for the broken helper: %+v", r)
			}
			e.warm(t, "host://a")
		})
	}
}

// A run cancelled (the probe removed, the agent stopping) is errored with
// the cancellation; its command is killed and the helper serves the next
// run.
func TestHostCancelKillsTheCommand(t *testing.T) {
	for name, shell := range shells(t) {
		t.Run(name, func(t *testing.T) {
			e := newHostEnv(t, shell, resident.Options{})
			e.warm(t, "host://a")
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			_, err := e.runner.RunInContainer(ctx, "host://a", []string{"sleep", "7791"}, 10*time.Second)
			var te *probeexec.TimeoutError
			if !errors.Is(err, context.Canceled) || errors.As(err, &te) {
				t.Fatalf("%v: want the cancellation", err)
			}
			if left := processesWith(t, "sleep 7791"); len(left) > 0 {
				t.Fatalf("still running: %v", left)
			}
			if r := toResult(e.runner.RunInContainer(context.Background(), "host://a", []string{"echo", "ok"}, time.Second)); r.out != "ok\n" || e.runner.Mode("host://a") != resident.ModeResident {
				t.Fatalf("after the cancel: %+v", r)
			}
		})
	}
}

// Close ends every helper, and the command a helper runs.
func TestHostCloseEndsHelpers(t *testing.T) {
	for name, shell := range shells(t) {
		t.Run(name, func(t *testing.T) {
			e := newHostEnv(t, shell, resident.Options{})
			e.warm(t, "host://a")
			e.warm(t, "host://b")
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = e.runner.RunInContainer(context.Background(), "host://a", []string{"sleep", "7792"}, 30*time.Second)
			}()
			time.Sleep(300 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			if err := e.runner.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("Close took %v", time.Since(start))
			}
			<-done
			waitNoHelper(t, e.rt)
			if left := processesWith(t, "sleep 7792"); len(left) > 0 {
				t.Fatalf("still running: %v", left)
			}
		})
	}
}

// A shell without cat in its PATH cannot host a helper (busybox's has its
// own): the container's runs go through ExecSync for good, once said.
func TestHostWithoutCat(t *testing.T) {
	for name, shell := range shells(t) {
		if name == "busybox" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Setenv("PATH", t.TempDir())
			e := newHostEnv(t, shell, resident.Options{})
			want := resident.ModeExecSync + " (no cat in PATH)"
			deadline := time.Now().Add(10 * time.Second)
			for e.runner.Mode("host://a") != want {
				if r := toResult(e.runner.RunInContainer(context.Background(), "host://a", []string{"/bin/echo", "ok"}, time.Second)); r.out != "ok\n" {
					t.Fatalf("%+v", r)
				}
				if time.Now().After(deadline) {
					t.Fatalf("mode %q, want %q", e.runner.Mode("host://a"), want)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := testutil.ToFloat64(e.runner.Starts().WithLabelValues(resident.ReasonUnsupported)); n != 1 {
				t.Fatalf("starts{unsupported} = %v", n)
			}
		})
	}
}
