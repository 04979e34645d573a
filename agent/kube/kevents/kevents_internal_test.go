package kevents

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"
)

// newOffline returns a Recorder whose client is never contacted (Run is not
// called); the broadcaster New started is shut down with the test.
func newOffline(t *testing.T, opts Options) *Recorder {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	opts.Client, opts.NodeName = c, "node-a"
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	t.Cleanup(func() { _ = r.Run(ctx) })
	return r
}

// TestPerObjectBucket: as tools/record's spam filter, an object may send a
// burst of 25 events, then one per 5 minutes; other objects have their own
// bucket (counted on a fake clock).
func TestPerObjectBucket(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	r := newOffline(t, Options{Clock: clk})
	for i := range 25 {
		if !r.admit("ns/web/uid-1") {
			t.Fatalf("event %d of the burst refused", i+1)
		}
	}
	if r.admit("ns/web/uid-1") {
		t.Fatal("26th event admitted: the object's bucket is not bounded")
	}
	if !r.admit("ns/api/uid-2") {
		t.Fatal("another object's first event refused")
	}
	clk.SetTime(clk.Now().Add(5*time.Minute - time.Second))
	if r.admit("ns/web/uid-1") {
		t.Fatal("a token came back before 5 minutes")
	}
	clk.SetTime(clk.Now().Add(time.Second))
	if !r.admit("ns/web/uid-1") {
		t.Fatal("no token after 5 minutes")
	}
	if r.admit("ns/web/uid-1") {
		t.Fatal("two tokens after 5 minutes")
	}
}

// TestNodeBucket: all objects together may send 50 events at once, then 2
// per second.
func TestNodeBucket(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	r := newOffline(t, Options{Clock: clk})
	for i := range 50 {
		if !r.admit(fmt.Sprintf("ns/pod-%d/uid", i)) {
			t.Fatalf("event %d of the node's burst refused", i+1)
		}
	}
	if r.admit("ns/pod-50/uid") {
		t.Fatal("51st event admitted: the node's bucket is not bounded")
	}
	clk.SetTime(clk.Now().Add(500 * time.Millisecond))
	if !r.admit("ns/pod-51/uid") {
		t.Fatal("no node token after 500 ms (2 per second)")
	}
	if r.admit("ns/pod-52/uid") {
		t.Fatal("two node tokens after 500 ms")
	}
}

// TestPerObjectBucketsAreBounded: the buckets live in an LRU of MaxObjects.
func TestPerObjectBucketsAreBounded(t *testing.T) {
	r := newOffline(t, Options{MaxObjects: 10, QPS: 1000, Burst: 1000})
	for i := range 100 {
		r.admit(fmt.Sprintf("ns/pod-%d/uid", i))
	}
	if n := r.objects.Len(); n != 10 {
		t.Fatalf("%d buckets kept, want 10", n)
	}
}

// TestActionFor: the K4 messages start with the probe type (spec K4).
func TestActionFor(t *testing.T) {
	for _, c := range []struct{ reason, note, want string }{
		{"Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500", ActionLivenessProbe},
		{"Unhealthy", "Readiness probe errored and resulted in unknown state: boom", ActionReadinessProbe},
		{"ProbeWarning", "Startup probe warning: Probe terminated redirects", ActionStartupProbe},
		{"Evicted", "Evicted the pod: container app failed liveness probe", ActionEvicting},
		{"EvictionFailed", "Could not evict the pod", ActionEvicting},
		{"LivenessProbeFailed", "Container app failed liveness probe, the pod will be evicted", ActionProbing},
	} {
		if got := ActionFor(c.reason, c.note); got != c.want {
			t.Errorf("ActionFor(%q, %q) = %q, want %q", c.reason, c.note, got, c.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Options{NodeName: "n"}); err == nil {
		t.Error("New without a client: no error")
	}
	c, _ := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if _, err := New(Options{Client: c}); err == nil {
		t.Error("New without a node name: no error")
	}
	if _, err := New(Options{Client: c, NodeName: strings.Repeat("n", 129)}); err == nil {
		t.Error("New with a 129-byte node name: no error")
	}
}

// TestAfterRunDrops: after Run's end events are dropped and counted, not
// handed to a stopped broadcaster.
func TestAfterRunDrops(t *testing.T) {
	r := newOffline(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	r.Eventf(&v1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web", UID: "u"}, v1.EventTypeWarning, "Unhealthy", "Liveness probe failed: %s", "x")
	if r.Dropped() != 1 {
		t.Fatalf("dropped = %d, want 1", r.Dropped())
	}
}

// TestRunStopsWhatNewStarted: Run with a context already ended stops the
// broadcaster New started and its own goroutines (goleak in TestMain).
func TestRunStopsWhatNewStarted(t *testing.T) {
	c, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Client: c, NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); err == nil {
		t.Fatal("a second Run: no error")
	}
}
