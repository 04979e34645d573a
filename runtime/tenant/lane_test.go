package tenant

import "testing"

// A pod over its share of a lane is parked, and the slot its own run frees
// goes to its parked run; another namespace's run is never parked behind
// it. (runtime's tests run the same through the pools.)
func TestLaneParksThePodOverItsShare(t *testing.T) {
	l := NewLane[string](8, 0.25, 0.5) // 2 slots a pod, 4 a namespace
	hostile := Owner{Pod: 1, Namespace: 10}
	other := Owner{Pod: 2, Namespace: 20}
	for i, want := range []bool{true, true, false, false} {
		if got := l.Acquire(hostile, []string{"h0", "h1", "h2", "h3"}[i]); got != want {
			t.Fatalf("Acquire(hostile #%d) = %v, want %v", i, got, want)
		}
	}
	if !l.Acquire(other, "o0") {
		t.Fatal("another namespace's run was parked")
	}
	if l.Parked() != 2 || l.ParkedTotal() != 2 {
		t.Fatalf("Parked %d, ParkedTotal %d, want 2 and 2", l.Parked(), l.ParkedTotal())
	}
	if next, ok := l.Release(other); ok {
		t.Fatalf("another namespace's slot went to %q", next)
	}
	for _, want := range []string{"h2", "h3"} {
		if next, ok := l.Release(hostile); !ok || next != want {
			t.Fatalf("Release(hostile) = %q, %v; want %q", next, ok, want)
		}
	}
	for range 2 {
		if next, ok := l.Release(hostile); ok {
			t.Fatalf("Release with nothing parked handed over %q", next)
		}
	}
	if l.Parked() != 0 || len(l.shard(hostile).pods) != 0 || len(l.shard(hostile).nss) != 0 {
		t.Fatal("state left after every run ended")
	}
	if NewLane[string](8, 0, 0) != nil {
		t.Fatal("a lane without shares is bounded")
	}
}
