package limits

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

func pod(uid, annotation string, containers ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: uid, UID: types.UID(uid)}}
	if annotation != "" {
		p.Annotations = map[string]string{customprobe.Annotation: annotation}
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c})
	}
	return p
}

func newRoom(maxRate float64) (*Admission, *record.FakeRecorder) {
	return newSharedRoom(maxRate, 0)
}

// newSharedRoom is an Admission whose namespaces may each hold at most share of
// the budget.
func newSharedRoom(maxRate, share float64) (*Admission, *record.FakeRecorder) {
	rec := record.NewFakeRecorder(100)
	return New(Options{MaxRate: maxRate, MaxRateFlag: "--max-probe-rate", NamespaceShare: share, NamespaceShareFlag: "--namespace-probe-rate-share",
		Recorder: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), rec
}

// inNamespace is pod uid of namespace ns.
func inNamespace(ns, uid string) *v1.Pod {
	p := pod(uid, "")
	p.Namespace = ns
	return p
}

// view is the pod's probes as cluster mode works them out with the
// per-pod limits lim (podprobes.Of where the pod comes in).
func view(p *v1.Pod, lim customprobe.Limits) *podprobes.View {
	return podprobes.Of(p, podprobes.Policy{Annotation: customprobe.Options{Limits: lim},
		Transforms: []podprobes.Transform{podprobes.LeaveSpecToKubelet}})
}

func events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func periods(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// The node's budget of annotation probe runs per second. Pods
// are admitted in the order they come while they fit; one that does not
// fit runs none of its probes, gets one Warning Event however often it is
// asked about (the periodic pod sync asks every minute), and the gate's
// condition says why; when an admitted pod leaves, the refused one fits at
// its next AddPod and is told so.
func TestBudgetAdmitsInOrderAndRefusesWhatDoesNotFit(t *testing.T) {
	r, rec := newRoom(100)
	a, b := pod("a", ""), pod("b", "")
	if !r.Admit(a, periods(100*time.Millisecond, 6)) { // 60 runs/s
		t.Fatal("a (60/s of 100/s) refused")
	}
	for i := 0; i < 3; i++ {
		if r.Admit(b, periods(time.Second, 50)) { // 50 runs/s: 110 > 100
			t.Fatal("b admitted past the budget")
		}
	}
	evs := events(rec)
	if len(evs) != 1 || !strings.Contains(evs[0], "Warning ProbeBudgetExceeded") || !strings.Contains(evs[0], "ask for 50 runs/s") ||
		!strings.Contains(evs[0], "--max-probe-rate 100/s") || !strings.Contains(evs[0], "has 40/s left") {
		t.Fatalf("events %q, want one ProbeBudgetExceeded saying 50 asked, 40 left", evs)
	}
	reason, msg, refused := r.Refusal(b, view(b, customprobe.Limits{}))
	if !refused || reason != ReasonProbeBudgetExceeded || !strings.Contains(msg, "none of them run") {
		t.Fatalf("Refusal(b) = %q %q %v", reason, msg, refused)
	}
	if _, _, refused := r.Refusal(a, view(a, customprobe.Limits{})); refused {
		t.Fatal("the admitted pod is refused")
	}
	if used, budget := r.Used(); used != 60 || budget != 100 {
		t.Fatalf("Used = %v of %v, want 60 of 100", used, budget)
	}

	r.PodRemoved(&pods.Pod{Pod: a})
	if !r.Admit(b, periods(time.Second, 50)) {
		t.Fatal("b refused after a left")
	}
	if evs := events(rec); len(evs) != 1 || !strings.Contains(evs[0], "Normal ProbesAdmitted") {
		t.Fatalf("events %q, want one ProbesAdmitted", evs)
	}
	if _, _, refused := r.Refusal(b, view(b, customprobe.Limits{})); refused {
		t.Fatal("b still refused once admitted")
	}
	// Admitting it again (every AddPod) changes nothing.
	if !r.Admit(b, periods(time.Second, 50)) || len(events(rec)) != 0 {
		t.Fatal("a second Admit of an admitted pod refused it or made an event")
	}
	if used, _ := r.Used(); used != 50 {
		t.Fatalf("Used = %v, want 50", used)
	}
}

// A pod whose probes change (the reconciler adds it anew) keeps its place
// and is charged its new rate; over the budget it loses it.
func TestBudgetChargesAChangedPodItsNewRate(t *testing.T) {
	r, _ := newRoom(10)
	p := pod("p", "")
	if !r.Admit(p, periods(time.Second, 8)) {
		t.Fatal("refused")
	}
	if !r.Admit(p, periods(time.Second, 10)) {
		t.Fatal("a pod within the budget on its own refused after a change")
	}
	if r.Admit(p, periods(time.Second, 11)) {
		t.Fatal("admitted at 11 runs/s of 10")
	}
	if used, _ := r.Used(); used != 0 {
		t.Fatalf("Used = %v after the refusal, want 0", used)
	}
}

// The budget by fair share (the review's case, scaled: one tenant's pods
// took 99 of 100 runs/s and a later pod of another namespace was refused
// for good). A namespace alone takes at most its share (--namespace-probe-
// rate-share) and its next pod is refused saying the namespace is over its
// share; another namespace's pods are admitted from the room the cap left;
// once both ask, each holds at most its fair share, and the runs a pod
// frees go to the pod waiting within its share (a third namespace's), not
// to the namespaces over theirs. Nothing running is taken back.
func TestBudgetShareRefusesOnlyTheNamespaceOverItsShare(t *testing.T) {
	r, rec := newSharedRoom(100, 0.5)
	hungry := make([]*v1.Pod, 6)
	for i := range hungry {
		hungry[i] = inNamespace("hungry", fmt.Sprintf("hungry-%d", i))
		want := i < 5 // 5 × 10 runs/s: the namespace's cap of 50
		if got := r.Admit(hungry[i], periods(100*time.Millisecond, 1)); got != want {
			t.Fatalf("hungry-%d (10 runs/s, the namespace holding %d): admitted %v, want %v", i, 10*i, got, want)
		}
	}
	evs := events(rec)
	if len(evs) != 1 || !strings.Contains(evs[0], "Warning ProbeBudgetExceeded") || !strings.Contains(evs[0], "namespace hungry holds 50 runs/s") ||
		!strings.Contains(evs[0], "over its fair share") || !strings.Contains(evs[0], "--namespace-probe-rate-share 0.5") {
		t.Fatalf("events %q, want one saying hungry is over its share", evs)
	}
	reason, msg, refused := r.Refusal(hungry[5], nil)
	if !refused || reason != ReasonProbeBudgetExceeded || !strings.Contains(msg, "over its fair share") {
		t.Fatalf("Refusal(hungry-5) = %q %q %v", reason, msg, refused)
	}

	// Another namespace: admitted up to its own share, from the room left.
	victims := []*v1.Pod{inNamespace("victims", "v-0"), inNamespace("victims", "v-1"), inNamespace("victims", "v-2")}
	if !r.Admit(victims[0], periods(time.Second, 30)) || !r.Admit(victims[1], periods(time.Second, 20)) {
		t.Fatal("victims' pods refused within their namespace's share")
	}
	for _, p := range append(hungry[:5:5], victims[:2]...) {
		if _, _, refused := r.Refusal(p, nil); refused {
			t.Fatalf("%s admitted and refused", p.Name)
		}
	}
	if r.Admit(victims[2], periods(time.Second, 10)) {
		t.Fatal("victims took more than their share")
	}
	// A third namespace finds the node full: it waits in line within its
	// share, and is told the node is full (not that it is over a share).
	late := inNamespace("late", "late-0")
	if r.Admit(late, periods(time.Second, 10)) {
		t.Fatal("late admitted with nothing free")
	}
	evs = events(rec)
	if len(evs) != 2 || !strings.Contains(evs[0], "namespace victims holds 50 runs/s") || !strings.Contains(evs[1], "has 0/s left") ||
		strings.Contains(evs[1], "over its fair share") {
		t.Fatalf("events %q, want victims over their share and late told the node is full", evs)
	}
	// hungry-0 leaves: its 10 runs go to late (within its share), not to
	// hungry-5 or v-2, which wait longer but are over their shares (three
	// namespaces ask: 45 each at most beside late's 10).
	r.PodRemoved(&pods.Pod{Pod: hungry[0]})
	if r.Admit(hungry[5], periods(100*time.Millisecond, 1)) || r.Admit(victims[2], periods(time.Second, 10)) {
		t.Fatal("a namespace over its share was given the freed runs")
	}
	if !r.Admit(late, periods(time.Second, 10)) {
		t.Fatal("late not admitted once runs freed within its share")
	}
	if evs := events(rec); len(evs) != 1 || !strings.Contains(evs[0], "Normal ProbesAdmitted") {
		t.Fatalf("events %q, want late's ProbesAdmitted only", evs)
	}
	if used, _ := r.Used(); used != 100 {
		t.Fatalf("Used = %v, want 100 (hungry 40, victims 50, late 10)", used)
	}
	// Nothing running was taken back: every admitted pod still is, asked
	// again as the periodic pod sync does.
	for _, p := range hungry[1:5] {
		if !r.Admit(p, periods(100*time.Millisecond, 1)) {
			t.Fatalf("%s no longer admitted", p.Name)
		}
	}
	if !r.Admit(victims[0], periods(time.Second, 30)) || !r.Admit(victims[1], periods(time.Second, 20)) || !r.Admit(late, periods(time.Second, 10)) {
		t.Fatal("an admitted pod was refused when asked again")
	}
	if evs := events(rec); len(evs) != 0 {
		t.Fatalf("events %q asking admitted pods again", evs)
	}
}

// A pod that asks more than one namespace may ever hold is refused for
// good, saying so once; a removed pod waiting in line leaves it (its
// namespace's demand no longer counts).
func TestBudgetShareTooLargeAndLeavingTheLine(t *testing.T) {
	r, rec := newSharedRoom(100, 0.25)
	big := inNamespace("a", "big")
	for range 3 {
		if r.Admit(big, periods(time.Second, 30)) {
			t.Fatal("30 runs/s admitted with a namespace share of 25")
		}
	}
	evs := events(rec)
	if len(evs) != 1 || !strings.Contains(evs[0], "more than one namespace may hold") || !strings.Contains(evs[0], "--namespace-probe-rate-share 0.25 of it, 25 runs/s") {
		t.Fatalf("events %q", evs)
	}
	// Four namespaces fill the node; a fifth waits, then leaves the line.
	for i := range 4 {
		if !r.Admit(inNamespace(fmt.Sprintf("n%d", i), "p"+strconv.Itoa(i)), periods(time.Second, 25)) {
			t.Fatalf("n%d refused within its share", i)
		}
	}
	waiting := inNamespace("n4", "w")
	if r.Admit(waiting, periods(time.Second, 5)) {
		t.Fatal("admitted with nothing free")
	}
	if r.shares.Waiting("n4") != 5000 {
		t.Fatalf("n4 waits for %d units, want 5000", r.shares.Waiting("n4"))
	}
	r.PodRemoved(&pods.Pod{Pod: waiting})
	if r.shares.Waiting("n4") != 0 {
		t.Fatal("a removed pod still waits in line")
	}
	if _, refused := r.BudgetRefusal(waiting.UID); refused {
		t.Fatal("a removed pod still refused")
	}
}

// Without a budget, or without probes, every pod is admitted.
func TestNoBudgetAdmitsAll(t *testing.T) {
	r, rec := newRoom(0)
	if !r.Admit(pod("p", ""), periods(100*time.Millisecond, 1000)) {
		t.Fatal("refused without a budget")
	}
	r, _ = newRoom(1)
	if !r.Admit(pod("q", ""), nil) {
		t.Fatal("a pod without probes refused")
	}
	if len(events(rec)) != 0 {
		t.Fatal("events without refusals")
	}
}

// A refused element that is (or may be) a readiness or startup
// probe makes the gate's condition False with the first error; a refused
// liveness probe does not (the condition follows readiness and startup);
// an annotation over --max-probes-per-pod is refused whole, and says so.
func TestRefusalOfInvalidElements(t *testing.T) {
	lim := customprobe.Limits{MaxProbes: 2, MaxProbesFlag: "--max-probes-per-pod", MinPeriod: time.Second, MinPeriodFlag: "--min-probe-period"}
	r, _ := newRoom(0)
	cases := []struct {
		name, annotation string
		refused          bool
		want             []string
	}{
		{"readiness under the shortest period",
			`[{"container":"app","type":"readiness","periodSeconds":1,"periodMilliseconds":-500,"tcpSocket":{"port":80}}]`,
			true, []string{"[0].periodMilliseconds", "--min-probe-period", "readiness cannot be checked"}},
		{"liveness only", `[{"container":"app","type":"liveness","tcpSoket":{"port":80}},{"container":"app","type":"readiness","tcpSocket":{"port":80}}]`,
			false, nil},
		{"unknown type", `[{"container":"app","type":"readyness","tcpSocket":{"port":80}}]`, true, []string{"[0].type"}},
		{"not a list", `{"container":"app"}`, true, []string{"must be a JSON list"}},
		{"too many", `[{"container":"app","type":"readiness","tcpSocket":{"port":80}},{"container":"app","type":"liveness","tcpSocket":{"port":80}},{"container":"app","type":"startup","tcpSocket":{"port":80}}]`,
			true, []string{"Too many: 3", "at most 2", "--max-probes-per-pod"}},
		{"two errors", `[{"container":"nope","type":"readiness","tcpSocket":{"port":80}},{"container":"app","type":"startup","tcpSocket":{"port":0}}]`,
			true, []string{`no container "nope"`, "and 1 more errors"}},
		{"valid", `[{"container":"app","type":"readiness","tcpSocket":{"port":80}}]`, false, nil},
	}
	for _, c := range cases {
		p := pod("p", c.annotation, "app")
		reason, msg, refused := r.Refusal(p, view(p, lim))
		if refused != c.refused {
			t.Errorf("%s: refused = %v (%q), want %v", c.name, refused, msg, c.refused)
			continue
		}
		if refused && reason != ReasonInvalidProbeAnnotation {
			t.Errorf("%s: reason %q", c.name, reason)
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: message %q lacks %q", c.name, msg, w)
			}
		}
		if len(msg) > MaxMessage+len("; the pod's readiness cannot be checked") {
			t.Errorf("%s: message of %d bytes", c.name, len(msg))
		}
	}
}

// A message is cut to MaxMessage bytes on a rune boundary.
func TestRefusalMessageIsBounded(t *testing.T) {
	r, _ := newRoom(0)
	name := strings.Repeat("é", 400)
	p := pod("p", `[{"container":"`+name+`","type":"readiness","tcpSocket":{"port":80}}]`, "app")
	_, msg, refused := r.Refusal(p, view(p, customprobe.Limits{}))
	if !refused || len(msg) > MaxMessage+len("; the pod's readiness cannot be checked") || !strings.Contains(msg, "…") {
		t.Fatalf("refused %v, message of %d bytes: %q", refused, len(msg), msg)
	}
	if !strings.HasPrefix(strings.TrimSuffix(msg, "; the pod's readiness cannot be checked"), customprobe.Annotation) {
		t.Fatalf("message %q", msg)
	}
}

// PodAdded reports every error of the annotation in one Event naming the
// fields; a valid annotation makes none.
func TestPodAddedReportsTheFields(t *testing.T) {
	r, rec := newRoom(0)
	p := pod("p", `[{"container":"app","type":"readiness","tcpSocket":{"prot":80}},{"container":"app","type":"liveness","tcpSocket":{"port":80}}]`, "app")
	r.PodAdded(&pods.Pod{Pod: p, Probes: view(p, customprobe.Limits{})})
	evs := events(rec)
	if len(evs) != 1 || !strings.Contains(evs[0], "Warning InvalidProbeAnnotation") || !strings.Contains(evs[0], `[0].tcpSocket`) ||
		!strings.Contains(evs[0], "its other probes run") {
		t.Fatalf("events %q", evs)
	}
	q := pod("q", `[{"container":"app","type":"liveness","tcpSocket":{"port":80}}]`, "app")
	r.PodAdded(&pods.Pod{Pod: q, Probes: view(q, customprobe.Limits{})})
	if evs := events(rec); len(evs) != 0 {
		t.Fatalf("events %q for a valid annotation", evs)
	}
}
