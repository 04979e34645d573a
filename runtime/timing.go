package runtime

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// Milliseconds are the millisecond offsets of a probe's timing fields: the
// periodMilliseconds, timeoutMilliseconds and initialDelayMilliseconds of a
// probed.io/probes annotation probe. Each is added to the matching seconds
// field of v1.Probe (after the API defaults), as upstream's sub-second probe
// proposal does (kubernetes/kubernetes#107958, KEP-3066): periodSeconds 1
// with Period -800 is a period of 200 ms. Validation (manager/customprobe)
// keeps each offset in [-999, 999] and the sums positive. Spec probes have
// no offsets (the v1.Probe API has no such fields).
type Milliseconds struct {
	Period       int32 `json:"periodMilliseconds,omitempty"`
	Timeout      int32 `json:"timeoutMilliseconds,omitempty"`
	InitialDelay int32 `json:"initialDelayMilliseconds,omitempty"`
}

// IsZero reports whether no offset is set.
func (ms Milliseconds) IsZero() bool { return ms == Milliseconds{} }

// StatePeriods are an annotation probe's periods by state,
// each seconds plus a millisecond offset as periodSeconds and
// periodMilliseconds are, but with no default: a period whose two fields
// are zero is not set, and the probe's period applies in that state.
// Validation (manager/customprobe) keeps each set period at least 100 ms
// and each offset in [-999, 999]. Spec probes have none.
type StatePeriods struct {
	// UnhealthySeconds and UnhealthyMilliseconds: the period while the
	// probe's verdict is not Success — before its first Success verdict
	// for the container, and after a Failure verdict (Envoy's
	// unhealthy_interval, HAProxy's downinter).
	UnhealthySeconds      int32 `json:"unhealthyPeriodSeconds,omitempty"`
	UnhealthyMilliseconds int32 `json:"unhealthyPeriodMilliseconds,omitempty"`
	// TransitionSeconds and TransitionMilliseconds: the period while
	// consecutive results count toward a threshold that would change the
	// verdict (HAProxy's fastinter): a healthy probe that failed once is
	// checked again soon, so that a real failure is confirmed, and a blip
	// cleared, quickly.
	TransitionSeconds      int32 `json:"transitionPeriodSeconds,omitempty"`
	TransitionMilliseconds int32 `json:"transitionPeriodMilliseconds,omitempty"`
}

// IsZero reports whether no state period is set.
func (sp StatePeriods) IsZero() bool { return sp == StatePeriods{} }

// Unhealthy is the unhealthy period, 0 when not set.
func (sp StatePeriods) Unhealthy() time.Duration {
	return SecondsPlusMilliseconds(sp.UnhealthySeconds, sp.UnhealthyMilliseconds)
}

// Transition is the transition period, 0 when not set.
func (sp StatePeriods) Transition() time.Duration {
	return SecondsPlusMilliseconds(sp.TransitionSeconds, sp.TransitionMilliseconds)
}

// PeriodState is where a probe stands, for its period (Timing.PeriodIn).
// The worker decides it from its threshold state (manager, W10–W11).
type PeriodState uint8

const (
	// StateUnhealthy: the probe has had no Success verdict for its
	// container yet, or its verdict is Failure.
	StateUnhealthy PeriodState = iota
	// StateHealthy: its verdict is Success.
	StateHealthy
	// StateTransition: its last results differ from its verdict and count
	// toward the threshold that would change it.
	StateTransition
)

// Timing is a probe's period, timeout and initial delay as durations, and
// its periods by state (zero: not set, Period applies).
type Timing struct {
	Period       time.Duration
	Timeout      time.Duration
	InitialDelay time.Duration
	Unhealthy    time.Duration
	Transition   time.Duration
}

// PeriodIn returns the period of a probe in state s: Transition or
// Unhealthy when set for that state, else Period.
func (t Timing) PeriodIn(s PeriodState) time.Duration {
	switch {
	case s == StateTransition && t.Transition > 0:
		return t.Transition
	case s == StateUnhealthy && t.Unhealthy > 0:
		return t.Unhealthy
	}
	return t.Period
}

// Shortest returns the shortest period the probe may run at, in any state:
// what a budget of runs per second must count.
func (t Timing) Shortest() time.Duration {
	p := t.Period
	for _, q := range [...]time.Duration{t.Unhealthy, t.Transition} {
		if q > 0 && q < p {
			p = q
		}
	}
	return p
}

// WithPeriods returns t with the state periods of sp (nil: none).
func (t Timing) WithPeriods(sp *StatePeriods) Timing {
	if sp != nil {
		t.Unhealthy, t.Transition = max(sp.Unhealthy(), 0), max(sp.Transition(), 0)
	}
	return t
}

// SecondsPlusMilliseconds is the effective value of a timing field:
// seconds s plus the offset ms in milliseconds (KEP-3066). It applies no
// default and no bound.
func SecondsPlusMilliseconds(s, ms int32) time.Duration {
	return time.Duration(s)*time.Second + time.Duration(ms)*time.Millisecond
}

// TimingOf returns the timing of probe p with the millisecond offsets ms
// (nil: none, whole seconds): the one place where a probe's period, timeout
// and initial delay become durations (the worker's schedule and initial
// delay, the runtime's and the handlers' deadlines, the agent's drain bound
// all read it); Timing.WithPeriods adds an annotation probe's periods by
// state (Spec.Timing, customprobe.Probe.Timing). A period that is not positive counts as the API default of
// 10 s and a timeout as 1 s (the kubelet is always fed defaulted specs,
// spec 1.2); a negative initial delay counts as none. The seconds fields
// are taken as they are: defaults (periodSeconds 0 → 10) are applied before,
// by the API server or customprobe. p may be nil (the defaults).
func TimingOf(p *v1.Probe, ms *Milliseconds) Timing {
	var t Timing
	if p != nil {
		var off Milliseconds
		if ms != nil {
			off = *ms
		}
		t = Timing{
			Period:       SecondsPlusMilliseconds(p.PeriodSeconds, off.Period),
			Timeout:      SecondsPlusMilliseconds(p.TimeoutSeconds, off.Timeout),
			InitialDelay: SecondsPlusMilliseconds(p.InitialDelaySeconds, off.InitialDelay),
		}
	}
	if t.Period <= 0 {
		t.Period = 10 * time.Second
	}
	if t.Timeout <= 0 {
		t.Timeout = time.Second
	}
	if t.InitialDelay < 0 {
		t.InitialDelay = 0
	}
	return t
}
