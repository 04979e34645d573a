//go:build linux

package faults

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probed/probed/runtime"
)

// TestExecFaults runs exec probes (timeoutSeconds 1) whose commands
// misbehave, on the host runner (plugins/exec LocalRunner), through the
// runtime's exec lane:
//
//   - a command that ignores SIGTERM, one that forks children and one that
//     floods stdout are a Failure `command "..." timed out` at the 1 s
//     timeout (E3, ExecProbeTimeout), not retried; the whole process group
//     is SIGKILLed and reaped at the timeout (BR-02): nothing is left, no
//     zombie;
//   - exit codes 126 and 127 (from sh -c) are a plain Failure with that
//     exit code, at once (BR-09);
//   - a binary that does not exist is errored (the command cannot be
//     started, BR-09 b): 3 fast attempts, no process.
//
// Each run holds exactly one slot of the exec lane.
//
// The test process is a child subreaper while it runs, as probed is when it
// runs as PID 1 of a container without an init: the killed grandchildren
// are re-parented to the prober, and unless it reaps them they stay
// zombies for as long as it runs (BR-02: no <defunct> build-up).
func TestExecFaults(t *testing.T) {
	noLeaks(t)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("becoming a child subreaper: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	r := newRig(t)

	dir := t.TempDir()
	notExecutable := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		cmd     []string
		result  runtime.Result
		errored bool
		// timedOut: the command outlives the timeout and is killed.
		timedOut bool
		exitCode int
		// groups is the number of probe-spawned process groups (at most,
		// when minMembers is 0: a fast command may come and go between
		// two samples), minMembers the fewest processes seen in each.
		groups, minMembers int
	}{
		{name: "ignores-SIGTERM", cmd: []string{"sh", "-c", "trap '' TERM; sleep 100"},
			result: runtime.Failure, timedOut: true, exitCode: -1, groups: 1, minMembers: 1},
		{name: "forks-children", cmd: []string{"sh", "-c", "sleep 100 & sleep 100"},
			result: runtime.Failure, timedOut: true, exitCode: -1, groups: 1, minMembers: 2},
		{name: "fills-stdout", cmd: []string{"yes"},
			result: runtime.Failure, timedOut: true, exitCode: -1, groups: 1, minMembers: 1},
		{name: "exit-126", cmd: []string{"sh", "-c", notExecutable},
			result: runtime.Failure, exitCode: 126, groups: 1, minMembers: 0},
		{name: "exit-127", cmd: []string{"sh", "-c", "probed-faults-no-such-command"},
			result: runtime.Failure, exitCode: 127, groups: 1, minMembers: 0},
		{name: "missing-binary", cmd: []string{"/nonexistent/probed-faults-binary"},
			// Each attempt forks a child that fails to exec.
			result: runtime.Unknown, errored: true, exitCode: -1, groups: runtime.MaxAttempts},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			withTries(t, func(t *testing.T) (timing []*miss) {
				w := watchProcs(t)
				begin := time.Now()
				o := r.run(t, execProbe(tc.cmd...), nil)
				end := time.Now()
				t.Logf("%v", o)

				expectVerdict(t, o, tc.result, tc.errored)
				if o.rep.Outcome.ExitCode != tc.exitCode {
					t.Errorf("exit code %d, want %d", o.rep.Outcome.ExitCode, tc.exitCode)
				}
				expectOneSlot(t, o)
				if tc.timedOut {
					timing = append(timing, timedOutProblem(o))
					if want := `command "` + strings.Join(tc.cmd, " ") + `" timed out`; o.rep.Outcome.Output != want {
						t.Errorf("output %q, want %q", o.rep.Outcome.Output, want)
					}
				} else {
					timing = append(timing, fastProblem(o, 500*time.Millisecond))
				}
				w.expectNothingLeft(t)
				w.close()

				groups := w.snapshot()
				if pgs := groupsIn(groups, begin, end); len(pgs) != len(groups) {
					t.Errorf("process groups %v seen outside the run", groups)
				}
				if len(groups) > tc.groups || tc.minMembers > 0 && len(groups) != tc.groups {
					t.Errorf("%d probe-spawned process groups, want %d", len(groups), tc.groups)
				}
				for pg, g := range groups {
					if len(g.members) < tc.minMembers {
						t.Errorf("group %d: saw %d processes %v, want at least %d", pg, len(g.members), g.members, tc.minMembers)
					}
					// Seen from the first to the last sample: the tree
					// lived at most its timeout.
					var span time.Duration
					if !g.last.IsZero() {
						span = g.last.Sub(g.first)
					}
					timing = append(timing, missed(span-timeout-slack, "process group %d lived %v, want it killed at the %v timeout", pg, span.Round(time.Millisecond), timeout))
					t.Logf("group %d: %d processes, seen alive for %v", pg, len(g.members), span.Round(time.Millisecond))
				}
				return timing
			})
		})
	}
}
