// Package share reads the count-or-share values of the pod annotations of
// cluster mode's guards (probed.io/panic-threshold, probed.io/restart-budget):
// a count of pods ("3") or a share of them ("50%"), as a Deployment's
// maxUnavailable is written (k8s.io/apimachinery intstr), with the bounds
// every guard applies to a tenant's text.
package share

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// MaxLen is the longest value read: "100%" and any count of pods a cluster
// holds fit; a longer one is refused without being read further.
const MaxLen = 10

// Value is a parsed count or share.
type Value struct {
	v intstr.IntOrString
}

// Parse reads value, the annotation key's text: a count from 0 ("3") or a
// share from 0% to 100% ("50%"). Errors name the key and say what is
// wanted; they never repeat a value longer than MaxLen.
func Parse(key, value string) (Value, error) {
	want := fmt.Sprintf("annotation %s: want a count of pods such as \"3\" or a share from 0%% to 100%% such as \"50%%\"", key)
	if len(value) > MaxLen {
		return Value{}, fmt.Errorf("%s, not a value of %d bytes", want, len(value))
	}
	if pct, ok := strings.CutSuffix(value, "%"); ok {
		n, err := strconv.Atoi(pct)
		if err != nil || n < 0 || n > 100 || pct != strconv.Itoa(n) {
			return Value{}, fmt.Errorf("%s, not %q", want, value)
		}
		return Value{intstr.FromString(value)}, nil
	}
	n, err := strconv.Atoi(value)
	if err != nil || n < 0 || n > math.MaxInt32 || value != strconv.Itoa(n) {
		return Value{}, fmt.Errorf("%s, not %q", want, value)
	}
	return Value{intstr.FromInt32(int32(n))}, nil
}

// Of is how many of total pods v stands for: a count capped at total, a
// share of total rounded up when roundUp, else down
// (intstr.GetScaledValueFromIntOrPercent).
func (v Value) Of(total int, roundUp bool) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(&v.v, total, roundUp)
	if err != nil { // cannot happen: Parse checked the form
		return 0
	}
	return min(max(n, 0), total)
}

// String is the value as written ("50%", "3").
func (v Value) String() string { return v.v.String() }
