package actuate_test

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/actuate"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// TestNodeBucket: a bucket of 3 refilled every 10 s (eviction's and
// restart's defaults) lets 3 requests go at once, then one per 10 s: the
// n-th reservation waits (n-3)·10 s, counted on a fake clock, and tokens
// come back with time.
func TestNodeBucket(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	n := actuate.NewNodeBucket[int](10*time.Second, 3, clk)
	for i := range 8 {
		want := time.Duration(max(0, i+1-3)) * 10 * time.Second
		if got := n.When(i); got != want {
			t.Fatalf("reservation %d waits %v, want %v", i+1, got, want)
		}
	}
	// 8 reserved by now+50 s; at now+60 s the bucket is empty, one token
	// comes back every 10 s.
	clk.Step(60 * time.Second)
	if got := n.When(0); got != 0 {
		t.Fatalf("after 60 s the next reservation waits %v, want 0", got)
	}
	if got := n.When(0); got != 10*time.Second {
		t.Fatalf("then %v, want 10 s", got)
	}
}

// TestInstances: an instance is first once; the remembered ones are
// bounded, least recently seen out first; without a container ID the pod
// UID and container name are the instance.
func TestInstances(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-1"}}
	s := actuate.NewInstances(10)
	f := func(id string) actuate.Failure { return actuate.Failure{Pod: pod, Container: "app", ContainerID: id} }
	if !s.First(f("containerd://a")) || s.First(f("containerd://a")) {
		t.Fatal("an instance is not first exactly once")
	}
	if !s.First(f("")) || s.First(f("")) || !s.First(actuate.Failure{Pod: pod, Container: "sidecar"}) {
		t.Fatal("without an ID the pod UID and container are not the instance")
	}
	for i := range 10 {
		s.First(f(fmt.Sprintf("containerd://%d", i)))
	}
	if !s.First(f("containerd://a")) {
		t.Fatal("the oldest instance is still remembered past the bound")
	}
	if s.First(f("containerd://9")) {
		t.Fatal("a recent instance was forgotten")
	}
}
