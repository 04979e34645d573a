package cri_test

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probed/probed/agent/kube/cri"
	"github.com/probed/probed/internal/critest"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/tenant"
)

// A pod's status names a container ID; that does not make it the pod's.
// An exec probe whose status names another pod's container, or a
// 12-character prefix of its own container's ID (which the runtime would
// complete), is refused before anything runs: errored, with the reason,
// and the command never ran in either container.
func TestRunnerRefusesAContainerNotThePods(t *testing.T) {
	e := newEnv(t, "exec sleep 3600")
	other := critest.RunPodSandbox(t, e.rs)
	otherID := other.Start(t, critest.Container{Name: "app", Command: []string{"sleep", "3600"}})
	sameName := critest.RunPodSandbox(t, e.rs).Start(t, critest.Container{Name: "sidecar", Command: []string{"sleep", "3600"}})
	for _, c := range []struct{ id, why string }{
		{"containerd://" + otherID, "is not container app of pod"},       // another pod's
		{"containerd://" + e.id[:12], "is not a container's full ID"},    // a prefix of its own
		{"containerd://" + otherID[:12], "is not a container's full ID"}, // a prefix of another's
		{"containerd://" + sameName, "is not container app of pod"},      // another container
	} {
		out, err := e.probe(t, c.id, time.Second, "touch", "/tmp/ran")
		if err == nil || out.Result != runtime.Unknown || !errors.Is(err, cri.ErrNotThePods) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %+v, %v: want an errored run saying %q", c.id, out, err, c.why)
		}
	}
	for _, id := range []string{e.id, otherID, sameName} {
		if got := critest.Exec(t, e.rs, id, "sh", "-c", "test -e /tmp/ran && echo ran || echo no"); got != "no\n" {
			t.Errorf("the command ran in %s", id)
		}
	}
	if n := e.calls(cri.MethodExecSync, "OK"); n != 0 {
		t.Errorf("%v ExecSync calls for refused containers", n)
	}
	// Its own container, by its full ID, runs; resolved once.
	for range 3 {
		if out, err := e.probe(t, e.status, time.Second, "true"); err != nil || out.Result != runtime.Success {
			t.Fatalf("its own container: %+v, %v", out, err)
		}
	}
	if n := e.calls(cri.MethodContainerStatus, "OK"); n != 5 {
		t.Errorf("%v ContainerStatus calls, want 5: one per container checked, its own remembered", n)
	}
	// A run whose context names no pod is refused too.
	if _, err := e.client.Runner().RunInContainer(context.Background(), e.status, []string{"true"}, time.Second); !errors.Is(err, cri.ErrNotThePods) {
		t.Errorf("a run naming no pod: %v", err)
	}
}

// ExecSync's answer is bounded whatever the command prints: 16 exec probes
// printing 15 MB each (which took an agent from 55 to 277 MB) are each a
// Failure saying the output passed tenant.ExecOutputBytes, and the client
// allocated a small fraction of what they printed (gRPC refuses the answer
// before reading it). An output under the bound is read as before.
func TestRunnerOutputFloodIsBounded(t *testing.T) {
	e := newEnv(t, "exec sleep 3600")
	const flood = "head -c 15000000 /dev/zero"
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	var wg sync.WaitGroup
	outs := make([]runtime.Outcome, 16)
	errs := make([]error, 16)
	for i := range outs {
		wg.Go(func() { outs[i], errs[i] = e.probe(t, e.status, 10*time.Second, "sh", "-c", flood) })
	}
	wg.Wait()
	goruntime.ReadMemStats(&after)
	want := (&probeexec.OutputLimitError{Cmd: []string{"sh", "-c", flood}, Limit: tenant.ExecOutputBytes}).Error()
	for i := range outs {
		if errs[i] != nil || outs[i].Result != runtime.Failure || outs[i].Output != want {
			t.Fatalf("run %d: %+v, %v: want a Failure %q", i, outs[i].Result, errs[i], want)
		}
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("16 runs printing 15 MB each: %d KiB allocated", alloc>>10)
	if alloc > 32<<20 {
		t.Errorf("%d MiB allocated for 16 refused answers, want a few (240 MB were printed)", alloc>>20)
	}
	out, err := e.probe(t, e.status, 10*time.Second, "sh", "-c", "head -c 200000 /dev/zero")
	if err != nil || out.Result != runtime.Success || len(out.Output) != runtime.MaxOutputBytes {
		t.Fatalf("200 kB of output: %v, %v, %d bytes kept", out.Result, err, len(out.Output))
	}
}
