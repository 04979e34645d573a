package pluginhost_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/pluginhost"
	"github.com/probed/probed/runtime/pluginhost/pluginhosttest"
)

// runLog records the manager's executed runs.
type runLog struct {
	mu   sync.Mutex
	runs []manager.RunRecord
}

func (l *runLog) ProbeRan(r manager.RunRecord) {
	l.mu.Lock()
	l.runs = append(l.runs, r)
	l.mu.Unlock()
}

func (l *runLog) snapshot() []manager.RunRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]manager.RunRecord(nil), l.runs...)
}

// successAfter reports whether a run that started after t succeeded.
func (l *runLog) successAfter(t time.Time) bool {
	for _, r := range l.snapshot() {
		if r.Start.After(t) && r.Err == nil && r.Result == runtime.Success {
			return true
		}
	}
	return false
}

// TestKillDuringProbingNoLivenessFailure: kill -9 of the plugin while a
// liveness probe (failureThreshold 1) is in flight in it makes that run
// errored and discarded — never a liveness failure — and the plugin serves
// again within 2 s.
func TestKillDuringProbingNoLivenessFailure(t *testing.T) {
	// Not parallel: it measures time.
	h, _ := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t")}})
	rt, err := runtime.New(runtime.Options{PoolSize: 8, ExecPoolSize: 1, Logger: newLogger(&testlog.Buffer{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Register(rt); err != nil {
		t.Fatal(err)
	}
	live := results.NewManager()
	var updates []results.Update
	var umu sync.Mutex
	drained := make(chan struct{})
	stopDrain := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case u := <-live.Updates():
				umu.Lock()
				updates = append(updates, u)
				umu.Unlock()
			case <-stopDrain:
				return
			}
		}
	}()
	runs := &runLog{}
	statuses := &pluginhosttest.Statuses{}
	mgr, err := manager.New(manager.Options{
		Status: statuses, Liveness: live, Runtime: rt, Observer: runs,
		Logger: newLogger(&testlog.Buffer{}), FirstRunSpread: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	pod, st := pluginhosttest.Pod("kill", map[string]string{customprobe.Annotation: `[{"container":"app","type":"liveness",
		"periodSeconds":1,"timeoutSeconds":2,"failureThreshold":1,
		"plugin":{"name":"test","params":{"mode":"sleep","sleep":"600ms"}}}]`})
	statuses.Set(pod.UID, st)
	mgr.AddPod(context.Background(), pod)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := mgr.Close(ctx); err != nil {
			t.Errorf("manager Close: %v", err)
		}
		close(stopDrain)
		<-drained
		_ = rt.Close(ctx)
	}()

	begin := time.Now()
	waitFor(t, 5*time.Second, "first successful liveness run", func() bool { return runs.successAfter(begin) })
	waitFor(t, 3*time.Second, "liveness probe in flight in the plugin", func() bool { return h.Status()[0].InFlight == 1 })
	old := pidOf(t, h, "t")
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	took := waitFor(t, 2*time.Second, "plugin back after kill -9", func() bool {
		s := h.Status()[0]
		return s.Running && s.PID != old
	})
	t.Logf("plugin back %s after kill -9", took)
	waitFor(t, 4*time.Second, "a successful liveness run after the restart", func() bool { return runs.successAfter(killed) })

	errored := 0
	for _, r := range runs.snapshot() {
		if r.Err != nil {
			errored++
			t.Logf("errored run (discarded): %v", r.Err)
		}
		if r.Err == nil && r.Result != runtime.Success {
			t.Errorf("run with verdict %v: %s", r.Result, r.Message)
		}
	}
	if errored == 0 {
		t.Error("the run in flight at the kill was not errored")
	}
	umu.Lock()
	defer umu.Unlock()
	for _, u := range updates {
		if u.Result == results.Failure {
			t.Errorf("liveness failure after the plugin was killed: %+v", u)
		}
	}
}
