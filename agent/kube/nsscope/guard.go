package nsscope

import (
	"context"
	"fmt"
	"time"

	"github.com/probed/probed/agent/actuate"
)

// Selection is what Guard reads of a Scope (a fake in tests).
type Selection interface {
	// Known says why an action may not act in namespace ("" when it may);
	// known is false while the namespaces have not been listed yet.
	Known(namespace string) (why string, known bool)
	// Allows waits (within ctx) until the namespaces are listed and
	// returns Known's verdict; the error says why they could not be read.
	Allows(ctx context.Context, namespace string) (why string, err error)
	// String is the selector.
	String() string
}

var _ Selection = (*Scope)(nil)

// DecideTimeout bounds the wait of one attempt for the namespaces to be
// listed.
const DecideTimeout = 30 * time.Second

// Guard puts the namespace scope around an action's step (the one
// decorator for every liveness action that acts on pods): a failure the
// step acts on in a namespace s does not select is refused when it is
// decided, before it takes a worker or a token of the node's bucket, with
// the Event saying why; each attempt checks again first (the label may
// have gone since, or the namespaces were not listed yet when the failure
// was decided), and a namespace no longer selected refuses the failure
// then. Decisions other than Act pass unchanged.
func Guard(s Selection, next actuate.Step) actuate.Step {
	return actuate.StepFunc(func(f actuate.Failure) actuate.Plan {
		p := next.Plan(f)
		if p.Do != actuate.Act {
			return p
		}
		ns := f.Pod.Namespace
		why, known := s.Known(ns)
		switch {
		case !known:
			p.Why = fmt.Sprintf("if %s=%s selects namespace %s (the namespaces are not listed yet)", Flag, s, ns)
		case why != "":
			return actuate.Plan{Decision: actuate.Decision{Do: actuate.Refuse, Why: why}}
		}
		act := p.Act
		p.Act = func(ctx context.Context) error {
			dctx, cancel := context.WithTimeout(ctx, DecideTimeout)
			why, err := s.Allows(dctx, ns)
			cancel()
			switch {
			case err != nil:
				return err
			case why != "":
				return actuate.Refused(why)
			}
			return act(ctx)
		}
		return p
	})
}
