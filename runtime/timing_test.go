package runtime

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// TimingOf is the one conversion of a probe's timing fields to durations:
// seconds plus the annotation's millisecond offsets (KEP-3066), the API
// defaults for what is not positive (spec 1.2).
func TestTimingOf(t *testing.T) {
	ms := func(p, to, d int32) *Milliseconds { return &Milliseconds{Period: p, Timeout: to, InitialDelay: d} }
	cases := []struct {
		name string
		p    *v1.Probe
		ms   *Milliseconds
		want Timing
	}{
		{"nil probe: defaults", nil, nil, Timing{Period: 10 * time.Second, Timeout: time.Second}},
		{"whole seconds", &v1.Probe{PeriodSeconds: 3, TimeoutSeconds: 2, InitialDelaySeconds: 5}, nil,
			Timing{Period: 3 * time.Second, Timeout: 2 * time.Second, InitialDelay: 5 * time.Second}},
		{"zero seconds count as the defaults", &v1.Probe{}, nil, Timing{Period: 10 * time.Second, Timeout: time.Second}},
		{"200 ms period", &v1.Probe{PeriodSeconds: 1, TimeoutSeconds: 1}, ms(-800, 0, 0),
			Timing{Period: 200 * time.Millisecond, Timeout: time.Second}},
		{"all offsets", &v1.Probe{PeriodSeconds: 1, TimeoutSeconds: 1, InitialDelaySeconds: 1}, ms(-900, -700, 250),
			Timing{Period: 100 * time.Millisecond, Timeout: 300 * time.Millisecond, InitialDelay: 1250 * time.Millisecond}},
		{"non-positive sums fall back", &v1.Probe{PeriodSeconds: 1, TimeoutSeconds: 1}, ms(-1000, -1000, -1),
			Timing{Period: 10 * time.Second, Timeout: time.Second}},
	}
	for _, tc := range cases {
		if got := TimingOf(tc.p, tc.ms); got != tc.want {
			t.Errorf("%s: TimingOf = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	s := Spec{Probe: &v1.Probe{PeriodSeconds: 1, TimeoutSeconds: 1}, Milliseconds: ms(-800, -500, 0)}
	if s.Timeout() != 500*time.Millisecond || s.Timing().Period != 200*time.Millisecond {
		t.Errorf("Spec timing %+v timeout %v", s.Timing(), s.Timeout())
	}
}
