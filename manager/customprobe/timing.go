package customprobe

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/probed/probed/runtime"
)

// DefaultTiming applies the API server's defaults to the timing fields of p
// (spec 1.2, pkg/apis/core/v1/defaults.go): a zero timeoutSeconds becomes 1,
// periodSeconds 10, successThreshold 1 and failureThreshold 3 (all seconds or
// counts). initialDelaySeconds stays 0 and terminationGracePeriodSeconds stays
// nil. Negative values are left alone for validation to reject. The handler
// fields are not touched. p may be nil.
func DefaultTiming(p *v1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
}

// ValidateTiming checks the timing fields of a (defaulted) probe of type t
// with the API server's rules (spec 1.3, pkg/apis/core/validation
// validateProbe and validateContainers):
//   - initialDelaySeconds, timeoutSeconds, periodSeconds, successThreshold and
//     failureThreshold must be >= 0 ("must be greater than or equal to 0");
//   - successThreshold must be 1 for liveness and startup probes ("must be 1");
//   - terminationGracePeriodSeconds, when set, must be > 0 and is forbidden on
//     readiness probes ("must not be set for readinessProbes").
//
// fldPath is the probe's path (e.g. spec.containers[0].livenessProbe); the
// errors name the offending child field. A nil p has no errors.
func ValidateTiming(p *v1.Probe, t runtime.ProbeType, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if p == nil {
		return errs
	}
	nonNegative := func(v int64, name string) {
		if v < 0 {
			errs = append(errs, field.Invalid(fldPath.Child(name), v, "must be greater than or equal to 0"))
		}
	}
	nonNegative(int64(p.InitialDelaySeconds), "initialDelaySeconds")
	nonNegative(int64(p.TimeoutSeconds), "timeoutSeconds")
	nonNegative(int64(p.PeriodSeconds), "periodSeconds")
	nonNegative(int64(p.SuccessThreshold), "successThreshold")
	nonNegative(int64(p.FailureThreshold), "failureThreshold")
	if g := p.TerminationGracePeriodSeconds; g != nil && *g <= 0 {
		errs = append(errs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *g, "must be greater than 0"))
	}
	switch t {
	case runtime.Liveness, runtime.Startup:
		if p.SuccessThreshold != 1 {
			errs = append(errs, field.Invalid(fldPath.Child("successThreshold"), p.SuccessThreshold, "must be 1"))
		}
	case runtime.Readiness:
		if p.TerminationGracePeriodSeconds != nil {
			errs = append(errs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *p.TerminationGracePeriodSeconds, "must not be set for readinessProbes"))
		}
	}
	return errs
}
