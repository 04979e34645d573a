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

// Timing is a probe's period, timeout and initial delay as durations.
type Timing struct {
	Period       time.Duration
	Timeout      time.Duration
	InitialDelay time.Duration
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
// all read it). A period that is not positive counts as the API default of
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
