package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/probed/probed/runtime"
)

type countingHandler struct{ runs atomic.Int32 }

func (h *countingHandler) Prepare(*runtime.Spec) (runtime.Prober, error) { return h, nil }

func (h *countingHandler) Probe(context.Context, runtime.Target) (runtime.Outcome, error) {
	h.runs.Add(1)
	return runtime.Outcome{Result: runtime.Success}, nil
}

// A manifest's probed.io/probes annotation is checked against
// the runtime's kinds, so a kind registered in process (not by a plugin)
// loads and runs instead of being rejected as served by no plugin.
func TestAgent_AnnotationKindRegisteredInProcessLoads(t *testing.T) {
	dir := t.TempDir()
	manifest := `apiVersion: v1
kind: Pod
metadata:
  name: custom
  annotations:
    probed.io/probes: '[{"container": "app", "type": "readiness", "periodSeconds": 1, "plugin": {"name": "ping"}}]'
spec:
  containers:
  - name: app
    image: example/app
`
	if err := os.WriteFile(filepath.Join(dir, "custom.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{ManifestDir: dir, Listen: "127.0.0.1:0", Rescan: time.Second, PoolSize: 4, ExecPoolSize: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := &countingHandler{}
	if err := a.rt.Register("ping", h); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for h.runs.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the in-process handler of kind ping never ran: the pod was not loaded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a.knownProbeKind("nothing-serves-this") {
		t.Fatal("a kind nothing serves is known")
	}
}
