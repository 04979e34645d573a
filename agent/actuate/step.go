package actuate

import (
	"context"
	"errors"
	"time"
)

// Do is what an action does about one failure.
type Do uint8

const (
	// Act: the action is taken; the failure is queued for a worker, whose
	// attempts run the Plan's Act.
	Act Do = iota + 1
	// EventOnly: the failure is recorded in a Warning Event, nothing else
	// is done (--liveness-action=event). Why says what is done instead.
	EventOnly
	// Refuse: nothing is done about this container instance; Why says why
	// (the namespace is not selected, the pod is exempt).
	Refuse
	// Hold: nothing is done yet; Why says why. The failure is decided
	// again (Step.Plan) after After.
	Hold
)

// Decision is what an action does about one failure, decided at once when
// the failure is known, before anything about it is announced.
type Decision struct {
	Do Do
	// Why says why nothing (or nothing yet) is done (Refuse, Hold), what
	// is done instead (EventOnly), or, with Act, what acting still
	// depends on ("if namespace ns is selected …"). Events say it.
	Why string
	// After is, with Hold, how long until the failure is decided again (at
	// least MinHold).
	After time.Duration
}

// MinHold is the least time a held failure waits before it is decided
// again.
const MinHold = time.Second

// Plan is a Step's Decision about one failure and, when it acts, its work.
type Plan struct {
	Decision
	// Act runs one attempt of the action, on one of the Queue's workers,
	// once the node's bucket gave it a token; required with Act. nil: the
	// attempt is done. An error makes another attempt after a backoff,
	// MaxAttempts in all; the errors of Refused, Held and Wait say
	// otherwise. ctx ends when the agent stops (the attempt is abandoned).
	Act func(ctx context.Context) error
}

// Step is one liveness action (event, evict, restart), or a guard around
// one: Plan decides what the action does about f and, when it acts,
// returns the work. Plan must not block (the agent's results goroutine and
// the probe pool call it); the Queue calls it once per container instance,
// and again for a held one.
type Step interface {
	Plan(f Failure) Plan
}

// StepFunc adapts a function to Step.
type StepFunc func(f Failure) Plan

// Plan calls s.
func (s StepFunc) Plan(f Failure) Plan { return s(f) }

// Refused is the error of an attempt that must not act after all (the
// namespace lost its label since the failure was decided): the Queue
// records why, as for a Refuse decision, and is done with the failure.
func Refused(why string) error { return &refusal{why: why} }

// Held is the error of an attempt that must wait (a guard's window is
// full): the Queue records why (once per failure) and runs the attempt
// again after after (at least MinHold); no attempt is counted.
func Held(why string, after time.Duration) error { return &hold{why: why, after: after} }

// Wait is the error of an attempt a budget refused for now (a
// PodDisruptionBudget's 429): the Queue logs what, with err, and runs the
// attempt again after its backoff, at least after; no attempt is counted.
func Wait(err error, after time.Duration, what string) error {
	return &wait{err: err, after: after, what: what}
}

type refusal struct{ why string }

func (r *refusal) Error() string { return "refused: " + r.why }

type hold struct {
	why   string
	after time.Duration
}

func (h *hold) Error() string { return "held back: " + h.why }

type wait struct {
	err   error
	after time.Duration
	what  string
}

func (w *wait) Error() string { return w.what + ": " + w.err.Error() }
func (w *wait) Unwrap() error { return w.err }

func asRefusal(err error) (*refusal, bool) {
	var r *refusal
	return r, errors.As(err, &r)
}

func asHold(err error) (*hold, bool) {
	var h *hold
	return h, errors.As(err, &h)
}

func asWait(err error) (*wait, bool) {
	var w *wait
	return w, errors.As(err, &w)
}

// Texts are what an action's Events and logs say about its decisions (the
// Queue's; the step's own work records its own Events).
type Texts struct {
	// Acting ends a sentence about a failure the action acts on, in the
	// announcement of the verdict: "the pod is to be evicted
	// (--liveness-action=evict)".
	Acting string
	// Queued, when set, is the Warning Event of a failure the action acts
	// on, when it is queued: "Container app failed liveness probe, <Queued>".
	Queued string
	// Not says what is not done: the Warning Event "Container app failed
	// liveness probe; <Not>: <why>" of a refused failure, "<Not> yet:
	// <why>" of a held one.
	Not string
	// Work names an attempt in the logs ("eviction").
	Work string
	// FailedReason and Failed make the Warning Event of an action given up
	// after MaxAttempts: "<Failed> after 5 attempts: <error>".
	FailedReason, Failed string
}

// Say ends a sentence about a failure with what d does about it: the
// announcement of the verdict.
func (t Texts) Say(d Decision) string {
	switch d.Do {
	case Act:
		if d.Why != "" {
			return t.Acting + ", " + d.Why
		}
		return t.Acting
	case EventOnly:
		return d.Why
	case Hold:
		return t.Not + " yet: " + d.Why
	}
	return t.Not + ": " + d.Why
}
