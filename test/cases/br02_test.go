package cases

import (
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/internal/proctest"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// proc is one process as /proc shows it.
type proc struct {
	pid, ppid, pgid int
	state           byte
}

// procs lists the processes of the machine (those that vanish while being
// read are skipped).
func procs() []proc {
	list := proctest.List()
	out := make([]proc, len(list))
	for i, p := range list {
		out[i] = proc{pid: p.PID, ppid: p.PPID, pgid: p.PGID, state: p.State}
	}
	return out
}

// treeWatcher samples the process trees spawned by exec probes of this
// test process: LocalRunner starts each command as a direct child in a
// process group of its own, and everything the command forks stays in that
// group.
type treeWatcher struct {
	self int

	mu       sync.Mutex
	groups   map[int]bool         // every probe-spawned group ever seen
	life     map[int][2]time.Time // first and last sample that saw the group alive
	maxAlive int                  // most groups alive in one sample
	samples  int
	stop     chan struct{}
	done     chan struct{}
}

func watchTrees(every time.Duration) *treeWatcher {
	w := &treeWatcher{self: os.Getpid(), groups: map[int]bool{}, life: map[int][2]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *treeWatcher) sample() {
	ps := procs()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range ps {
		if p.ppid == w.self && p.pgid == p.pid {
			w.groups[p.pid] = true
		}
	}
	alive := map[int]bool{}
	now := time.Now()
	for _, p := range ps {
		if w.groups[p.pgid] && p.state != 'Z' {
			alive[p.pgid] = true
		}
	}
	for pg := range alive {
		l, ok := w.life[pg]
		if !ok {
			l[0] = now
		}
		l[1] = now
		w.life[pg] = l
	}
	w.maxAlive = max(w.maxAlive, len(alive))
	w.samples++
}

func (w *treeWatcher) close() {
	close(w.stop)
	<-w.done
}

// leftovers returns the processes of every probe-spawned group seen so far,
// and the defunct children of this test process.
func (w *treeWatcher) leftovers() (inGroups, zombies []proc) {
	w.sample()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range procs() {
		if w.groups[p.pgid] {
			inGroups = append(inGroups, p)
		}
		if p.ppid == w.self && p.state == 'Z' {
			zombies = append(zombies, p)
		}
	}
	return inGroups, zombies
}

// killAll sends SIGKILL to every probe-spawned process group seen.
func (w *treeWatcher) killAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for pg := range w.groups {
		_ = syscall.Kill(-pg, syscall.SIGKILL)
	}
}

// awaitNoLeftovers polls leftovers for up to d and returns the last ones.
func (w *treeWatcher) awaitNoLeftovers(d time.Duration) (inGroups, zombies []proc) {
	deadline := time.Now().Add(d)
	for {
		inGroups, zombies = w.leftovers()
		if len(inGroups)+len(zombies) == 0 || time.Now().After(deadline) {
			return inGroups, zombies
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BR-02: a readiness exec probe whose command ignores SIGTERM and outlives
// its 1 s timeout. Each attempt is a Failure at ~1 s, Ready stays false, the
// whole tree (sh and its sleep) is killed, at most one tree exists at any
// time, and nothing is left (no process, no zombie) after the attempts and
// after the pod is removed.
func TestBR02_TimedOutExecTreeIsKilled(t *testing.T) {
	// A prober that runs for longer than the period: the pod's first status
	// triggers its readiness probe at once (M7c).
	e := newEnv(t, withAge(10*time.Second))
	w := watchTrees(20 * time.Millisecond)
	defer w.close()
	// Should the runner leave anything behind, do not leave it running.
	t.Cleanup(w.killAll)

	const periodicAttempts = 1 // after the two at t=0
	cmd := []string{"sh", "-c", "trap '' TERM; sleep 3600"}
	pod := newPod("br02", v1.Container{Name: "app",
		ReadinessProbe: timing(execProbe(cmd...), 0, 2, 1, 0, 0)})

	// The first attempt is triggered by the pod's first status (M7c); the
	// next ones come every 2 s.
	var took []time.Duration
	begin := time.Now()
	pod = e.add(pod)
	t0 := e.clk.Now()
	took = append(took, time.Since(begin))
	check := func(n int) {
		t.Helper()
		cs := e.container(pod.UID, "app")
		if cs.Ready {
			t.Fatalf("after attempt %d: Ready = true, want false", n)
		}
		if r, ok := e.cached(runtime.Readiness, cs.ContainerID); !ok || r != results.Failure {
			t.Fatalf("after attempt %d: readiness cached %v (found %v), want Failure", n, r, ok)
		}
	}
	check(1)
	for n := 2; n <= 1+periodicAttempts; n++ {
		begin := time.Now()
		e.advance(2*time.Second, 100*time.Millisecond)
		took = append(took, time.Since(begin))
		check(n)
	}

	// The pod's first status triggers a run (M7c); its initial Failure
	// result regenerates the status, which triggers once more (a not-ready
	// container is probed on every status generation, as upstream): two
	// back-to-back attempts at t=0, then one every 2 s (one more here: each
	// takes a second of real time).
	runs := e.runsOf("app", runtime.Readiness)
	var at []time.Duration
	for _, r := range runs {
		at = append(at, since(r.Start, t0))
	}
	if want := []time.Duration{0, 0, 2 * time.Second}; fmtDurs(at) != fmtDurs(want) {
		t.Errorf("readiness attempts at %v, want %v", fmtDurs(at), fmtDurs(want))
	}
	for i, r := range runs {
		if r.Err != nil || r.Result != runtime.Failure {
			t.Errorf("attempt %d: result %v, err %v; want Failure with no error", i+1, r.Result, r.Err)
		}
		if !strings.Contains(r.Message, "timed out") {
			t.Errorf("attempt %d: message %q, want the timeout text", i+1, r.Message)
		}
	}
	// "Failure at ~1 s": each attempt took about the timeout in real time,
	// and no tree outlived it.
	for i, d := range took {
		if min := time.Duration(len(runs)-periodicAttempts) * 900 * time.Millisecond; i == 0 && d < min || i > 0 && d < 900*time.Millisecond {
			t.Errorf("step %d took %v of real time, want ~1 s per attempt", i+1, d)
		}
	}
	w.mu.Lock()
	for pg, life := range w.life {
		// Seen from the first to the last sample: a late first sample only
		// shortens it, so this bounds how long the kill took.
		if d := life[1].Sub(life[0]); d > 2*time.Second {
			t.Errorf("process group %d lived %v, want it killed at the 1 s timeout", pg, d)
		}
	}
	w.mu.Unlock()

	// Nothing left 2 s after the last attempt and after the removal. The
	// runner reaps the command itself; a killed grandchild (the sleep) is an
	// orphan that PID 1 reaps, which may take a moment.
	if in, z := w.awaitNoLeftovers(2 * time.Second); len(in) > 0 || len(z) > 0 {
		t.Errorf("2 s after the last attempt: left %v, zombies %v", in, z)
	}
	e.remove(pod)
	if in, z := w.awaitNoLeftovers(2 * time.Second); len(in) > 0 || len(z) > 0 {
		t.Errorf("after RemovePod: left %v, zombies %v", in, z)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.groups) != len(runs) {
		t.Errorf("saw %d probe-spawned process groups, want %d (one per attempt)", len(w.groups), len(runs))
	}
	if w.maxAlive > 1 {
		t.Errorf("up to %d probe-spawned trees alive at once, want at most 1", w.maxAlive)
	}
}
