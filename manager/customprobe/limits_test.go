package customprobe

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// probeList is an annotation of n tcpSocket readiness probes, one on each
// of the containers c0..c(n-1).
func probeList(n int) string {
	var items []string
	for i := 0; i < n; i++ {
		items = append(items, fmt.Sprintf(`{"container":"c%d","type":"readiness","tcpSocket":{"port":80}}`, i))
	}
	return "[" + strings.Join(items, ",") + "]"
}

// A pod's annotation with more probes than the node allows
// (--max-probes-per-pod) is refused whole, with one error on the
// annotation that names the limit, its flag and the count; at the limit it
// is accepted.
func TestLimitsMaxProbesRefusesTheWholeAnnotation(t *testing.T) {
	lim := Limits{MaxProbes: 32, MaxProbesFlag: "--max-probes-per-pod"}
	for _, c := range []struct {
		n       int
		refused bool
	}{{32, false}, {33, true}, {300, true}} {
		pod := testPod(probeList(c.n))
		pod.Spec.Containers = nil
		for i := 0; i < c.n; i++ {
			pod.Spec.Containers = append(pod.Spec.Containers, testPod("").Spec.Containers[0])
			pod.Spec.Containers[i].Name = fmt.Sprintf("c%d", i)
		}
		probes, errs := ParseWith(pod, Options{Limits: lim})
		if !c.refused {
			if len(errs) != 0 || len(probes) != c.n {
				t.Fatalf("%d probes at a limit of 32: %d probes, errors %v", c.n, len(probes), errs)
			}
			continue
		}
		if len(probes) != 0 || len(errs) != 1 || errs[0].Type != field.ErrorTypeTooMany {
			t.Fatalf("%d probes: %d probes, errors %v; want none and one TooMany", c.n, len(probes), errs)
		}
		msg := errs[0].Error()
		for _, want := range []string{"metadata.annotations[probed.io/probes]", "--max-probes-per-pod", "at most 32", fmt.Sprint(c.n)} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q lacks %q", msg, want)
			}
		}
	}
}

// A period under the node's shortest (--min-probe-period) is
// an error on the field that sets it; the element is left out, the others
// run. Without the limit the annotation's own floor (100 ms) holds.
func TestLimitsMinPeriodNamesTheField(t *testing.T) {
	lim := Limits{MinPeriod: time.Second, MinPeriodFlag: "--min-probe-period"}
	pod := testPod(`[{"container":"app","type":"readiness","periodSeconds":1,"periodMilliseconds":-900,"tcpSocket":{"port":80}},
		{"container":"app","type":"liveness","periodSeconds":1,"tcpSocket":{"port":80}},
		{"container":"proxy","type":"readiness","periodSeconds":0,"tcpSocket":{"port":80}}]`)
	probes, errs := ParseWith(pod, Options{Limits: lim})
	if len(probes) != 2 || len(errs) != 1 {
		t.Fatalf("probes %+v, errors %v; want the liveness and defaulted (10 s) probes, one error", probes, errs)
	}
	msg := errs[0].Error()
	for _, want := range []string{"[0].periodMilliseconds", "100ms", "shortest is 1s", "--min-probe-period"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	pod = testPod(`[{"container":"app","type":"readiness","periodSeconds":1,"periodMilliseconds":-900,"tcpSocket":{"port":80}}]`)
	if probes, errs := ParseWith(pod, Options{}); len(errs) != 0 || len(probes) != 1 {
		t.Fatalf("without limits: %d probes, errors %v", len(probes), errs)
	}
}
