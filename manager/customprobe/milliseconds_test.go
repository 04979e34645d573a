package customprobe

import (
	"strings"
	"testing"
	"time"

	"github.com/probed/probed/runtime"
)

// TestParseMilliseconds: the millisecond fields are offsets added to the
// defaulted seconds fields (kubernetes/kubernetes#107958, KEP-3066):
// periodSeconds 1 with periodMilliseconds -800 is 200 ms.
func TestParseMilliseconds(t *testing.T) {
	cases := []struct {
		name   string
		fields string
		ms     runtime.Milliseconds
		want   runtime.Timing
	}{
		{"whole seconds", `"periodSeconds":2`, runtime.Milliseconds{},
			runtime.Timing{Period: 2 * time.Second, Timeout: time.Second}},
		{"200ms period", `"periodSeconds":1,"periodMilliseconds":-800`, runtime.Milliseconds{Period: -800},
			runtime.Timing{Period: 200 * time.Millisecond, Timeout: time.Second}},
		{"100ms period, the minimum", `"periodSeconds":1,"periodMilliseconds":-900`, runtime.Milliseconds{Period: -900},
			runtime.Timing{Period: 100 * time.Millisecond, Timeout: time.Second}},
		{"positive offset", `"periodSeconds":1,"periodMilliseconds":500`, runtime.Milliseconds{Period: 500},
			runtime.Timing{Period: 1500 * time.Millisecond, Timeout: time.Second}},
		{"offset on the defaulted period (10 s)", `"periodMilliseconds":500`, runtime.Milliseconds{Period: 500},
			runtime.Timing{Period: 10500 * time.Millisecond, Timeout: time.Second}},
		{"timeout on the defaulted 1 s", `"periodSeconds":1,"periodMilliseconds":-900,"timeoutMilliseconds":-700`,
			runtime.Milliseconds{Period: -900, Timeout: -700},
			runtime.Timing{Period: 100 * time.Millisecond, Timeout: 300 * time.Millisecond}},
		{"timeout longer than the period (BR-10)", `"periodSeconds":1,"periodMilliseconds":-900,"timeoutSeconds":2,"timeoutMilliseconds":-1`,
			runtime.Milliseconds{Period: -900, Timeout: -1},
			runtime.Timing{Period: 100 * time.Millisecond, Timeout: 1999 * time.Millisecond}},
		{"initial delay in ms", `"initialDelayMilliseconds":250`, runtime.Milliseconds{InitialDelay: 250},
			runtime.Timing{Period: 10 * time.Second, Timeout: time.Second, InitialDelay: 250 * time.Millisecond}},
		{"initial delay seconds minus ms", `"initialDelaySeconds":2,"initialDelayMilliseconds":-500`, runtime.Milliseconds{InitialDelay: -500},
			runtime.Timing{Period: 10 * time.Second, Timeout: time.Second, InitialDelay: 1500 * time.Millisecond}},
		{"1 ms timeout (timeoutSeconds 0 defaults to 1)", `"timeoutSeconds":0,"timeoutMilliseconds":-999`, runtime.Milliseconds{Timeout: -999},
			runtime.Timing{Period: 10 * time.Second, Timeout: time.Millisecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(`[{"container":"app","type":"readiness",` + tc.fields + `,"tcpSocket":{"port":8080}}]`)
			got, errs := Parse(pod, nil)
			if len(errs) != 0 || len(got) != 1 {
				t.Fatalf("errors: %v", errs)
			}
			if got[0].Milliseconds != tc.ms {
				t.Errorf("Milliseconds = %+v, want %+v", got[0].Milliseconds, tc.ms)
			}
			if (got[0].Offsets() == nil) != tc.ms.IsZero() {
				t.Errorf("Offsets() = %v for %+v", got[0].Offsets(), tc.ms)
			}
			if tm := got[0].Timing(); tm != tc.want {
				t.Errorf("Timing() = %+v, want %+v", tm, tc.want)
			}
		})
	}
}

// TestParseMillisecondsInvalid: every rule of ValidateMilliseconds, each
// error naming the pod's annotation, the element and the field, with the
// sum it found.
func TestParseMillisecondsInvalid(t *testing.T) {
	const path = "metadata.annotations[probed.io/probes][0]."
	cases := []struct {
		name, fields string
		want         []string // substrings, one error each
	}{
		{"period below 100 ms", `"periodSeconds":1,"periodMilliseconds":-950`,
			[]string{path + `periodMilliseconds: Invalid value: -950: periodSeconds (1) + periodMilliseconds (-950) is 50ms: the period must be at least 100ms`}},
		{"period zero", `"periodSeconds":1,"periodMilliseconds":-1000`,
			[]string{path + `periodMilliseconds: Invalid value: -1000: must be between -999 and 999 (whole seconds go in periodSeconds)`}},
		{"offset too large", `"periodSeconds":1,"periodMilliseconds":1000`,
			[]string{path + `periodMilliseconds: Invalid value: 1000: must be between -999 and 999`}},
		{"timeout sum negative", `"timeoutSeconds":-1,"timeoutMilliseconds":500`,
			[]string{path + `timeoutSeconds: Invalid value: -1: must be greater than or equal to 0`,
				path + `timeoutMilliseconds: Invalid value: 500: timeoutSeconds (-1) + timeoutMilliseconds (500) is -500ms: the timeout must be greater than 0`}},
		{"initial delay negative", `"initialDelayMilliseconds":-1`,
			[]string{path + `initialDelayMilliseconds: Invalid value: -1: initialDelaySeconds (0) + initialDelayMilliseconds (-1) is -1ms: the initial delay must be greater than or equal to 0`}},
		{"not an integer", `"periodMilliseconds":"200"`,
			[]string{path + `periodMilliseconds: Invalid value: "\"200\"": must be an integer (32-bit)`}},
		{"misspelled", `"periodMiliseconds":200`,
			[]string{path + `periodMiliseconds: Invalid value: "periodMiliseconds": unknown field (did you mean "periodMilliseconds"?)`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(`[{"container":"app","type":"readiness",` + tc.fields + `,"tcpSocket":{"port":8080}}]`)
			got, errs := Parse(pod, nil)
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors %q, want %d", len(errs), errStrings(errs), len(tc.want))
			}
			if len(tc.want) > 0 && len(got) != 0 {
				t.Errorf("an invalid probe was returned: %+v", got)
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i].Error(), w)
				}
			}
		})
	}
}
