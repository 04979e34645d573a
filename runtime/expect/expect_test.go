package expect

import (
	"encoding/json"
	"regexp/syntax"
	goruntime "runtime"
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

// A bodyRegex's work is bounded by its compiled program (instructions ×
// bytes of body, RE2 being linear in each): a pattern over
// tenant.RegexInstructions is refused, with its size, however short it is
// written; nested counted repeats are refused without being multiplied out.
// Real patterns fit.
func TestRegexBoundedByItsProgram(t *testing.T) {
	for _, p := range []string{
		`[a-z]{1000}b`,          // 12 bytes, 1,003 instructions: 154 ms per 10 KiB body
		`(?:[a-z]{100}){10}b`,   // the same, nested
		`(?:(?:a{10}){10}){10}`, // 1,000 repeats, never expanded
		`\w{64}x`,
		`(?:ab|cd|ef|gh){15}`,
	} {
		_, err := compileRegex(p)
		if err == nil || !strings.Contains(err.Error(), "instructions, at most 50") {
			t.Errorf("compileRegex(%q) = %v, want the program-size refusal", p, err)
		}
	}
	for _, p := range []string{
		`"status"\s*:\s*"(UP|ok|healthy)"`,
		`(?i)"status"\s*:\s*"(up|ok|healthy)"`,
		`^OK$`,
		`(?s)^\{.*"ready":\s*true.*\}$`,
		`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`,
		`(?i)database\s+(connected|ready)|cache\s+(warm|ready)`,
	} {
		if _, err := compileRegex(p); err != nil {
			t.Errorf("compileRegex(%q): %v", p, err)
		}
	}
	errs := Validate(&Expect{BodyRegex: `[a-z]{1000}b`}, true, false, time.Second)
	if len(errs) != 1 || errs[0].Field != "bodyRegex" || !strings.Contains(errs[0].Detail, "compiles to 1003 instructions, at most 50") {
		t.Fatalf("Validate: %v", errs)
	}
}

// progSize never counts fewer instructions than the compiler makes (it is
// the bound checked before anything is expanded).
func TestProgSizeIsAnUpperBound(t *testing.T) {
	for _, p := range []string{`a`, `abc`, `a*`, `(a|bc)+d?`, `[a-z]{8}`, `x{2,5}`, `(?:ab){3,}`, `^a$`, `\bok\b`, `(?i)up`, `((a*)*)*`, `(?s).*"ready".*`} {
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		if est := progSize(re, 1<<20) + 2; est < len(prog.Inst) {
			t.Errorf("progSize(%q) = %d, compiled %d", p, est, len(prog.Inst))
		}
	}
}

// jsonPath allows what visits each value of the body at most once, and
// refuses the rest at admission, each refusal saying why.
func TestJSONPathRefusesUnboundedForms(t *testing.T) {
	for path, why := range map[string]string{
		"{..[0]}":                  "recursive descent",
		"{..[0]..[0]}":             "recursive descent",
		".a..b":                    "recursive descent",
		"{.a[?(@.x==1)]}":          "filters",
		"{.a[0,1]}":                "unions",
		"{range .a[*]}{.b}{end}":   "range is not allowed",
		"{.a}{.b}":                 "one {...} expression",
		"{.a} x":                   "one {...} expression",
		"x{.a}":                    "not a JSONPath expression",
		`{"x"}`:                    "is not allowed",
		"{.a[0,0,0,0][0,0,0,0]}":   "unions",
		"{.items[?(@..x)].status}": "filters",
	} {
		_, err := compileJSONPath(path)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("compileJSONPath(%q) = %v, want %q", path, err, why)
		}
	}
	for _, path := range []string{"{.a}", ".a.b", "{$.a}", "{$}", "{.a[0]}", "{.a[-1]}", "{.a[1:3]}", "{.a[*].b}", "{.*}", "{.a['b.c']}"} {
		if _, err := compileJSONPath(path); err != nil {
			t.Errorf("compileJSONPath(%q): %v", path, err)
		}
	}
}

// The body, 10 KB of nested arrays, under every path jsonPath
// allows at its worst (a wildcard at each level, the whole body printed):
// one check allocates a bounded amount (the decoded body and one value per
// node, never a result per node per level), and a path that prints more
// than the expected value stops printing there.
func TestJSONPathCheckMemoryIsBoundedOnHostileBodies(t *testing.T) {
	nested := strings.Repeat("[", 2500) + strings.Repeat("]", 2500)
	flat := "[" + strings.Repeat(`"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",`, 230) + `"a"]`
	stars := "{" + strings.Repeat(".*", 400) + "}"
	for _, c := range []struct{ body, path string }{
		{nested, stars},
		{nested, "{$}"},
		{nested, "{" + strings.Repeat("[0]", 300) + "}"},
		{flat, "{[*].*}"}, // every byte of every string
		{flat, stars},
	} {
		b := mustCompile(t, &Expect{JSONPath: &JSONPath{Path: c.path, Value: "x"}})
		var before, after goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		got := b.Check(c.body)
		goruntime.ReadMemStats(&after)
		if got == "" {
			t.Errorf("path %.20s on a hostile body: Check passed", c.path)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
			t.Errorf("path %.20s on a %d-byte body allocated %d KiB, want at most 4 MiB", c.path, len(c.body), alloc>>10)
		}
	}
}

// A JSON body nested deeper than tenant.JSONDepth is a Failure before it
// is decoded (decoding recurses once per level: 10 KiB of "[" grew the
// stack of the goroutine running the check to megabytes); brackets inside
// strings do not count.
func TestJSONPathBodyDepthIsBounded(t *testing.T) {
	b := mustCompile(t, &Expect{JSONPath: &JSONPath{Path: "{.*}", Value: "x"}})
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	if got := b.Check(deep); got != "HTTP probe failed: expect.jsonPath {.*}: the body nests deeper than 100 levels" {
		t.Errorf("5,000 levels: %q", got)
	}
	at := strings.Repeat("[", 99) + `{"a":"x"}` + strings.Repeat("]", 99)
	if got := mustCompile(t, &Expect{JSONPath: &JSONPath{Path: "{" + strings.Repeat("[0]", 99) + ".a}", Value: "x"}}).Check(at); got != "" {
		t.Errorf("100 levels: %q", got)
	}
	inString := `{"a":"` + strings.Repeat("[", 500) + `\"` + strings.Repeat("{", 500) + `"}`
	if got := mustCompile(t, &Expect{JSONPath: &JSONPath{Path: "{.a}", Value: JSONScalar(strings.Repeat("[", 500) + `"` + strings.Repeat("{", 500))}}).Check(inString); strings.Contains(got, "nests deeper") {
		t.Errorf("brackets in a string counted: %q", got)
	}
}
