package evict

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/runtime"
)

// TestRememberedInstancesAreBounded: container IDs acted on stay in an LRU
// of RememberInstances; an ID remembered is not acted on again.
func TestRememberedInstancesAreBounded(t *testing.T) {
	rec := events.New(1000, slog.New(slog.DiscardHandler), nil)
	a, err := New(Options{Recorder: rec, Pacing: actuate.Pacing{RememberInstances: 10}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	for i := range 100 {
		a.ContainerFailed(actuate.Failure{Pod: pod, Container: "app", ContainerID: fmt.Sprintf("containerd://%d", i), Probe: runtime.Liveness})
	}
	if n := a.seen.Len(); n != 10 {
		t.Fatalf("%d instances remembered, want 10", n)
	}
	a.ContainerFailed(actuate.Failure{Pod: pod, Container: "app", ContainerID: "containerd://99", Probe: runtime.Liveness})
	total := 0
	for _, e := range rec.List() {
		total += e.Count // the ring folds identical consecutive events
	}
	if total != 100 {
		t.Fatalf("%d events, want 100 (the repeat of a remembered instance records nothing)", total)
	}
}

// TestRunStopsTheQueue: with ActionEvict New starts the work queue's
// goroutine; Run with a context already ended stops it (goleak in
// TestMain).
func TestRunStopsTheQueue(t *testing.T) {
	c, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Action: ActionEvict, Client: c, Recorder: events.New(10, slog.New(slog.DiscardHandler), nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
}
