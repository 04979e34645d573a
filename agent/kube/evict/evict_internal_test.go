package evict

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/runtime"
)

// TestNodeRateBound: the node's bucket lets EvictionBurst (3) evictions go
// at once, then one per EvictionInterval (10 s): the n-th reservation
// waits (n-3)·10 s, counted on a fake clock, and tokens come back with
// time.
func TestNodeRateBound(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	n := newNodeLimiter(DefaultEvictionInterval, DefaultEvictionBurst, clk)
	for i := range 8 {
		want := time.Duration(max(0, i+1-3)) * 10 * time.Second
		if got := n.When(nil); got != want {
			t.Fatalf("reservation %d waits %v, want %v", i+1, got, want)
		}
	}
	// 8 reserved by now+50 s; at now+60 s the bucket is empty, one token
	// comes back every 10 s.
	clk.Step(60 * time.Second)
	if got := n.When(nil); got != 0 {
		t.Fatalf("after 60 s the next reservation waits %v, want 0", got)
	}
	if got := n.When(nil); got != 10*time.Second {
		t.Fatalf("then %v, want 10 s", got)
	}
}

// TestRememberedInstancesAreBounded: container IDs acted on stay in an LRU
// of RememberInstances; an ID remembered is not acted on again.
func TestRememberedInstancesAreBounded(t *testing.T) {
	rec := events.New(1000, slog.New(slog.DiscardHandler), nil)
	a, err := New(Options{Recorder: rec, RememberInstances: 10, Log: slog.New(slog.DiscardHandler)})
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
