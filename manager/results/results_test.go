package results

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RS1 (spec §8.4): Get of an unknown ID is not found; Set then Get finds it;
// Remove forgets it.
func TestRS1_CacheOperations(t *testing.T) {
	m := NewManager()
	unsetID := ContainerID{"test", "unset"}
	setID := ContainerID{"test", "set"}
	if _, found := m.Get(unsetID); found {
		t.Fatal("unset result found")
	}
	m.Set(setID, Success, &v1.Pod{})
	<-m.Updates()
	if r, found := m.Get(setID); !found || r != Success {
		t.Fatalf("Get(set) = %v, %v; want Success, true", r, found)
	}
	m.Remove(setID)
	if _, found := m.Get(setID); found {
		t.Fatal("removed result found")
	}
	select {
	case u := <-m.Updates():
		t.Fatalf("Remove sent an update: %+v (R5 says it is silent)", u)
	default:
	}
}

// RS2 (spec §8.4, R3): the first Set of an ID emits; repeating a value emits
// nothing; a change emits, carrying the pod UID.
func TestRS2_Updates(t *testing.T) {
	m := NewManager()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "pod-uid"}}
	fooID := ContainerID{"test", "foo"}
	barID := ContainerID{"test", "bar"}

	expect := func(want Update) {
		t.Helper()
		select {
		case u := <-m.Updates():
			if u != want {
				t.Fatalf("update = %+v, want %+v", u, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no update, want %+v", want)
		}
	}
	expectNone := func() {
		t.Helper()
		select {
		case u := <-m.Updates():
			t.Fatalf("unexpected update %+v", u)
		default:
		}
	}

	m.Set(fooID, Success, pod)
	expect(Update{fooID, Success, "pod-uid"})
	m.Set(barID, Failure, pod)
	expect(Update{barID, Failure, "pod-uid"})

	m.Set(fooID, Success, pod)
	m.Set(barID, Failure, pod)
	expectNone()

	m.Set(fooID, Failure, pod)
	expect(Update{fooID, Failure, "pod-uid"})
	m.Set(barID, Success, pod)
	expect(Update{barID, Success, "pod-uid"})
}

// RS3 (spec §8.4).
func TestRS3_ResultToPrometheusType(t *testing.T) {
	for r, want := range map[Result]float64{Success: 0, Failure: 1, Unknown: -1, Result(5): -1} {
		if got := r.ToPrometheusType(); got != want {
			t.Errorf("%d.ToPrometheusType() = %v, want %v", r, got, want)
		}
	}
}

// RS4 (spec §8.4, R1).
func TestRS4_ResultString(t *testing.T) {
	for r, want := range map[Result]string{Success: "Success", Failure: "Failure", Unknown: "UNKNOWN", Result(5): "UNKNOWN"} {
		if got := r.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", r, got, want)
		}
	}
	if Unknown != -1 || Success != 0 || Failure != 1 {
		t.Fatalf("values: Unknown=%d Success=%d Failure=%d, want -1 0 1", Unknown, Success, Failure)
	}
}

// R4: the updates channel holds 20 updates; the 21st Set blocks until the
// consumer reads one.
func TestR4_UpdatesChannelBlocksWhenFull(t *testing.T) {
	m := NewManager()
	if c := cap(m.Updates()); c != 20 {
		t.Fatalf("cap(Updates()) = %d, want 20", c)
	}
	pod := &v1.Pod{}
	for i := 0; i < 20; i++ {
		m.Set(ContainerID{"test", string(rune('a' + i))}, Success, pod)
	}
	done := make(chan struct{})
	go func() {
		m.Set(ContainerID{"test", "overflow"}, Success, pod)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("Set returned although the channel was full (R4: the send blocks)")
	case <-time.After(50 * time.Millisecond):
	}
	<-m.Updates()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Set still blocked after a slot was freed")
	}
}

func TestContainerID(t *testing.T) {
	id := ParseContainerID("containerd://abc")
	if id != (ContainerID{"containerd", "abc"}) {
		t.Fatalf("ParseContainerID = %+v", id)
	}
	if id.String() != "containerd://abc" || id.IsEmpty() {
		t.Fatalf("String/IsEmpty = %q/%v", id.String(), id.IsEmpty())
	}
	if q := ParseContainerID(`"docker://x"`); q != (ContainerID{"docker", "x"}) {
		t.Fatalf("quoted: %+v", q)
	}
	for _, bad := range []string{"", "abc", "a://b://c"} {
		if got := ParseContainerID(bad); !got.IsEmpty() {
			t.Errorf("ParseContainerID(%q) = %+v, want empty", bad, got)
		}
	}
}

// BenchmarkSetUnchanged is the Set of nearly every probe run: the cached
// value is already the result (R3: nothing is sent), 10k containers
// cached, from GOMAXPROCS goroutines at once as the pool's runs do.
func BenchmarkSetUnchanged(b *testing.B) {
	m := NewManager()
	const n = 10000
	ids := make([]ContainerID, n)
	for i := range ids {
		ids[i] = ContainerID{"containerd", strconv.Itoa(i)}
		m.Set(ids[i], Success, nil)
		<-m.Updates()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.Set(ids[i%n], Success, nil)
			i++
		}
	})
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the process's user + system CPU time in nanoseconds: on a
// shared machine CPU per operation means more than wall time.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
