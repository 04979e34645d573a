package actuate

// EventStep is --liveness-action=event, the default: every failure is one
// Warning Event (LivenessProbeFailed or StartupProbeFailed) and nothing
// else; the readiness gate does the rest where it can (it follows
// readiness and startup probes, not liveness). No guard applies: nothing
// is done to the pod.
var EventStep Step = StepFunc(func(Failure) Plan {
	return Plan{Decision: Decision{Do: EventOnly, Why: "probed does not restart containers (--liveness-action=event)"}}
})

// EventTexts are EventStep's.
var EventTexts = Texts{Not: "nothing is done", Work: "event"}
