// Package expect holds what an annotation probe (probed.io/probes) may
// expect of a target's answer beyond the kubelet's verdict (issue 22 §2):
// the status codes, a regular expression or a JSONPath value of the body,
// a latency bound and a certificate that stays valid long enough. Spec
// probes never carry it: v1.Probe has no such field, and the annotation's
// `httpGet.expect` and `tcpSocket.expect` are decoded beside the v1 handler
// (manager/customprobe), never into it.
//
// The package is the one place the checks are written: Compile prepares
// the body checks once per probe (RE2, client-go's JSONPath), Checks.HTTP
// is what the httpGet handler applies to a response, and Latency and
// Certificate are what the runtime applies to any attempt that carries
// them (a latency measured on the runtime's clock, a certificate's
// NotAfter reported by the handler). A failed check's text names the
// field and the measured value — the status, the latency, the days left —
// and never the body or a value read from it (BR-22): the body is read up
// to runtime.MaxOutputBytes (10 KiB, the kubelet's limit) and is neither
// logged, stored nor put in an Event.
package expect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/util/jsonpath"
)

// Expect is the `expect` object of an annotation probe's httpGet or
// tcpSocket handler. The zero value expects nothing beyond the kubelet's
// verdict. Status, BodyRegex and JSONPath apply to httpGet only.
type Expect struct {
	// Status lists the status codes that count as success: single codes
	// and ranges (JSON: 200 or "200-299"); empty: the kubelet's 200–399
	// (H6: 2xx Success, 3xx Warning).
	Status []StatusRange `json:"status,omitempty"`
	// BodyRegex is an RE2 expression (Go's regexp syntax) the body must
	// match, anchored only where it says so (^, $, \A, \z).
	BodyRegex string `json:"bodyRegex,omitempty"`
	// JSONPath names a value of the JSON body (client-go's JSONPath, as
	// kubectl -o jsonpath: "{.status}" or ".status") and the text it must
	// print as.
	JSONPath *JSONPath `json:"jsonPath,omitempty"`
	// MaxLatencyMilliseconds bounds how long an attempt may take, in
	// milliseconds, from the handler's start to its verdict on the
	// runtime's clock; 0: no bound.
	MaxLatencyMilliseconds int32 `json:"maxLatencyMilliseconds,omitempty"`
	// CertificateExpiresAfterDays is how many days the certificate the
	// target presents (HTTPS, or a TLS handshake of a tcpSocket probe)
	// must stay valid from now; 0: not checked. The certificate itself is
	// never verified (H3: the kubelet's probes skip verification).
	CertificateExpiresAfterDays int32 `json:"certificateExpiresAfterDays,omitempty"`
}

// JSONPath is a JSONPath expression and the value it must print as.
type JSONPath struct {
	// Path is the expression, with or without kubectl's braces.
	Path string `json:"path"`
	// Value is the expected text; in the annotation a JSON string, number
	// or boolean (true is "true", 3 is "3"). Several results print
	// separated by single spaces, as kubectl prints them.
	Value JSONScalar `json:"value"`
}

// JSONScalar is a JSON string, number or boolean kept as its text: "ok",
// 3 and true decode to "ok", "3" and "true".
type JSONScalar string

// UnmarshalJSON accepts a string, a number or a boolean.
func (s *JSONScalar) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '"':
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = JSONScalar(v)
		return nil
	case string(b) == "true" || string(b) == "false":
		*s = JSONScalar(b)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("must be a string, a number or a boolean")
	}
	*s = JSONScalar(n.String())
	return nil
}

// StatusRange is an inclusive range of HTTP status codes; a single code
// has From == To.
type StatusRange struct{ From, To int }

// String is "200" or "200-299".
func (r StatusRange) String() string {
	if r.From == r.To {
		return strconv.Itoa(r.From)
	}
	return strconv.Itoa(r.From) + "-" + strconv.Itoa(r.To)
}

// MarshalJSON writes a single code as a number and a range as "lo-hi".
func (r StatusRange) MarshalJSON() ([]byte, error) {
	if r.From == r.To {
		return []byte(strconv.Itoa(r.From)), nil
	}
	return json.Marshal(r.String())
}

// UnmarshalJSON reads a number (one code) or a string: "404" or
// "200-299". Validate checks the bounds.
func (r *StatusRange) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		lo, hi, isRange := strings.Cut(s, "-")
		from, err1 := strconv.Atoi(strings.TrimSpace(lo))
		to, err2 := from, error(nil)
		if isRange {
			to, err2 = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err1 != nil || err2 != nil {
			return fmt.Errorf("%q is not a status code or a range such as \"200-299\"", s)
		}
		*r = StatusRange{from, to}
		return nil
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return fmt.Errorf("%s is not a status code or a range such as \"200-299\"", b)
	}
	*r = StatusRange{n, n}
	return nil
}

// Bounds of what an annotation may ask: every string from a pod is
// bounded wherever it is kept (cluster mode: the annotation is a tenant's).
const (
	MaxStatusRanges  = 32
	MaxPatternBytes  = 1024 // bodyRegex, jsonPath.path
	MaxValueBytes    = 256  // jsonPath.value
	MaxDays          = 3650
	MinStatus        = 100
	MaxStatus        = 599
	DefaultStatusMin = 200 // the kubelet's success range, H6
	DefaultStatusMax = 399
)

// FieldError is a validation error of one field of Expect, named as in
// the annotation ("bodyRegex", "status[1]", "jsonPath.path").
type FieldError struct {
	Field  string
	Value  any
	Detail string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Detail }

// Validate checks e for a handler: http says whether it is httpGet's
// (Status, BodyRegex and JSONPath are httpGet's only), https whether its
// scheme is HTTPS (CertificateExpiresAfterDays needs TLS there), and
// timeout is the probe's timeout (MaxLatencyMilliseconds must be within
// it: an attempt is cut at its timeout). Each error names its field.
func Validate(e *Expect, http, https bool, timeout time.Duration) []FieldError {
	var errs []FieldError
	add := func(field string, v any, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Value: v, Detail: fmt.Sprintf(format, args...)})
	}
	if !http {
		if len(e.Status) > 0 {
			add("status", e.Status, "only for httpGet")
		}
		if e.BodyRegex != "" {
			add("bodyRegex", e.BodyRegex, "only for httpGet")
		}
		if e.JSONPath != nil {
			add("jsonPath", e.JSONPath.Path, "only for httpGet")
		}
	}
	if len(e.Status) > MaxStatusRanges {
		add("status", len(e.Status), "at most %d codes and ranges", MaxStatusRanges)
	}
	for i, r := range e.Status {
		f := fmt.Sprintf("status[%d]", i)
		switch {
		case r.From < MinStatus || r.To > MaxStatus:
			add(f, r.String(), "status codes are %d-%d", MinStatus, MaxStatus)
		case r.From > r.To:
			add(f, r.String(), "a range goes from the lower code to the higher")
		}
	}
	if e.BodyRegex != "" {
		if _, err := compileRegex(e.BodyRegex); err != nil {
			add("bodyRegex", cut(e.BodyRegex), "%v", err)
		}
	}
	if j := e.JSONPath; j != nil {
		if _, err := compileJSONPath(j.Path); err != nil {
			add("jsonPath.path", cut(j.Path), "%v", err)
		}
		if len(j.Value) > MaxValueBytes {
			add("jsonPath.value", cut(string(j.Value)), "at most %d bytes", MaxValueBytes)
		}
	}
	if ms := e.MaxLatencyMilliseconds; ms < 0 || (ms > 0 && time.Duration(ms)*time.Millisecond > timeout) {
		add("maxLatencyMilliseconds", ms, "must be between 1 and the probe's timeout (%s): an attempt ends at its timeout", timeout)
	}
	if d := e.CertificateExpiresAfterDays; d < 0 || d > MaxDays {
		add("certificateExpiresAfterDays", d, "must be between 1 and %d", MaxDays)
	} else if d > 0 && http && !https {
		add("certificateExpiresAfterDays", d, "needs scheme HTTPS: a plain HTTP target presents no certificate")
	}
	return errs
}

// compileRegex compiles an RE2 expression of at most MaxPatternBytes.
func compileRegex(s string) (*regexp.Regexp, error) {
	if len(s) > MaxPatternBytes {
		return nil, fmt.Errorf("at most %d bytes", MaxPatternBytes)
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("not an RE2 expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return re, nil
}

// compileJSONPath parses a JSONPath expression of at most MaxPatternBytes,
// with kubectl's braces or without.
func compileJSONPath(s string) (*jsonpath.JSONPath, error) {
	if len(s) > MaxPatternBytes {
		return nil, fmt.Errorf("at most %d bytes", MaxPatternBytes)
	}
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("required: a JSONPath expression such as {.status}")
	}
	j := jsonpath.New("expect").AllowMissingKeys(false)
	if err := j.Parse(braced(s)); err != nil {
		return nil, fmt.Errorf("not a JSONPath expression: %v", err)
	}
	return j, nil
}

// braced is kubectl's relaxed form: ".status" is "{.status}".
func braced(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "{") {
		return s
	}
	return "{" + s + "}"
}

// Body is a compiled Expect: the checks httpGet applies to a response.
// It is safe for concurrent use.
type Body struct {
	status   []StatusRange // nil: the kubelet's 200–399
	re       *regexp.Regexp
	jsonPath string // as written, for the texts
	value    string
	mu       sync.Mutex // client-go's JSONPath keeps state while it runs
	jp       *jsonpath.JSONPath
}

// Compile prepares e's httpGet checks. It fails as Validate would on an
// expression that does not compile.
func Compile(e *Expect) (*Body, error) {
	b := &Body{status: e.Status}
	var err error
	if e.BodyRegex != "" {
		if b.re, err = compileRegex(e.BodyRegex); err != nil {
			return nil, fmt.Errorf("expect.bodyRegex: %w", err)
		}
	}
	if j := e.JSONPath; j != nil {
		if b.jp, err = compileJSONPath(j.Path); err != nil {
			return nil, fmt.Errorf("expect.jsonPath.path: %w", err)
		}
		b.jsonPath, b.value = braced(j.Path), string(j.Value)
	}
	return b, nil
}

// ExplicitStatus reports whether the probe lists its own status codes:
// then a listed code is a Success whatever its class (no 3xx Warning).
func (b *Body) ExplicitStatus() bool { return len(b.status) > 0 }

// WantsBody reports whether a check reads the body.
func (b *Body) WantsBody() bool { return b.re != nil || b.jp != nil }

// Status checks a response's status code: "" when it is expected, else
// the failure's text with the code and what was expected.
func (b *Body) Status(code int) string {
	if len(b.status) == 0 {
		if code >= DefaultStatusMin && code <= DefaultStatusMax {
			return ""
		}
		return fmt.Sprintf("HTTP probe failed with statuscode: %d (expect.status: %d-%d)", code, DefaultStatusMin, DefaultStatusMax)
	}
	for _, r := range b.status {
		if code >= r.From && code <= r.To {
			return ""
		}
	}
	want := make([]string, len(b.status))
	for i, r := range b.status {
		want[i] = r.String()
	}
	return fmt.Sprintf("HTTP probe failed with statuscode: %d (expect.status: %s)", code, strings.Join(want, ", "))
}

// Check checks a body (at most runtime.MaxOutputBytes of it): "" when
// every body check holds, else the failure's text, which names the check
// and never quotes the body.
func (b *Body) Check(body string) string {
	if b.re != nil && !b.re.MatchString(body) {
		return "HTTP probe failed: the body does not match expect.bodyRegex"
	}
	if b.jp == nil {
		return ""
	}
	var data any
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber() // numbers print as written
	if err := dec.Decode(&data); err != nil {
		return "HTTP probe failed: expect.jsonPath " + b.jsonPath + ": the body is not JSON"
	}
	var out bytes.Buffer
	b.mu.Lock()
	err := b.jp.Execute(&out, data)
	b.mu.Unlock()
	if err != nil {
		return "HTTP probe failed: expect.jsonPath " + b.jsonPath + ": not found in the body"
	}
	if out.String() != b.value {
		return fmt.Sprintf("HTTP probe failed: expect.jsonPath %s is not %q", b.jsonPath, b.value)
	}
	return ""
}

// Latency checks an attempt's duration against MaxLatencyMilliseconds: ""
// when it holds (or e is nil or sets no bound), else the failure's text
// with the measured latency.
func Latency(e *Expect, took time.Duration) string {
	if e == nil || e.MaxLatencyMilliseconds <= 0 {
		return ""
	}
	max := time.Duration(e.MaxLatencyMilliseconds) * time.Millisecond
	if took <= max {
		return ""
	}
	return fmt.Sprintf("probe too slow: the attempt took %s, over expect.maxLatencyMilliseconds (%dms)", took.Round(time.Millisecond), e.MaxLatencyMilliseconds)
}

// Certificate checks the NotAfter of the certificate the target presented
// against CertificateExpiresAfterDays at now: "" when it holds (or e is
// nil or does not ask), else the failure's text with the days left (a
// zero notAfter: the target presented none).
func Certificate(e *Expect, notAfter, now time.Time) string {
	if e == nil || e.CertificateExpiresAfterDays <= 0 {
		return ""
	}
	if notAfter.IsZero() {
		return "certificate check failed: the target presented no TLS certificate (expect.certificateExpiresAfterDays)"
	}
	want := time.Duration(e.CertificateExpiresAfterDays) * 24 * time.Hour
	left := notAfter.Sub(now)
	if left >= want {
		return ""
	}
	days := int64(left / (24 * time.Hour))
	if left < 0 {
		return fmt.Sprintf("certificate check failed: the certificate expired %d days ago (%s), expect.certificateExpiresAfterDays is %d",
			-days, notAfter.UTC().Format(time.RFC3339), e.CertificateExpiresAfterDays)
	}
	return fmt.Sprintf("certificate check failed: the certificate expires in %d days (%s), under expect.certificateExpiresAfterDays (%d)",
		days, notAfter.UTC().Format(time.RFC3339), e.CertificateExpiresAfterDays)
}

// WantsCertificate reports whether e asks for the target's certificate.
func WantsCertificate(e *Expect) bool { return e != nil && e.CertificateExpiresAfterDays > 0 }

// cut bounds a value quoted in an error.
func cut(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
