package nsscope_test

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/kube/nsscope"
	"github.com/probed/probed/runtime"
)

// selection is a fake nsscope.Selection: why not, by namespace; listed
// says whether the namespaces were listed; err is Allows' error.
type selection struct {
	why    map[string]string
	listed bool
	err    error
}

func (s *selection) Known(ns string) (string, bool) { return s.why[ns], s.listed }
func (s *selection) Allows(_ context.Context, ns string) (string, error) {
	return s.why[ns], s.err
}
func (s *selection) String() string { return "team=a" }

func failureIn(ns string) actuate.Failure {
	return actuate.Failure{Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}, Container: "app", ContainerID: "containerd://c1", Probe: runtime.Liveness}
}

// The scope decorates any action: a namespace it does not select refuses
// the failure when it is decided (before a worker or a token); a selected
// one acts, checking again before each attempt; while the namespaces are
// not listed the decision says what it depends on; the step's own
// decisions (an exempt pod) pass unchanged.
func TestGuardRefusesBeforeTheQueueAndChecksEachAttempt(t *testing.T) {
	acted := 0
	step := actuate.StepFunc(func(f actuate.Failure) actuate.Plan {
		if f.Pod.Namespace == "exempt" {
			return actuate.Plan{Decision: actuate.Decision{Do: actuate.Refuse, Why: "it is a DaemonSet pod"}}
		}
		return actuate.Plan{Decision: actuate.Decision{Do: actuate.Act}, Act: func(context.Context) error { acted++; return nil }}
	})
	sel := &selection{why: map[string]string{"closed": "namespace closed is not selected", "exempt": "namespace exempt is not selected"}, listed: true}
	g := nsscope.Guard(sel, step)

	if p := g.Plan(failureIn("closed")); p.Do != actuate.Refuse || p.Why != "namespace closed is not selected" || p.Act != nil {
		t.Fatalf("closed: %+v", p.Decision)
	}
	if p := g.Plan(failureIn("exempt")); p.Do != actuate.Refuse || p.Why != "it is a DaemonSet pod" {
		t.Fatalf("exempt: %+v (the step decides first)", p.Decision)
	}
	open := g.Plan(failureIn("open"))
	if open.Do != actuate.Act || open.Why != "" {
		t.Fatalf("open: %+v", open.Decision)
	}
	if err := open.Act(context.Background()); err != nil || acted != 1 {
		t.Fatalf("attempt: %v, %d acted", err, acted)
	}
	// The label removed since: the next attempt is refused, not made.
	sel.why["open"] = "namespace open is not selected"
	if err := open.Act(context.Background()); err == nil || acted != 1 {
		t.Fatalf("attempt after the label went: %v, %d acted", err, acted)
	}
	// The namespaces cannot be read: an error worth another attempt.
	sel.why["open"], sel.err = "", errors.New("forbidden")
	if err := open.Act(context.Background()); err == nil || err.Error() != "forbidden" || acted != 1 {
		t.Fatalf("attempt without the namespaces: %v", err)
	}

	sel.listed = false
	if p := g.Plan(failureIn("later")); p.Do != actuate.Act ||
		p.Why != "if --liveness-action-namespaces=team=a selects namespace later (the namespaces are not listed yet)" {
		t.Fatalf("not listed: %+v", p.Decision)
	}
}
