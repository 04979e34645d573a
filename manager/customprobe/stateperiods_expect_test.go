package customprobe

import (
	"strings"
	"testing"
	"time"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/expect"
)

// parseOne parses an annotation of one element on container "app".
func parseOne(t *testing.T, element string, opts Options) ([]Probe, []string) {
	t.Helper()
	probes, errs := ParseWith(testPod(`[{"container":"app",`+element+`}]`), opts)
	return probes, errStrings(errs)
}

// wantErrors checks that each want is a substring of its own error.
func wantErrors(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("errors %q, want %d: %q", got, len(want), want)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("error %d = %q, want it to contain %q", i, got[i], want[i])
		}
	}
}

// UnhealthyPeriodSeconds/Milliseconds and
// transitionPeriodSeconds/Milliseconds decode into the probe's periods by
// state; a period whose two fields are absent is not set (the probe's
// period applies); Timing carries them and Shortest is the budget's.
func TestParseStatePeriods(t *testing.T) {
	cases := []struct {
		name, fields          string
		unhealthy, transition time.Duration
	}{
		{"none", `"periodSeconds":10`, 0, 0},
		{"the issue's example", `"periodSeconds":10,"unhealthyPeriodMilliseconds":250`, 250 * time.Millisecond, 0},
		{"seconds and offset", `"unhealthyPeriodSeconds":2,"unhealthyPeriodMilliseconds":-500,"transitionPeriodSeconds":1`, 1500 * time.Millisecond, time.Second},
		{"transition in ms", `"transitionPeriodMilliseconds":100`, 0, 100 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := parseOne(t, `"type":"readiness",`+tc.fields+`,"tcpSocket":{"port":8080}`, Options{})
			if len(errs) != 0 || len(got) != 1 {
				t.Fatalf("errors: %v", errs)
			}
			tm := got[0].Timing()
			if tm.Unhealthy != tc.unhealthy || tm.Transition != tc.transition {
				t.Fatalf("Timing = %+v, want unhealthy %v transition %v", tm, tc.unhealthy, tc.transition)
			}
			ext := got[0].Extension()
			if ext == nil || ext.Periods != got[0].Periods {
				t.Fatalf("Extension() = %+v, want the probe's periods", ext)
			}
			want := tm.Period
			for _, p := range []time.Duration{tc.unhealthy, tc.transition} {
				if p > 0 && p < want {
					want = p
				}
			}
			if s := tm.Shortest(); s != want {
				t.Fatalf("Shortest() = %v, want %v", s, want)
			}
		})
	}
}

// Each period by state is at least 100 ms, as sub-second
// periods are; its offset is in [-999, 999]; a transition period needs a
// threshold above 1. Each error names the field.
func TestParseStatePeriodsInvalid(t *testing.T) {
	const path = "metadata.annotations[probed.io/probes][0]."
	cases := []struct {
		name, fields string
		want         []string
	}{
		{"unhealthy under 100 ms", `"unhealthyPeriodMilliseconds":50,"failureThreshold":3`,
			[]string{path + `unhealthyPeriodMilliseconds: Invalid value: 50: unhealthyPeriodSeconds (0) + unhealthyPeriodMilliseconds (50) is 50ms: the period must be at least 100ms`}},
		{"unhealthy negative seconds", `"unhealthyPeriodSeconds":-1`,
			[]string{path + `unhealthyPeriodSeconds: Invalid value: -1: must be greater than or equal to 0`}},
		{"transition offset too large", `"transitionPeriodSeconds":1,"transitionPeriodMilliseconds":1000`,
			[]string{path + `transitionPeriodMilliseconds: Invalid value: 1000: must be between -999 and 999 (whole seconds go in transitionPeriodSeconds)`}},
		{"transition negative sum", `"transitionPeriodMilliseconds":-200`,
			[]string{path + `transitionPeriodMilliseconds: Invalid value: -200: transitionPeriodSeconds (0) + transitionPeriodMilliseconds (-200) is -200ms`}},
		{"transition without a threshold", `"transitionPeriodSeconds":1,"failureThreshold":1`,
			[]string{path + `transitionPeriodSeconds: Forbidden: has no effect with successThreshold 1 and failureThreshold 1`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := parseOne(t, `"type":"readiness",`+tc.fields+`,"tcpSocket":{"port":8080}`, Options{})
			if len(got) != 0 {
				t.Fatalf("an invalid element was kept: %+v", got)
			}
			wantErrors(t, errs, tc.want)
		})
	}
}

// In cluster mode: --min-probe-period holds for every period a
// probe may run at, each refusal naming its field and the flag.
func TestLimitsMinPeriodHoldsForStatePeriods(t *testing.T) {
	const path = "metadata.annotations[probed.io/probes][0]."
	lim := Limits{MinPeriod: time.Second, MinPeriodFlag: "--min-probe-period"}
	_, errs := parseOne(t, `"type":"readiness","periodSeconds":10,"unhealthyPeriodMilliseconds":250,"transitionPeriodSeconds":2,"tcpSocket":{"port":8080}`,
		Options{Limits: lim})
	wantErrors(t, errs, []string{path + `unhealthyPeriodMilliseconds: Invalid value: 250: the unhealthy period is 250ms; this node's shortest is 1s (--min-probe-period)`})
	_, errs = parseOne(t, `"type":"readiness","periodSeconds":10,"transitionPeriodSeconds":0,"transitionPeriodMilliseconds":500,"tcpSocket":{"port":8080}`,
		Options{Limits: lim})
	wantErrors(t, errs, []string{path + `transitionPeriodMilliseconds: Invalid value: 500: the transition period is 500ms; this node's shortest is 1s`})
	if got, errs := parseOne(t, `"type":"readiness","periodSeconds":10,"unhealthyPeriodSeconds":1,"tcpSocket":{"port":8080}`, Options{Limits: lim}); len(errs) != 0 || len(got) != 1 {
		t.Fatalf("an unhealthy period at the node's shortest was refused: %v", errs)
	}
}

// HttpGet.expect and tcpSocket.expect decode beside the v1
// handler, strictly, into the probe's Expect; the v1 handler never carries
// it (a spec probe cannot), and the rest of the handler decodes as before.
func TestParseExpect(t *testing.T) {
	got, errs := parseOne(t, `"type":"readiness","httpGet":{"path":"/healthz","port":8080,"scheme":"HTTPS","expect":{
		"status":[200,"300-302"],"bodyRegex":"^ok","jsonPath":{"path":"{.status}","value":"up"},
		"maxLatencyMilliseconds":500,"certificateExpiresAfterDays":14}}`, Options{})
	if len(errs) != 0 || len(got) != 1 {
		t.Fatalf("errors: %v", errs)
	}
	p := got[0]
	want := &expect.Expect{Status: []expect.StatusRange{{From: 200, To: 200}, {From: 300, To: 302}}, BodyRegex: "^ok",
		JSONPath: &expect.JSONPath{Path: "{.status}", Value: "up"}, MaxLatencyMilliseconds: 500, CertificateExpiresAfterDays: 14}
	if p.Expect == nil || p.Expect.BodyRegex != want.BodyRegex || len(p.Expect.Status) != 2 || p.Expect.Status[1] != want.Status[1] ||
		*p.Expect.JSONPath != *want.JSONPath || p.Expect.MaxLatencyMilliseconds != 500 || p.Expect.CertificateExpiresAfterDays != 14 {
		t.Fatalf("Expect = %+v, want %+v", p.Expect, want)
	}
	if p.Probe.HTTPGet.Path != "/healthz" || p.Probe.HTTPGet.Port.IntVal != 8080 || p.Probe.HTTPGet.Scheme != "HTTPS" {
		t.Fatalf("httpGet = %+v", p.Probe.HTTPGet)
	}
	if p.Extension().Expect != p.Expect {
		t.Fatal("Extension() does not carry the Expect")
	}
	got, errs = parseOne(t, `"type":"liveness","tcpSocket":{"port":"http","expect":{"maxLatencyMilliseconds":200,"certificateExpiresAfterDays":30}}`, Options{})
	if len(errs) != 0 || len(got) != 1 || got[0].Expect.MaxLatencyMilliseconds != 200 || got[0].Probe.TCPSocket.Port.StrVal != "http" {
		t.Fatalf("tcpSocket.expect: %+v, errors %v", got, errs)
	}
	// A JSON number or boolean as the expected value is its text.
	got, _ = parseOne(t, `"type":"readiness","httpGet":{"port":8080,"expect":{"jsonPath":{"path":".ready","value":true}}}`, Options{})
	if len(got) != 1 || got[0].Expect.JSONPath.Value != "true" {
		t.Fatalf("jsonPath.value true decoded as %+v", got)
	}
}

// An expectation that cannot be evaluated is refused at
// validation time, the field named: a bad regular expression or JSONPath,
// a status outside 100-599, a latency bound beyond the timeout, a
// certificate check on plain HTTP, body checks on tcpSocket, expect on a
// handler that has none, unknown fields.
func TestParseExpectInvalid(t *testing.T) {
	const path = "metadata.annotations[probed.io/probes][0]."
	cases := []struct {
		name, element string
		want          []string
	}{
		{"bad regex", `"httpGet":{"port":8080,"expect":{"bodyRegex":"(ok"}}`,
			[]string{path + `httpGet.expect.bodyRegex: Invalid value: "(ok": not an RE2 expression: missing closing ): ` + "`(ok`"}},
		{"bad jsonPath", `"httpGet":{"port":8080,"expect":{"jsonPath":{"path":"{.status[","value":"x"}}}`,
			[]string{path + `httpGet.expect.jsonPath.path: Invalid value: "{.status[": not a JSONPath expression`}},
		{"empty jsonPath", `"httpGet":{"port":8080,"expect":{"jsonPath":{"path":"","value":"x"}}}`,
			[]string{path + `httpGet.expect.jsonPath.path: Invalid value: "": required`}},
		{"status out of range", `"httpGet":{"port":8080,"expect":{"status":[200,"600-700"]}}`,
			[]string{path + `httpGet.expect.status[1]: Invalid value: "600-700": status codes are 100-599`}},
		{"status range reversed", `"httpGet":{"port":8080,"expect":{"status":["299-200"]}}`,
			[]string{path + `httpGet.expect.status[0]: Invalid value: "299-200": a range goes from the lower code to the higher`}},
		{"status not a code", `"httpGet":{"port":8080,"expect":{"status":["ok"]}}`,
			[]string{path + `httpGet.expect: Invalid value:`}},
		{"latency over the timeout", `"timeoutSeconds":1,"httpGet":{"port":8080,"expect":{"maxLatencyMilliseconds":1500}}`,
			[]string{path + `httpGet.expect.maxLatencyMilliseconds: Invalid value: 1500: must be between 1 and the probe's timeout (1s)`}},
		{"certificate on HTTP", `"httpGet":{"port":8080,"expect":{"certificateExpiresAfterDays":7}}`,
			[]string{path + `httpGet.expect.certificateExpiresAfterDays: Invalid value: 7: needs scheme HTTPS`}},
		{"body check on tcp", `"tcpSocket":{"port":8080,"expect":{"bodyRegex":"ok"}}`,
			[]string{path + `tcpSocket.expect.bodyRegex: Invalid value: "ok": only for httpGet`}},
		{"unknown field", `"httpGet":{"port":8080,"expect":{"bodyRegexp":"ok"}}`,
			[]string{path + `httpGet.expect: Invalid value: "{\"bodyRegexp\":\"ok\"}": unknown field "bodyRegexp"`}},
		{"expect on grpc", `"grpc":{"port":9090,"expect":{"maxLatencyMilliseconds":5}}`,
			[]string{path + `grpc: Invalid value:`}},
		{"unknown field beside expect", `"httpGet":{"port":8080,"pth":"/","expect":{"maxLatencyMilliseconds":5}}`,
			[]string{path + `httpGet: Invalid value:`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := parseOne(t, `"type":"readiness",`+tc.element, Options{})
			if len(got) != 0 {
				t.Fatalf("an invalid element was kept: %+v", got[0].Expect)
			}
			wantErrors(t, errs, tc.want)
		})
	}
}

// The one timing of an annotation probe feeds the runtime: Spec.Timing
// carries the periods by state of the extension.
func TestExtensionTimingReachesTheSpec(t *testing.T) {
	got, errs := parseOne(t, `"type":"readiness","periodSeconds":10,"unhealthyPeriodMilliseconds":300,"tcpSocket":{"port":8080}`, Options{})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	spec := runtime.Spec{Probe: &got[0].Probe, Extension: got[0].Extension()}
	if tm := spec.Timing(); tm.PeriodIn(runtime.StateUnhealthy) != 300*time.Millisecond || tm.PeriodIn(runtime.StateHealthy) != 10*time.Second ||
		tm.PeriodIn(runtime.StateTransition) != 10*time.Second {
		t.Fatalf("Spec.Timing() = %+v", tm)
	}
}
