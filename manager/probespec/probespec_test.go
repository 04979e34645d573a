package probespec

import (
	"testing"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/probed/probed/runtime"
)

func TestValidateTiming(t *testing.T) {
	path := field.NewPath("p")
	ok := &v1.Probe{TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
	for _, typ := range []runtime.ProbeType{runtime.Liveness, runtime.Readiness, runtime.Startup} {
		if errs := ValidateTiming(ok, typ, path); len(errs) != 0 {
			t.Errorf("%v: %v", typ, errs)
		}
	}
	if errs := ValidateTiming(nil, runtime.Liveness, path); len(errs) != 0 {
		t.Errorf("nil: %v", errs)
	}
	p := ok.DeepCopy()
	p.SuccessThreshold = 0 // not defaulted: liveness needs exactly 1
	if errs := ValidateTiming(p, runtime.Liveness, path); len(errs) != 1 || errs[0].Error() != "p.successThreshold: Invalid value: 0: must be 1" {
		t.Errorf("got %v", errs)
	}
	DefaultTiming(nil) // no panic
}

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }
