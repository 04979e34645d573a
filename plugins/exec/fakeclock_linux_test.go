//go:build linux

package exec_test

import (
	"context"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

// runOnFakeClock starts one runtime.Run of spec with the local runner r on
// a runtime whose clock is fc.
func runOnFakeClock(t *testing.T, r *exec.LocalRunner, fc *testingclock.FakeClock, spec *runtime.Spec) <-chan runtime.Report {
	t.Helper()
	rt, err := runtime.New(runtime.Options{Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	if err := rt.Register(runtime.KindExec, exec.New(r)); err != nil {
		t.Fatal(err)
	}
	p := rt.Prepare(spec)
	done := make(chan runtime.Report, 1)
	go func() { done <- rt.Run(context.Background(), p, runtime.Target{ContainerID: "test://c", Attempt: 1}) }()
	return done
}

func awaitReport(t *testing.T, done <-chan runtime.Report) runtime.Report {
	t.Helper()
	select {
	case rep := <-done:
		return rep
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end")
		return runtime.Report{}
	}
}

// BR-01/BR-02, E3 on a fake clock: a command tree (one that ignores
// SIGTERM, and a child that left for a session of its own) still running
// when the fake clock passes timeoutSeconds (30 s: a real-time bound would
// not end it within the wait) gives the kubelet's timeout result, a
// Failure with output `command "<cmd>" timed out`, and the whole tree is
// killed and reaped, in the cgroup mode and the process-group fallback.
func TestBR02_TimeoutOnFakeClock(t *testing.T) {
	forEachTreeKillMode(t, func(t *testing.T, mode string, r *exec.LocalRunner) {
		n := uniqueSleep()
		t.Cleanup(func() { killMarked(t, "sleep "+n) })
		cmd := []string{"sh", "-c", "trap '' TERM; setsid sleep " + n + " & sleep " + n}
		fc := testingclock.NewFakeClock(time.Now())
		done := runOnFakeClock(t, r, fc, execSpec(30, nil, cmd...))
		if !eventually(10*time.Second, func() bool { return len(liveMarked(t, "sleep "+n)) == 2 }) {
			t.Fatalf("the command tree did not start: %+v", liveMarked(t, "sleep "+n))
		}
		fc.Step(30 * time.Second)
		rep := awaitReport(t, done)
		want := (&exec.TimeoutError{Cmd: cmd}).Error()
		if rep.Err != nil || rep.Outcome.Result != runtime.Failure || rep.Outcome.Output != want || rep.Outcome.ExitCode != -1 || rep.Attempts != 1 {
			t.Fatalf("report %+v, want one attempt, Failure %q, exit code -1", rep, want)
		}
		if !eventually(500*time.Millisecond, func() bool { return len(liveMarked(t, "sleep "+n)) == 0 }) {
			t.Fatalf("left running after the timeout: %+v", liveMarked(t, "sleep "+n))
		}
		if z := ownZombies(t); len(z) > 0 {
			t.Fatalf("zombies left: %+v", z)
		}
		if l := ownLeaves(t); mode == exec.TreeKillCgroup && len(l) > 0 {
			t.Fatalf("cgroup leaves left: %v", l)
		}
	})
}

// E3 on a fake clock: a command that exits 0 after more real time than
// timeoutSeconds, while the fake clock stays before the deadline, is not
// killed: Success with its output.
func TestE3_NotCutOnRealTimeOnFakeClock(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Now())
	rep := awaitReport(t, runOnFakeClock(t, &exec.LocalRunner{}, fc, execSpec(1, nil, "sh", "-c", "sleep 1.3; echo done")))
	if rep.Err != nil || rep.Outcome.Result != runtime.Success || rep.Outcome.Output != "done\n" {
		t.Fatalf("report %+v, want Success \"done\\n\"", rep)
	}
}
