package actuate_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"
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
	n := actuate.NewNodeBucket(10*time.Second, 3, clk)
	for i := range 8 {
		want := time.Duration(max(0, i+1-3)) * 10 * time.Second
		if got := n.Reserve(); got != want {
			t.Fatalf("reservation %d waits %v, want %v", i+1, got, want)
		}
	}
	// 8 reserved by now+50 s; at now+60 s the bucket is empty, one token
	// comes back every 10 s.
	clk.Step(60 * time.Second)
	if got := n.Reserve(); got != 0 {
		t.Fatalf("after 60 s the next reservation waits %v, want 0", got)
	}
	if got := n.Reserve(); got != 10*time.Second {
		t.Fatalf("then %v, want 10 s", got)
	}
}
