package actuate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/runtime"
)

// testTexts are a restart-like action's.
var testTexts = actuate.Texts{
	Acting:       "the container is to be restarted (--liveness-action=test)",
	Not:          "the container is not restarted",
	Work:         "restart",
	FailedReason: "RestartFailed",
	Failed:       "Could not restart the container",
}

// env is a Queue on a fake clock, run until the test ends, with its
// Events and log lines kept.
type env struct {
	q      *actuate.Queue
	clock  *testingclock.FakeClock
	events *events.Recorder
	log    *lines
}

func newEnv(t *testing.T, step actuate.Step, mutate func(*actuate.Options)) *env {
	t.Helper()
	e := &env{clock: testingclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
		events: events.New(1000, slog.New(slog.DiscardHandler), nil), log: &lines{}}
	opts := actuate.Options{Step: step, Texts: testTexts, Recorder: e.events, Clock: e.clock, Logger: slog.New(e.log)}
	if mutate != nil {
		mutate(&opts)
	}
	q, err := actuate.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.q = q
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = q.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

func failure(ns, pod, id string) actuate.Failure {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod, UID: types.UID(ns + "/" + pod)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	return actuate.Failure{Pod: p, Container: "app", ContainerID: id, Probe: runtime.Liveness}
}

// messages are the Events' "Reason: message" texts, each repeat counted.
func (e *env) messages() []string {
	var out []string
	for _, ev := range e.events.List() {
		for range ev.Count {
			out = append(out, ev.Reason+": "+ev.Message)
		}
	}
	return out
}

// eventually polls cond (the queue's goroutines run on the real clock;
// its delays, buckets and backoff on the fake one).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// lines is a slog.Handler keeping each record's message and attributes.
type lines struct {
	mu  sync.Mutex
	out []string
	// attrs of a handler made by WithAttrs share the lines of their parent.
	attrs  string
	parent *lines
}

func (l *lines) root() *lines {
	if l.parent != nil {
		return l.parent.root()
	}
	return l
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	s := r.Message + l.attrs
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	root := l.root()
	root.mu.Lock()
	defer root.mu.Unlock()
	root.out = append(root.out, s)
	return nil
}
func (l *lines) WithAttrs(as []slog.Attr) slog.Handler {
	s := l.attrs
	for _, a := range as {
		s += " " + a.String()
	}
	return &lines{attrs: s, parent: l.root()}
}
func (l *lines) WithGroup(string) slog.Handler { return l }

// count is how many lines hold s.
func (l *lines) count(s string) int {
	root := l.root()
	root.mu.Lock()
	defer root.mu.Unlock()
	n := 0
	for _, line := range root.out {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// --liveness-action=event: one Warning Event on the container per
// container instance (K2's failure of a running container), however often
// the failure is reported; a new container ID is a new instance; a
// sidecar's Event is about spec.initContainers{sidecar}.
func TestEventOncePerContainerInstance(t *testing.T) {
	e := newEnv(t, actuate.EventStep, func(o *actuate.Options) { o.Texts = actuate.EventTexts })
	always := v1.ContainerRestartPolicyAlways
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web", UID: "uid-1"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "sidecar", RestartPolicy: &always}},
			Containers:     []v1.Container{{Name: "app"}},
		},
	}
	for range 5 {
		e.q.ContainerFailed(actuate.Failure{Pod: pod, Container: "app", ContainerID: "containerd://a1", Probe: runtime.Liveness})
	}
	e.q.ContainerFailed(actuate.Failure{Pod: pod, Container: "app", ContainerID: "containerd://a2", Probe: runtime.Liveness})
	e.q.ContainerFailed(actuate.Failure{Pod: pod, Container: "sidecar", ContainerID: "containerd://s1", Probe: runtime.Startup})
	// The local ring folds the two app instances' identical events into
	// one with count 2.
	got := e.events.List()
	if len(got) != 2 {
		t.Fatalf("events = %+v, want 2", got)
	}
	for i, want := range []struct {
		reason, field, msg string
		count              int
	}{
		{actuate.ReasonLivenessProbeFailed, "spec.containers{app}", "Container app failed liveness probe; probed does not restart containers (--liveness-action=event)", 2},
		{actuate.ReasonStartupProbeFailed, "spec.initContainers{sidecar}", "Container sidecar failed startup probe; probed does not restart containers (--liveness-action=event)", 1},
	} {
		if ev := got[i]; ev.Type != v1.EventTypeWarning || ev.Reason != want.reason || ev.FieldPath != want.field || ev.Message != want.msg || ev.Count != want.count {
			t.Errorf("event %d = %+v, want %+v", i, ev, want)
		}
	}
}

// Container IDs acted on stay in an LRU of RememberInstances; an ID
// remembered is not acted on again.
func TestRememberedInstancesAreBounded(t *testing.T) {
	e := newEnv(t, actuate.EventStep, func(o *actuate.Options) {
		o.Texts = actuate.EventTexts
		o.RememberInstances = 10
	})
	for i := range 100 {
		e.q.ContainerFailed(failure("ns", "web", fmt.Sprintf("containerd://%d", i)))
	}
	if n := e.q.Remembered(); n != 10 {
		t.Fatalf("%d instances remembered, want 10", n)
	}
	e.q.ContainerFailed(failure("ns", "web", "containerd://99"))
	if n := len(e.messages()); n != 100 {
		t.Fatalf("%d events, want 100 (the repeat of a remembered instance records nothing)", n)
	}
}

// New starts the goroutine of the delays; Run with a context already ended
// stops it (goleak in TestMain).
func TestRunStopsTheQueue(t *testing.T) {
	q, err := actuate.New(actuate.Options{Step: actuate.EventStep, Recorder: events.New(10, slog.New(slog.DiscardHandler), nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestNewErrors(t *testing.T) {
	rec := events.New(10, slog.New(slog.DiscardHandler), nil)
	for name, o := range map[string]actuate.Options{
		"no step":     {Recorder: rec},
		"no recorder": {Step: actuate.EventStep},
		"share":       {Step: actuate.EventStep, Recorder: rec, NamespaceShare: 1.5},
	} {
		if _, err := actuate.New(o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// acts is a step that refuses the failures of namespace "closed" and acts
// on the others: each attempt is counted by namespace, and blocks until
// release is closed (or the queue stops), as a restart waits out the
// container's grace period.
type acts struct {
	mu      sync.Mutex
	plans   int
	running map[string]int
	most    map[string]int // the most running at once, by namespace
	done    map[string]int
	release chan struct{}
}

func newActs() *acts {
	return &acts{running: map[string]int{}, most: map[string]int{}, done: map[string]int{}, release: make(chan struct{})}
}

func (a *acts) Plan(f actuate.Failure) actuate.Plan {
	a.mu.Lock()
	a.plans++
	a.mu.Unlock()
	ns := f.Pod.Namespace
	if ns == "closed" {
		return actuate.Plan{Decision: actuate.Decision{Do: actuate.Refuse, Why: "namespace closed is not selected"}}
	}
	return actuate.Plan{Decision: actuate.Decision{Do: actuate.Act}, Act: func(ctx context.Context) error {
		a.mu.Lock()
		a.running[ns]++
		a.most[ns] = max(a.most[ns], a.running[ns])
		a.mu.Unlock()
		select {
		case <-a.release:
		case <-ctx.Done():
		}
		a.mu.Lock()
		a.running[ns]--
		a.done[ns]++
		a.mu.Unlock()
		return nil
	}}
}

func (a *acts) get(m map[string]int, ns string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return m[ns]
}

// The announcement is the decision: Consequence decides an instance once,
// and ContainerFailed then does what it said — a refused failure's Event
// says the same words and nothing acts; an acting one is announced as the
// action's Acting text and acts.
func TestAnnouncementIsTheDecision(t *testing.T) {
	a := newActs()
	close(a.release)
	e := newEnv(t, a, nil)
	refused, acting := failure("closed", "db", "containerd://c1"), failure("open", "web", "containerd://o1")
	said := e.q.Consequence(refused)
	if said != "the container is not restarted: namespace closed is not selected" {
		t.Fatalf("announced %q", said)
	}
	e.q.ContainerFailed(refused)
	if got := e.messages(); len(got) != 1 || got[0] != "LivenessProbeFailed: Container app failed liveness probe; "+said {
		t.Fatalf("events %q", got)
	}
	if said := e.q.Consequence(acting); said != testTexts.Acting {
		t.Fatalf("announced %q", said)
	}
	e.q.ContainerFailed(acting)
	eventually(t, "the restart", func() bool { return a.get(a.done, "open") == 1 })
	if a.plans != 2 {
		t.Fatalf("%d plans, want one per instance", a.plans)
	}
	if a.get(a.done, "closed") != 0 {
		t.Fatal("the refused failure acted")
	}
}

// Finding: 15 failures of pods in a namespace the scope refuses each took
// a token of the node's bucket before the namespace was checked, and a
// selected namespace's restart waited 121.5 s for one. Refusals are
// decided before anything is queued: the 16th failure, in a selected
// namespace, acts with the fake clock never stepped (the bucket holds 3).
func TestRefusalTakesNoToken(t *testing.T) {
	a := newActs()
	close(a.release)
	e := newEnv(t, a, nil)
	for i := range 15 {
		e.q.ContainerFailed(failure("closed", fmt.Sprintf("hostile-%d", i), fmt.Sprintf("containerd://h%d", i)))
	}
	e.q.ContainerFailed(failure("open", "victim", "containerd://v1"))
	eventually(t, "the victim's restart", func() bool { return a.get(a.done, "open") == 1 })
	if n := len(e.messages()); n != 15 {
		t.Fatalf("%d events, want the 15 refusals", n)
	}
	if n := e.log.count("waits for the node's bucket"); n != 0 {
		t.Fatalf("%d waits for the bucket", n)
	}
}

// Finding: 9 containers with an hour-long grace period held all 8 restart
// workers, and another namespace's restart waited. A namespace holds at
// most a quarter of the workers (2 of 8): the hostile namespace's restarts
// run two at a time, and the victim's starts at once beside them.
func TestNamespaceHoldsAtMostItsShareOfTheWorkers(t *testing.T) {
	a := newActs()
	e := newEnv(t, a, func(o *actuate.Options) { o.Workers = 8; o.Burst = 100 })
	for i := range 9 {
		e.q.ContainerFailed(failure("hostile", fmt.Sprintf("slow-%d", i), fmt.Sprintf("containerd://h%d", i)))
	}
	eventually(t, "two hostile restarts running", func() bool { return a.get(a.running, "hostile") == 2 })
	e.q.ContainerFailed(failure("victim", "web", "containerd://v1"))
	eventually(t, "the victim's restart running", func() bool { return a.get(a.running, "victim") == 1 })
	if n := e.q.WorkersOf("hostile"); n != 2 {
		t.Fatalf("the hostile namespace holds %d workers, want 2", n)
	}
	close(a.release)
	eventually(t, "every restart done", func() bool { return a.get(a.done, "hostile") == 9 && a.get(a.done, "victim") == 1 })
	if most := a.get(a.most, "hostile"); most != 2 {
		t.Fatalf("the hostile namespace ran %d restarts at once, want 2", most)
	}
}

// The node's bucket paces attempts, not decisions: 3 at once, the 4th
// after one Interval of the fake clock; a token is taken once the worker
// is had.
func TestNodeBucketPacesAttempts(t *testing.T) {
	a := newActs()
	close(a.release)
	e := newEnv(t, a, func(o *actuate.Options) { o.Workers = 8; o.NamespaceShare = 1 })
	for i := range 4 {
		e.q.ContainerFailed(failure("open", fmt.Sprintf("web-%d", i), fmt.Sprintf("containerd://w%d", i)))
	}
	eventually(t, "3 restarts and one waiting", func() bool {
		return a.get(a.done, "open") == 3 && e.log.count("waits for the node's bucket") == 1
	})
	e.clock.Step(actuate.DefaultInterval)
	eventually(t, "the 4th restart", func() bool { return a.get(a.done, "open") == 4 })
}

// A guard's Hold (a storm guard's window): the failure is announced and
// recorded as not acted on yet, decided again after After, and acts once
// the guard lets it.
func TestHoldIsDecidedAgain(t *testing.T) {
	a := newActs()
	close(a.release)
	var mu sync.Mutex
	holding := true
	guard := actuate.StepFunc(func(f actuate.Failure) actuate.Plan {
		mu.Lock()
		defer mu.Unlock()
		if holding {
			return actuate.Plan{Decision: actuate.Decision{Do: actuate.Hold, Why: "3 of 3 restarts in 10m0s", After: time.Minute}}
		}
		return a.Plan(f)
	})
	e := newEnv(t, guard, nil)
	f := failure("open", "web", "containerd://w1")
	if said := e.q.Consequence(f); said != "the container is not restarted yet: 3 of 3 restarts in 10m0s" {
		t.Fatalf("announced %q", said)
	}
	e.q.ContainerFailed(f)
	eventually(t, "the hold logged", func() bool { return e.log.count("held back") == 1 })
	if got := e.messages(); len(got) != 1 || got[0] != "LivenessProbeFailed: Container app failed liveness probe; the container is not restarted yet: 3 of 3 restarts in 10m0s" {
		t.Fatalf("events %q", got)
	}
	e.clock.Step(time.Minute)
	eventually(t, "held again", func() bool { return e.log.count("held back") == 2 })
	if n := len(e.messages()); n != 1 {
		t.Fatalf("%d events: a hold is said once", n)
	}
	mu.Lock()
	holding = false
	mu.Unlock()
	e.clock.Step(time.Minute)
	eventually(t, "the restart", func() bool { return a.get(a.done, "open") == 1 })
}

// What an attempt's error says: Wait is no attempt and waits at least its
// time; Refused records the refusal and ends; any other error is tried
// MaxAttempts times, then the action's Warning Event.
func TestAttemptErrors(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	step := actuate.StepFunc(func(f actuate.Failure) actuate.Plan {
		pod := f.Pod.Name
		return actuate.Plan{Decision: actuate.Decision{Do: actuate.Act}, Act: func(context.Context) error {
			mu.Lock()
			calls[pod]++
			n := calls[pod]
			mu.Unlock()
			switch {
			case pod == "budget" && n == 1:
				return actuate.Wait(errors.New("429"), 10*time.Second, "refused by a budget")
			case pod == "budget":
				return actuate.Refused("the namespace lost its label")
			}
			return errors.New("runtime down")
		}}
	})
	count := func(pod string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[pod]
	}
	e := newEnv(t, step, func(o *actuate.Options) { o.Burst = 100 })
	e.q.ContainerFailed(failure("ns", "budget", "containerd://b"))
	eventually(t, "the wait logged", func() bool { return e.log.count("refused by a budget, will retry") == 1 })
	if e.log.count("in=10s") != 1 {
		t.Fatal("the wait is not the larger of the backoff (5 s) and its own 10 s")
	}
	e.clock.Step(9 * time.Second)
	e.clock.Step(999 * time.Millisecond)
	time.Sleep(20 * time.Millisecond) // nothing is due yet
	if n := count("budget"); n != 1 {
		t.Fatalf("%d attempts before the wait passed", n)
	}
	e.clock.Step(time.Millisecond)
	eventually(t, "the refusal", func() bool { return len(e.messages()) == 1 })
	if got := e.messages()[0]; got != "LivenessProbeFailed: Container app failed liveness probe; the container is not restarted: the namespace lost its label" {
		t.Fatalf("event %q", got)
	}

	e.q.ContainerFailed(failure("ns", "down", "containerd://d"))
	for i := 1; i < actuate.DefaultMaxAttempts; i++ {
		eventually(t, fmt.Sprintf("failure %d logged", i), func() bool { return e.log.count("restart failed, will retry") == i })
		e.clock.Step(actuate.DefaultRetryMax)
	}
	eventually(t, "the RestartFailed event", func() bool { return len(e.messages()) == 2 })
	if got := e.messages()[1]; got != "RestartFailed: Could not restart the container after 5 attempts: runtime down" {
		t.Fatalf("event %q", got)
	}
	if n := count("down"); n != actuate.DefaultMaxAttempts {
		t.Fatalf("%d attempts", n)
	}
}
