package customprobe

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/probed/probed/runtime"
)

// MinPeriod is the shortest period an annotation probe may have: 100 ms,
// ten ticks of the scheduler's default 10 ms wheel (docs/probes.md).
const MinPeriod = 100 * time.Millisecond

// MaxMillisecondOffset bounds each millisecond field: an offset is in
// [-999, 999], as KEP-3066 proposes; whole seconds go in the seconds field.
const MaxMillisecondOffset = 999

// ValidateMilliseconds checks the millisecond offsets ms of a (defaulted)
// annotation probe p (periodMilliseconds, timeoutMilliseconds,
// initialDelayMilliseconds; upstream's sub-second proposal,
// kubernetes/kubernetes#107958, KEP-3066):
//   - each offset must be in [-999, 999];
//   - periodSeconds + periodMilliseconds must be at least MinPeriod (100 ms)
//     (and so positive);
//   - timeoutSeconds + timeoutMilliseconds must be greater than 0;
//   - initialDelaySeconds + initialDelayMilliseconds must be >= 0.
//
// A timeout longer than the period is allowed, as for the kubelet: the
// next run waits for the running one (BR-10). The errors name the
// millisecond field under fldPath and state the sum; zero offsets have no
// errors (the seconds fields are ValidateTiming's).
func ValidateMilliseconds(p *v1.Probe, ms runtime.Milliseconds, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if p == nil || ms.IsZero() {
		return errs
	}
	check := func(name, secondsName string, seconds, offset int32, min time.Duration, rule string) {
		if offset == 0 {
			return
		}
		fp := fldPath.Child(name)
		if offset < -MaxMillisecondOffset || offset > MaxMillisecondOffset {
			errs = append(errs, field.Invalid(fp, offset, fmt.Sprintf("must be between -%d and %d (whole seconds go in %s)", MaxMillisecondOffset, MaxMillisecondOffset, secondsName)))
			return
		}
		if sum := runtime.SecondsPlusMilliseconds(seconds, offset); sum < min {
			errs = append(errs, field.Invalid(fp, offset, fmt.Sprintf("%s (%d) + %s (%d) is %s: %s", secondsName, seconds, name, offset, sum, rule)))
		}
	}
	check("periodMilliseconds", "periodSeconds", p.PeriodSeconds, ms.Period, MinPeriod, "the period must be at least "+MinPeriod.String())
	check("timeoutMilliseconds", "timeoutSeconds", p.TimeoutSeconds, ms.Timeout, time.Nanosecond, "the timeout must be greater than 0")
	check("initialDelayMilliseconds", "initialDelaySeconds", p.InitialDelaySeconds, ms.InitialDelay, 0, "the initial delay must be greater than or equal to 0")
	return errs
}

// ValidateStatePeriods checks an annotation probe's periods by state
// (unhealthyPeriodSeconds/Milliseconds, transitionPeriodSeconds/
// Milliseconds) as ValidateMilliseconds checks its period: a
// period is set when either of its fields is; then its seconds must be
// >= 0, its offset in [-999, 999] and the sum at least MinPeriod (100 ms).
// A transition period needs a threshold above 1: with successThreshold and
// failureThreshold 1 no result ever counts toward one, so it would never
// apply. The errors name the field under fldPath.
func ValidateStatePeriods(p *v1.Probe, sp runtime.StatePeriods, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if p == nil || sp.IsZero() {
		return errs
	}
	check := func(name string, seconds, offset int32) {
		if seconds == 0 && offset == 0 {
			return
		}
		sName, msName := name+"PeriodSeconds", name+"PeriodMilliseconds"
		switch {
		case seconds < 0:
			errs = append(errs, field.Invalid(fldPath.Child(sName), seconds, "must be greater than or equal to 0"))
		case offset < -MaxMillisecondOffset || offset > MaxMillisecondOffset:
			errs = append(errs, field.Invalid(fldPath.Child(msName), offset, fmt.Sprintf("must be between -%d and %d (whole seconds go in %s)", MaxMillisecondOffset, MaxMillisecondOffset, sName)))
		default:
			if sum := runtime.SecondsPlusMilliseconds(seconds, offset); sum < MinPeriod {
				fp, v := fldPath.Child(msName), any(offset)
				if offset == 0 {
					fp, v = fldPath.Child(sName), seconds
				}
				errs = append(errs, field.Invalid(fp, v, fmt.Sprintf("%s (%d) + %s (%d) is %s: the period must be at least %s", sName, seconds, msName, offset, sum, MinPeriod)))
			}
		}
	}
	check("unhealthy", sp.UnhealthySeconds, sp.UnhealthyMilliseconds)
	check("transition", sp.TransitionSeconds, sp.TransitionMilliseconds)
	if (sp.TransitionSeconds != 0 || sp.TransitionMilliseconds != 0) && p.SuccessThreshold <= 1 && p.FailureThreshold <= 1 {
		fp := fldPath.Child("transitionPeriodSeconds")
		if sp.TransitionSeconds == 0 {
			fp = fldPath.Child("transitionPeriodMilliseconds")
		}
		errs = append(errs, field.Forbidden(fp, "has no effect with successThreshold 1 and failureThreshold 1: no result counts toward a threshold"))
	}
	return errs
}
