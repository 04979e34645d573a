package expect

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustCompile(t *testing.T, e *Expect) *Body {
	t.Helper()
	b, err := Compile(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Status: listed codes and ranges, else the kubelet's 200–399 (H6); the
// failure names the code and what was expected.
func TestStatus(t *testing.T) {
	def := mustCompile(t, &Expect{})
	for code, ok := range map[int]bool{200: true, 299: true, 302: true, 399: true, 199: false, 404: false, 503: false} {
		if got := def.Status(code); (got == "") != ok {
			t.Errorf("default Status(%d) = %q, want ok %v", code, got, ok)
		}
	}
	if got := def.Status(503); got != "HTTP probe failed with statuscode: 503 (expect.status: 200-399)" {
		t.Errorf("default failure text %q", got)
	}
	b := mustCompile(t, &Expect{Status: []StatusRange{{200, 204}, {404, 404}}})
	for code, ok := range map[int]bool{200: true, 204: true, 205: false, 302: false, 404: true, 500: false} {
		if got := b.Status(code); (got == "") != ok {
			t.Errorf("Status(%d) = %q, want ok %v", code, got, ok)
		}
	}
	if got := b.Status(500); got != "HTTP probe failed with statuscode: 500 (expect.status: 200-204, 404)" {
		t.Errorf("failure text %q", got)
	}
	if !b.ExplicitStatus() || def.ExplicitStatus() {
		t.Error("ExplicitStatus wrong")
	}
}

// StatusRange's JSON: a number or "lo-hi", both ways.
func TestStatusRangeJSON(t *testing.T) {
	var got []StatusRange
	if err := json.Unmarshal([]byte(`[200, "300-399", " 404 "]`), &got); err != nil {
		t.Fatal(err)
	}
	want := []StatusRange{{200, 200}, {300, 399}, {404, 404}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("decoded %v, want %v", got, want)
		}
	}
	out, _ := json.Marshal(got)
	if string(out) != `[200,"300-399",404]` {
		t.Fatalf("encoded %s", out)
	}
	for _, bad := range []string{`["2xx"]`, `[true]`, `["200-"]`, `[1.5]`} {
		if err := json.Unmarshal([]byte(bad), &got); err == nil {
			t.Errorf("%s decoded without an error", bad)
		}
	}
}

// Check: the body regex (RE2, unanchored unless written so) and the
// JSONPath value; the failure texts name the check, never the body.
func TestCheckBody(t *testing.T) {
	const secret = "s3cr3t-token-in-the-body"
	cases := []struct {
		name string
		e    Expect
		body string
		want string // "" ok, else a substring of the failure
	}{
		{"regex unanchored", Expect{BodyRegex: "ok"}, `{"status":"ok"}`, ""},
		{"regex anchored", Expect{BodyRegex: "^ok$"}, `not ok ` + secret, "the body does not match expect.bodyRegex"},
		{"jsonPath string", Expect{JSONPath: &JSONPath{Path: "{.status}", Value: "up"}}, `{"status":"up"}`, ""},
		{"jsonPath relaxed", Expect{JSONPath: &JSONPath{Path: ".checks[0].ok", Value: "true"}}, `{"checks":[{"ok":true}]}`, ""},
		{"jsonPath number as written", Expect{JSONPath: &JSONPath{Path: "{.count}", Value: "1000000"}}, `{"count":1000000}`, ""},
		{"jsonPath differs", Expect{JSONPath: &JSONPath{Path: "{.status}", Value: "up"}}, `{"status":"` + secret + `"}`, `expect.jsonPath {.status} is not "up"`},
		{"jsonPath missing", Expect{JSONPath: &JSONPath{Path: "{.status}", Value: "up"}}, `{"state":"up"}`, "expect.jsonPath {.status}: not found in the body"},
		{"not JSON", Expect{JSONPath: &JSONPath{Path: "{.status}", Value: "up"}}, `<html>` + secret, "expect.jsonPath {.status}: the body is not JSON"},
		{"both, regex first", Expect{BodyRegex: "^{", JSONPath: &JSONPath{Path: "{.a}", Value: "1"}}, `x` + secret, "does not match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := mustCompile(t, &tc.e)
			if !b.WantsBody() {
				t.Fatal("WantsBody false with a body check")
			}
			got := b.Check(tc.body)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("Check = %q, want %q", got, tc.want)
			}
			if strings.Contains(got, secret) {
				t.Fatalf("the failure text quotes the body: %q (BR-22)", got)
			}
		})
	}
}

// Latency: a bound in milliseconds; the failure names the measured time.
func TestLatency(t *testing.T) {
	e := &Expect{MaxLatencyMilliseconds: 100}
	if got := Latency(e, 100*time.Millisecond); got != "" {
		t.Errorf("at the bound: %q", got)
	}
	if got := Latency(e, 312*time.Millisecond+400*time.Microsecond); got != "probe too slow: the attempt took 312ms, over expect.maxLatencyMilliseconds (100ms)" {
		t.Errorf("over the bound: %q", got)
	}
	if Latency(nil, time.Hour) != "" || Latency(&Expect{}, time.Hour) != "" {
		t.Error("no bound set, yet a failure")
	}
}

// Certificate: the days left at now against certificateExpiresAfterDays;
// the failure names the days left and the expiry.
func TestCertificate(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	e := &Expect{CertificateExpiresAfterDays: 30}
	if got := Certificate(e, now.Add(31*24*time.Hour), now); got != "" {
		t.Errorf("31 days left: %q", got)
	}
	if got := Certificate(e, now.Add(12*24*time.Hour+time.Hour), now); got != "certificate check failed: the certificate expires in 12 days (2027-01-13T01:00:00Z), under expect.certificateExpiresAfterDays (30)" {
		t.Errorf("12 days left: %q", got)
	}
	if got := Certificate(e, now.Add(-48*time.Hour), now); !strings.Contains(got, "expired 2 days ago") {
		t.Errorf("expired: %q", got)
	}
	if got := Certificate(e, time.Time{}, now); !strings.Contains(got, "presented no TLS certificate") {
		t.Errorf("no certificate: %q", got)
	}
	if Certificate(nil, time.Time{}, now) != "" || WantsCertificate(&Expect{}) || !WantsCertificate(e) {
		t.Error("a check without the field")
	}
}

// Validate: every rule names its field; tcpSocket may not carry body
// checks.
func TestValidate(t *testing.T) {
	e := &Expect{Status: []StatusRange{{99, 200}}, BodyRegex: "a{2000}", JSONPath: &JSONPath{Path: "{", Value: JSONScalar(strings.Repeat("x", 300))},
		MaxLatencyMilliseconds: 2000, CertificateExpiresAfterDays: 5000}
	var fields []string
	for _, fe := range Validate(e, true, true, time.Second) {
		fields = append(fields, fe.Field)
	}
	want := "status[0] bodyRegex jsonPath.path jsonPath.value maxLatencyMilliseconds certificateExpiresAfterDays"
	if strings.Join(fields, " ") != want {
		t.Fatalf("fields %v, want %s", fields, want)
	}
	fields = nil
	for _, fe := range Validate(&Expect{BodyRegex: "x", Status: []StatusRange{{200, 200}}}, false, false, time.Second) {
		fields = append(fields, fe.Field+": "+fe.Detail)
	}
	if strings.Join(fields, "; ") != "status: only for httpGet; bodyRegex: only for httpGet" {
		t.Fatalf("tcpSocket: %v", fields)
	}
	if errs := Validate(&Expect{CertificateExpiresAfterDays: 7, MaxLatencyMilliseconds: 1000}, false, false, time.Second); len(errs) != 0 {
		t.Fatalf("tcpSocket latency and certificate: %v", errs)
	}
}
