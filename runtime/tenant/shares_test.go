package tenant

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind;
// goroutines started at init by what the inputs test imports (the ants
// default pool) are not leaks.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

func TestMaxMinExamples(t *testing.T) {
	for _, c := range []struct {
		total   int64
		demands []int64
		want    []int64
	}{
		{1000, []int64{900, 300, 50}, []int64{650, 300, 50}},
		{1000, []int64{1000}, []int64{1000}},
		{1000, []int64{2000, 2000}, []int64{500, 500}},
		{8, []int64{15, 1}, []int64{7, 1}},
		{8, []int64{15, 15, 15}, []int64{3, 3, 2}}, // the remainder to the first
		{10, []int64{3, 3, 3}, []int64{3, 3, 3}},   // everyone met, 1 left
		{2, []int64{1, 1, 1, 1}, []int64{1, 1, 0, 0}},
		{5, []int64{-4, 10}, []int64{0, 5}},
		{0, []int64{3}, []int64{0}},
		{5, nil, []int64{}},
	} {
		if got := MaxMin(c.total, c.demands); !slices.Equal(got, c.want) {
			t.Errorf("MaxMin(%d, %v) = %v, want %v", c.total, c.demands, got, c.want)
		}
	}
}

// TestMaxMinIsMaxMinFair checks the definition on random demands: no share
// exceeds its demand, the shares use the whole total (or meet every
// demand), and a demand held back gets at least as much as any other share
// minus the one unit of an uneven split.
func TestMaxMinIsMaxMinFair(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		total := rng.Int64N(2000)
		demands := make([]int64, rng.IntN(12))
		var sum int64
		for i := range demands {
			demands[i] = rng.Int64N(600)
			sum += demands[i]
		}
		got := MaxMin(total, demands)
		var used int64
		for i, s := range got {
			if s < 0 || s > demands[i] {
				t.Fatalf("MaxMin(%d, %v) = %v: share %d of demand %d", total, demands, got, s, demands[i])
			}
			used += s
		}
		if used != min(total, sum) {
			t.Fatalf("MaxMin(%d, %v) = %v uses %d, want %d", total, demands, got, used, min(total, sum))
		}
		for i, s := range got {
			if s == demands[i] {
				continue
			}
			for j, o := range got {
				if o > s+1 {
					t.Fatalf("MaxMin(%d, %v) = %v: demand %d held back at %d while %d gets %d", total, demands, got, i, s, j, o)
				}
			}
		}
	}
}

// The restart queue's case: 8 workers, one namespace asks for 15 and takes
// them all while nobody else asks; another namespace's single restart then
// gets the next worker that frees, ahead of the first namespace's 7 that
// waited longer, because the first holds more than its fair share.
func TestSharesServeTheNamespaceUnderItsShareFirst(t *testing.T) {
	s := NewShares[string](8, 0)
	ctx := context.Background()
	for range 8 {
		if err := s.Take(ctx, "busy", 1); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	wait := func(ns string) {
		wg.Go(func() {
			if err := s.Take(ctx, ns, 1); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, ns)
			mu.Unlock()
		})
	}
	for range 7 {
		wait("busy")
	}
	waitFor(t, func() bool { return s.Waiting("busy") == 7 })
	wait("quiet")
	waitFor(t, func() bool { return s.Waiting("quiet") == 1 })
	if got := s.Share("quiet"); got != 1 {
		t.Errorf("Share(quiet) = %d, want 1 (its whole demand)", got)
	}
	if got := s.Over("busy"); got != 1 {
		t.Errorf("Over(busy) = %d, want 1 (holds 8, fair share 7 of 8 beside quiet's 1)", got)
	}
	s.Put("busy", 1)
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 1 })
	mu.Lock()
	if !slices.Equal(order, []string{"quiet"}) {
		t.Errorf("granted %v, want quiet first", order)
	}
	mu.Unlock()
	// busy gets the rest as its own and quiet's units come back.
	s.Put("quiet", 1)
	for range 7 {
		s.Put("busy", 1)
	}
	wg.Wait()
	if got := s.Held("busy"); got != 7 {
		t.Errorf("Held(busy) = %d, want 7", got)
	}
	s.Put("busy", 7)
	if got := s.Held("busy"); got != 0 {
		t.Errorf("Held(busy) = %d after every Put, want 0", got)
	}
}

// The node's run budget's case: a namespace alone may take up to its cap;
// the others then get their fair share of what is left as it frees, and
// the first namespace's further asks are refused while it is over its
// share.
func TestSharesTryTakeWithACap(t *testing.T) {
	s := NewShares[string](1000, 750)
	if ok, err := s.TryTake("a", 800); !errors.Is(err, ErrTooLarge) || ok {
		t.Fatalf("TryTake over the cap = %v, %v; want ErrTooLarge", ok, err)
	}
	for range 7 {
		if ok, err := s.TryTake("a", 100); !ok || err != nil {
			t.Fatalf("TryTake(a, 100) = %v, %v", ok, err)
		}
	}
	if ok, _ := s.TryTake("a", 100); ok {
		t.Fatal("a took 800 with a cap of 750")
	}
	if ok, _ := s.TryTake("b", 300); !ok {
		t.Fatal("b refused 300 with 300 free")
	}
	// Beside b, a's share of 1000 is 700 (b asks 300): a holds 700.
	if got := s.Over("a"); got != 0 {
		t.Errorf("Over(a) = %d, want 0", got)
	}
	if ok, _ := s.TryTake("c", 100); ok {
		t.Fatal("c took 100 with nothing free")
	}
	s.Put("b", 300)
	if ok, _ := s.TryTake("c", 300); !ok {
		t.Fatal("c refused 300 with 300 free and a fair share of 300")
	}
	// Beside c's 300, a's share is 700: it holds that much and gets no more.
	if ok, _ := s.TryTake("a", 50); ok {
		t.Fatal("a took more while at its share beside c")
	}
	if got, want := s.Share("a"), int64(700); got != want {
		t.Errorf("Share(a) = %d, want %d", got, want)
	}
	// A third namespace that asks for more than c did: while it waits for
	// 200 more, the fair shares are 500 each, so a is over its share by
	// 200, which it keeps until it puts units back (nothing is taken back).
	if ok, _ := s.TryTake("d", 100); ok {
		t.Fatal("d took 100 with nothing free")
	}
	s.Put("c", 300)
	if ok, _ := s.TryTake("d", 300); !ok {
		t.Fatal("d refused 300 with 300 free")
	}
	if got := s.Over("a"); got != 0 {
		t.Errorf("Over(a) beside d's 300 = %d, want 0", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Take(ctx, "d", 200) }()
	waitFor(t, func() bool { return s.Waiting("d") == 200 })
	if got, want := s.Over("a"), int64(200); got != want {
		t.Errorf("Over(a) while d waits for 200 more = %d, want %d", got, want)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Take = %v", err)
	}
}

// More namespaces than units: each one that holds nothing gets a unit as
// one frees, so none starves.
func TestSharesNoKeyStarves(t *testing.T) {
	s := NewShares[int](2, 0)
	ctx := context.Background()
	var wg sync.WaitGroup
	got := make(chan int, 10)
	for k := range 10 {
		wg.Go(func() {
			if err := s.Take(ctx, k, 1); err != nil {
				t.Error(err)
				return
			}
			got <- k
		})
	}
	seen := map[int]bool{}
	for range 10 {
		k := <-got
		seen[k] = true
		s.Put(k, 1)
	}
	wg.Wait()
	if len(seen) != 10 {
		t.Fatalf("granted %d namespaces, want 10", len(seen))
	}
}

func TestSharesTakeEndsWithItsContext(t *testing.T) {
	s := NewShares[string](1, 0)
	if err := s.Take(context.Background(), "a", 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Take(ctx, "b", 1) }()
	waitFor(t, func() bool { return s.Waiting("b") == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Take = %v, want context.Canceled", err)
	}
	if s.Waiting("b") != 0 || s.Held("b") != 0 {
		t.Fatalf("b holds %d and waits for %d after its Take ended", s.Held("b"), s.Waiting("b"))
	}
	s.Put("a", 1)
	if ok, _ := s.TryTake("c", 1); !ok {
		t.Fatal("the unit a put back was not free")
	}
	if _, err := s.TryTake("c", 0); err == nil {
		t.Fatal("TryTake of 0 units: no error")
	}
	if err := s.Take(context.Background(), "c", 2); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Take of more than the budget = %v, want ErrTooLarge", err)
	}
}

// The node's run budget's case without a goroutine per refused pod: an ask
// Queue cannot grant waits as a ticket. Its demand counts (the namespace
// over its share gets no more meanwhile), units that free go to it in
// order, Cancel withdraws it (or gives back what it was granted), and
// Granted tells the owner when it asks again.
func TestSharesQueueWaitsWithoutAGoroutine(t *testing.T) {
	s := NewShares[string](1000, 800)
	a, err := s.Queue("a", 800)
	if err != nil || !a.Granted() {
		t.Fatalf("Queue(a, 800) alone = %v, %v; want granted", a.Granted(), err)
	}
	if _, err := s.Queue("a", 801); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Queue over the cap = %v, want ErrTooLarge", err)
	}
	b, err := s.Queue("b", 300)
	if err != nil || b.Granted() {
		t.Fatalf("Queue(b, 300) with 200 free = %v, %v; want waiting", b.Granted(), err)
	}
	select {
	case <-b.Ready():
		t.Fatal("b ready while waiting")
	default:
	}
	if got := s.Waiting("b"); got != 300 {
		t.Fatalf("Waiting(b) = %d, want 300", got)
	}
	// b's demand counts: a's share is 700, and a small ask of a is
	// refused although units are free.
	if got := s.Over("a"); got != 100 {
		t.Errorf("Over(a) = %d, want 100 (800 held, share 700 beside b's 300)", got)
	}
	if ok, _ := s.TryTake("a", 50); ok {
		t.Fatal("a over its share took more while b waits")
	}
	c, _ := s.Queue("c", 100) // fits: c's share allows it and 200 are free
	if !c.Granted() {
		t.Fatal("c's 100 within its share and the free units: not granted")
	}
	// a puts back 200: b's 300 fit now (100 + 200 free), granted at once.
	s.Put("a", 200)
	select {
	case <-b.Ready():
	default:
		t.Fatal("b not granted when units freed")
	}
	if !b.Granted() || s.Held("b") != 300 || s.Waiting("b") != 0 {
		t.Fatalf("b granted %v, holds %d, waits %d", b.Granted(), s.Held("b"), s.Waiting("b"))
	}
	// A granted ticket's Cancel gives its units back; a second does nothing.
	b.Cancel()
	b.Cancel()
	if b.Granted() || s.Held("b") != 0 {
		t.Fatalf("after Cancel: granted %v, b holds %d", b.Granted(), s.Held("b"))
	}
	// A waiting ticket's Cancel withdraws its demand.
	d, _ := s.Queue("d", 800)
	if d.Granted() {
		t.Fatal("d granted 800 with 300 free")
	}
	d.Cancel()
	if s.Waiting("d") != 0 || s.Held("d") != 0 {
		t.Fatalf("d waits %d, holds %d after Cancel", s.Waiting("d"), s.Held("d"))
	}
	s.Put("a", 600)
	c.Cancel()
	if ok, _ := s.TryTake("e", 800); !ok {
		t.Fatal("units not free after every ticket ended")
	}
}

// Many namespaces taking and putting at once: the budget is never
// exceeded, and everything put back is free again.
func TestSharesUnderConcurrency(t *testing.T) {
	s := NewShares[int](5, 3)
	ctx := context.Background()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		inUse  int64
		peak   int64
		byKey  = map[int]int64{}
		keyCap int64
	)
	for g := range 40 {
		wg.Go(func() {
			k := g % 6
			for range 50 {
				if err := s.Take(ctx, k, 1); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inUse++
				byKey[k]++
				peak, keyCap = max(peak, inUse), max(keyCap, byKey[k])
				mu.Unlock()
				mu.Lock()
				inUse--
				byKey[k]--
				mu.Unlock()
				s.Put(k, 1)
			}
		})
	}
	wg.Wait()
	if peak > 5 || keyCap > 3 {
		t.Fatalf("peak %d units (budget 5), %d for one key (cap 3)", peak, keyCap)
	}
	if ok, _ := s.TryTake(0, 3); !ok {
		t.Fatal("units not free after every Put")
	}
}

func TestSlots(t *testing.T) {
	for _, c := range []struct {
		size  int
		share float64
		want  int
	}{{256, 0.125, 32}, {64, 0.125, 8}, {4, 0.1, 1}, {256, 0, 256}, {256, 1, 256}, {256, 2, 256}, {1024, 0.25, 256}} {
		if got := Slots(c.size, c.share); got != c.want {
			t.Errorf("Slots(%d, %v) = %d, want %d", c.size, c.share, got, c.want)
		}
	}
}

// waitFor yields until cond holds: the test's goroutines reaching a
// state (a Take enqueued), not a time.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10 s")
		}
	}
}
