//go:build linux

package exec_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

// proc is one entry of /proc.
type proc struct {
	pid, ppid, pgid int
	state           byte
	cmdline         string // NUL-separated args joined by spaces; "" for zombies
}

// procs lists the processes currently in /proc. Processes that vanish while
// being read are skipped.
func procs(t *testing.T) []proc {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp ...": comm may hold spaces and ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 {
			continue
		}
		p := proc{pid: pid, state: f[0][0]}
		p.ppid, _ = strconv.Atoi(f[1])
		p.pgid, _ = strconv.Atoi(f[2])
		cl, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		p.cmdline = strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " "))
		out = append(out, p)
	}
	return out
}

// uniqueSleep returns a sleep length in seconds (≥ 3600) unlikely to be used
// by anything else, so "sleep N" identifies this test's processes.
func uniqueSleep() string { return strconv.Itoa(3600 + rand.IntN(50000)) }

// killMarked SIGKILLs every live process whose command line holds marker
// (cleanup for tests that deliberately leave one behind).
func killMarked(t *testing.T, marker string) {
	for _, p := range procs(t) {
		if p.state != 'Z' && strings.Contains(p.cmdline, marker) {
			_ = unix.Kill(p.pid, unix.SIGKILL)
		}
	}
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ownZombies returns this test process's children that are zombies.
func ownZombies(t *testing.T) []proc {
	var z []proc
	for _, p := range procs(t) {
		if p.ppid == os.Getpid() && p.state == 'Z' {
			z = append(z, p)
		}
	}
	return z
}

// TestBR02_TimedOutTreeKilledAndReaped is BR-02: a command that ignores
// SIGTERM and has a child, with timeoutSeconds 1, run three times in a row.
// Each attempt is a Failure at ~1 s (within timeout + 500 ms); afterwards
// the sh is gone (reaped by us: no zombie of ours) and its sleep child is
// dead at once and gone from /proc within BR-02's 2 s (the orphan's zombie is
// PID 1's to reap); at most one probe-spawned tree is alive at any time.
func TestBR02_TimedOutTreeKilledAndReaped(t *testing.T) {
	n := uniqueSleep()
	marker := "sleep " + n
	script := "trap '' TERM; sleep " + n
	h := exec.New(&exec.LocalRunner{})
	p, err := h.Prepare(execSpec(1, nil, "sh", "-c", script))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killMarked(t, marker) })

	// Sample the marked processes every 20 ms: live trees (by process group)
	// at once, and every group seen.
	var (
		mu       sync.Mutex
		maxAlive int
		seen     = map[int]bool{}
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			alive := map[int]bool{}
			for _, p := range procs(t) {
				if p.state != 'Z' && strings.Contains(p.cmdline, marker) {
					alive[p.pgid] = true
				}
			}
			mu.Lock()
			maxAlive = max(maxAlive, len(alive))
			for g := range alive {
				seen[g] = true
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	wantOut := fmt.Sprintf("command %q timed out", "sh -c "+script)
	for run := 1; run <= 3; run++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		got, err := p.Probe(ctx, runtime.Target{Attempt: 1})
		elapsed := time.Since(start)
		cancel()
		if err != nil || got.Result != runtime.Failure || got.Output != wantOut || got.ExitCode != -1 {
			t.Fatalf("run %d: outcome %+v err %v, want failure %q exit -1", run, got, err, wantOut)
		}
		if elapsed < 900*time.Millisecond || elapsed > 1500*time.Millisecond {
			t.Fatalf("run %d took %v, want ~1 s (≤ timeout + 500 ms)", run, elapsed)
		}
		if z := ownZombies(t); len(z) > 0 {
			t.Fatalf("run %d: zombie children left: %+v", run, z)
		}
		mu.Lock()
		groups := len(seen)
		mu.Unlock()
		if groups != run {
			t.Fatalf("run %d: sampler saw %d process groups, want %d", run, groups, run)
		}
		// SIGKILL reached the whole group: no live member of any tree.
		if !eventually(200*time.Millisecond, func() bool {
			for _, p := range procs(t) {
				if p.state != 'Z' && strings.Contains(p.cmdline, marker) {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("run %d: a process of the timed-out tree survived", run)
		}
	}
	close(stop)
	<-sampled

	mu.Lock()
	defer mu.Unlock()
	if maxAlive > 1 {
		t.Fatalf("%d probe-spawned trees alive at once, want at most 1", maxAlive)
	}
	// Nothing of any tree, zombies included, within 2 s of the last attempt.
	var left []proc
	if !eventually(2*time.Second, func() bool {
		left = left[:0]
		for _, p := range procs(t) {
			if seen[p.pgid] || seen[p.pid] {
				left = append(left, p)
			}
		}
		return len(left) == 0
	}) {
		t.Fatalf("processes of timed-out trees still present 2 s later: %+v", left)
	}
}

// TestE2_LocalRunnerOutputOrder: output is stdout followed by stderr, not
// interleaved (E2), even when stderr is written first.
func TestE2_LocalRunnerOutputOrder(t *testing.T) {
	t.Parallel()
	out, err := (&exec.LocalRunner{}).RunInContainer(context.Background(), "", []string{"sh", "-c", "echo e1 >&2; echo o1; echo e2 >&2; echo o2"}, 5*time.Second)
	if err != nil || string(out) != "o1\no2\ne1\ne2\n" {
		t.Fatalf("got %q, %v; want stdout then stderr", out, err)
	}
	// stdout of 11 KiB leaves no room for stderr; short stdout is followed by
	// stderr up to the 10 KiB total.
	out, err = (&exec.LocalRunner{}).RunInContainer(context.Background(), "", []string{"sh", "-c", "echo o; head -c 11264 /dev/zero | tr '\\0' e >&2"}, 5*time.Second)
	if err != nil || len(out) != runtime.MaxOutputBytes || !strings.HasPrefix(string(out), "o\neee") {
		t.Fatalf("got %d bytes %q…, %v", len(out), out[:min(len(out), 8)], err)
	}
}

// TestE2_LocalRunnerDrainsLargeOutput: a command writing far more than the
// pipe holds is not blocked (output beyond 10 KiB is read and dropped) and
// its exit status is kept.
func TestE2_LocalRunnerDrainsLargeOutput(t *testing.T) {
	t.Parallel()
	start := time.Now()
	out, err := (&exec.LocalRunner{}).RunInContainer(context.Background(), "", []string{"sh", "-c", "head -c 4194304 /dev/zero; head -c 1048576 /dev/zero >&2; exit 4"}, 10*time.Second)
	var ee exec.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 4 {
		t.Fatalf("err = %v, want exit status 4", err)
	}
	if len(out) != runtime.MaxOutputBytes {
		t.Fatalf("output %d bytes, want %d", len(out), runtime.MaxOutputBytes)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestPR2_LocalRunnerArgvVerbatim: the command is not run through a shell
// (spec 1.3, E1): spaces, globs and $(...) reach the program as they are, and
// the output is delivered together with an exit error (PR2).
func TestPR2_LocalRunnerArgvVerbatim(t *testing.T) {
	t.Parallel()
	out, err := (&exec.LocalRunner{}).RunInContainer(context.Background(), "ignored://id",
		[]string{"sh", "-c", `printf '%s|' "$@"; exit 3`, "sh", "a b", "*", "$(X)", ";", ""}, 5*time.Second)
	var ee *exec.CodeExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 3 {
		t.Fatalf("err = %v, want *CodeExitError 3", err)
	}
	if string(out) != "a b|*|$(X)|;||" {
		t.Fatalf("output = %q", out)
	}
	if _, err := (&exec.LocalRunner{}).RunInContainer(context.Background(), "", nil, time.Second); err == nil {
		t.Fatal("empty command: want an error")
	}
}

// TestBR02_LocalRunnerCancelIsErroredAndKills: cancelling ctx (not a
// deadline) kills the group and is errored (context.Canceled), not a
// timeout Failure; an already expired ctx runs nothing and is a timeout.
func TestBR02_LocalRunnerCancelIsErroredAndKills(t *testing.T) {
	t.Parallel()
	n := uniqueSleep()
	t.Cleanup(func() { killMarked(t, "sleep "+n) })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := (&exec.LocalRunner{}).RunInContainer(ctx, "", []string{"sh", "-c", "trap '' TERM; sleep " + n}, 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	var te *exec.TimeoutError
	if errors.As(err, &te) {
		t.Fatalf("cancel reported as timeout: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v after cancel at 200ms", d)
	}
	if !eventually(200*time.Millisecond, func() bool {
		for _, p := range procs(t) {
			if p.state != 'Z' && strings.Contains(p.cmdline, "sleep "+n) {
				return false
			}
		}
		return true
	}) {
		t.Fatal("cancelled tree survived")
	}

	expired, cancel2 := context.WithTimeout(context.Background(), -time.Second)
	defer cancel2()
	marker := t.TempDir() + "/ran"
	_, err = (&exec.LocalRunner{}).RunInContainer(expired, "", []string{"touch", marker}, time.Second)
	if !errors.As(err, &te) {
		t.Fatalf("expired ctx: err = %v, want *TimeoutError", err)
	}
	if _, statErr := os.Stat(marker); statErr == nil {
		t.Fatal("expired ctx: the command ran")
	}
}

// TestBR02_LeftoversKilledAfterExit: a command that exits while a
// background child of its group still runs (holding stdout) returns at once
// with its own verdict, and the child is killed: no probe-spawned process
// outlives the run.
func TestBR02_LeftoversKilledAfterExit(t *testing.T) {
	t.Parallel()
	n := uniqueSleep()
	t.Cleanup(func() { killMarked(t, "sleep "+n) })
	start := time.Now()
	out, err := (&exec.LocalRunner{}).RunInContainer(context.Background(), "", []string{"sh", "-c", "sleep " + n + " & echo started"}, 5*time.Second)
	if err != nil || string(out) != "started\n" {
		t.Fatalf("got %q, %v", out, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v: waited on the background child", d)
	}
	if !eventually(200*time.Millisecond, func() bool {
		for _, p := range procs(t) {
			if p.state != 'Z' && strings.Contains(p.cmdline, "sleep "+n) {
				return false
			}
		}
		return true
	}) {
		t.Fatal("background child survived the run")
	}
}

// TestE2_LocalRunnerEscapedGrandchildHoldsPipe: in the process-group mode,
// a grandchild that left the process group (setsid) and keeps stdout open
// after the command exited does not hold the run beyond WaitDelay. (The
// cgroup mode kills it: TestBR02_CgroupKillsWhatLeftTheSession.)
func TestE2_LocalRunnerEscapedGrandchildHoldsPipe(t *testing.T) {
	t.Parallel()
	if _, err := osexec.LookPath("setsid"); err != nil {
		t.Skip("setsid not available")
	}
	n := uniqueSleep()
	t.Cleanup(func() { killMarked(t, "sleep "+n) })
	r := &exec.LocalRunner{WaitDelay: 100 * time.Millisecond, ProcessGroupOnly: true}
	start := time.Now()
	// The pause lets the grandchild leave the group before sh exits.
	out, err := r.RunInContainer(context.Background(), "", []string{"sh", "-c", "setsid sleep " + n + " & sleep 0.3; echo hi"}, 5*time.Second)
	if err != nil || string(out) != "hi\n" {
		t.Fatalf("got %q, %v", out, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v: waited on the escaped grandchild's pipe", d)
	}
	// The scenario really happened: the grandchild escaped and still runs.
	escaped := false
	for _, p := range procs(t) {
		if p.state != 'Z' && p.cmdline == "sleep "+n {
			escaped = true
		}
	}
	if !escaped {
		t.Fatal("the setsid grandchild is not running: the test did not exercise an escaped pipe holder")
	}
}

// requireCgroupMode skips the test where the host does not allow the cgroup
// mode, unless PROBED_REQUIRE_CGROUP=1 (CI, as root), where it fails.
// forEachTreeKillMode runs f as a subtest per tree-kill mode (BR-01/BR-02):
// the cgroup mode (skipped where cgroup v2 leaves cannot be made, unless
// PROBED_REQUIRE_CGROUP=1) and the process-group fallback, with a runner
// for that mode. The test is skipped without setsid, which its command
// trees use to leave the process group.
func forEachTreeKillMode(t *testing.T, f func(t *testing.T, mode string, r *exec.LocalRunner)) {
	t.Helper()
	if _, err := osexec.LookPath("setsid"); err != nil {
		t.Skip("setsid not available")
	}
	for _, mode := range []string{exec.TreeKillCgroup, exec.TreeKillProcessGroup} {
		t.Run(mode, func(t *testing.T) {
			r := &exec.LocalRunner{ProcessGroupOnly: mode == exec.TreeKillProcessGroup}
			if mode == exec.TreeKillCgroup {
				requireCgroupMode(t)
			}
			f(t, mode, r)
		})
	}
}

func requireCgroupMode(t *testing.T) {
	t.Helper()
	if tk := exec.HostTreeKill(); tk.Mode != exec.TreeKillCgroup {
		if os.Getenv("PROBED_REQUIRE_CGROUP") == "1" {
			t.Fatalf("cgroup tree kill not available: %s", tk.Reason)
		}
		t.Skipf("cgroup tree kill not available here: %s", tk.Reason)
	}
}

// liveMarked returns the live processes whose command line is exactly cmd.
func liveMarked(t *testing.T, cmd string) []proc {
	var out []proc
	for _, p := range procs(t) {
		if p.state != 'Z' && p.cmdline == cmd {
			out = append(out, p)
		}
	}
	return out
}

// ownLeaves returns the cgroup leaves of this process still present.
func ownLeaves(t *testing.T) []string {
	t.Helper()
	tk := exec.HostTreeKill()
	if tk.Cgroup == "" {
		return nil
	}
	m, _ := filepath.Glob(filepath.Join(tk.Cgroup, fmt.Sprintf("probed-exec-%d-*", os.Getpid())))
	return m
}

// TestBR02_SetsidChildKilledAfterTimeout: a command whose
// child calls setsid (a session and process group of its own) times out;
// once the run returned, neither the command nor that child runs any more,
// in the cgroup mode (cgroup.kill) and in the process-group fallback (the
// group, then the parent links), and the cgroup mode removed its leaf.
func TestBR02_SetsidChildKilledAfterTimeout(t *testing.T) {
	forEachTreeKillMode(t, func(t *testing.T, mode string, r *exec.LocalRunner) {
		if got := r.TreeKill().Mode; got != mode {
			t.Fatalf("runner mode %q, want %q", got, mode)
		}
		n := uniqueSleep()
		t.Cleanup(func() { killMarked(t, "sleep "+n) })
		cmd := []string{"sh", "-c", "setsid sleep " + n + " & sleep " + n}
		start := time.Now()
		_, err := r.RunInContainer(context.Background(), "", cmd, time.Second)
		var te *exec.TimeoutError
		if !errors.As(err, &te) {
			t.Fatalf("err = %v, want *TimeoutError", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("took %v, want ~1 s", d)
		}
		// Killed before the run returned: SIGKILL is delivered at once,
		// the exit (and /proc) may lag by a moment.
		if !eventually(500*time.Millisecond, func() bool { return len(liveMarked(t, "sleep "+n)) == 0 }) {
			t.Fatalf("left running after the timeout: %+v", liveMarked(t, "sleep "+n))
		}
		if l := ownLeaves(t); mode == exec.TreeKillCgroup && len(l) > 0 {
			t.Fatalf("cgroup leaves left: %v", l)
		}
	})
}

// TestBR02_CgroupKillsWhatLeftTheSession: in the cgroup mode, what the
// command left behind after exiting by itself is killed whatever it did:
// a setsid grandchild, and a daemon whose parent exited at once (double
// fork: re-parented away from the command's tree, out of reach of process
// groups and parent links).
func TestBR02_CgroupKillsWhatLeftTheSession(t *testing.T) {
	if _, err := osexec.LookPath("setsid"); err != nil {
		t.Skip("setsid not available")
	}
	requireCgroupMode(t)
	n, d := uniqueSleep(), uniqueSleep()
	t.Cleanup(func() { killMarked(t, "sleep "+n); killMarked(t, "sleep "+d) })
	r := &exec.LocalRunner{WaitDelay: 100 * time.Millisecond}
	out, err := r.RunInContainer(context.Background(), "", []string{"sh", "-c",
		"setsid sleep " + n + " & (setsid sleep " + d + " >/dev/null 2>&1 &); sleep 0.3; echo hi"}, 5*time.Second)
	if err != nil || string(out) != "hi\n" {
		t.Fatalf("got %q, %v", out, err)
	}
	for _, c := range []string{"sleep " + n, "sleep " + d} {
		if !eventually(500*time.Millisecond, func() bool { return len(liveMarked(t, c)) == 0 }) {
			t.Fatalf("%q survived the run: %+v", c, liveMarked(t, c))
		}
	}
	if l := ownLeaves(t); len(l) > 0 {
		t.Fatalf("cgroup leaves left: %v", l)
	}
}
