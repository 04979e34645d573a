// Package expect holds what an annotation probe (probed.io/probes) may
// expect of a target's answer beyond the kubelet's verdict:
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
	"regexp/syntax"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/util/jsonpath"

	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/tenant"
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
// bounded wherever it is kept, and every check's work is bounded per run
// (cluster mode: the annotation is a tenant's; runtime/tenant).
const (
	MaxStatusRanges  = 32
	MaxPatternBytes  = tenant.PatternBytes // bodyRegex, jsonPath.path
	MaxValueBytes    = tenant.ValueBytes   // jsonPath.value
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

// compileRegex compiles an RE2 expression of at most MaxPatternBytes whose
// program has at most tenant.RegexInstructions instructions: a match costs
// up to the program's size × the body's bytes (RE2 is linear in each), so
// that bound and the body's (runtime.MaxOutputBytes) bound every check's
// work. The size is estimated from the parse before anything is expanded
// (a 12-byte `[a-z]{1000}` expands to 1,003 instructions), then counted.
func compileRegex(s string) (*regexp.Regexp, error) {
	if len(s) > MaxPatternBytes {
		return nil, fmt.Errorf("at most %d bytes", MaxPatternBytes)
	}
	parsed, err := syntax.Parse(s, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("not an RE2 expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	const preLimit = 64 * tenant.RegexInstructions // bounds the expansion below
	n := progSize(parsed, preLimit) + 2            // and the program's fail and match
	if n <= preLimit {
		prog, err := syntax.Compile(parsed.Simplify())
		if err != nil {
			return nil, fmt.Errorf("not an RE2 expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
		n = len(prog.Inst)
	}
	if n > tenant.RegexInstructions {
		more := ""
		if n > preLimit {
			more = "over "
		}
		return nil, fmt.Errorf("compiles to %s%d instructions, at most %d: a match costs up to instructions × bytes of body "+
			"(at most %d bytes are read); write fewer or shorter counted repeats ({n}) and alternatives", more, min(n, preLimit), tenant.RegexInstructions, runtimeOutputBytes)
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("not an RE2 expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return re, nil
}

// runtimeOutputBytes is the most of a body a check reads
// (runtime.MaxOutputBytes, the kubelet's 10 KiB).
const runtimeOutputBytes = tenant.OutputBytes

// progSize estimates, from above, the instructions re compiles to,
// counting no further than limit+1 (so that a nest of counted repeats is
// never multiplied out).
func progSize(re *syntax.Regexp, limit int) int {
	add := func(a, b int) int { return min(a+b, limit+1) }
	switch re.Op {
	case syntax.OpLiteral:
		return min(len(re.Rune), limit+1)
	case syntax.OpCapture, syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		return add(2, progSize(re.Sub[0], limit))
	case syntax.OpRepeat:
		sub := progSize(re.Sub[0], limit)
		n := re.Max
		if n < 0 {
			n = re.Min + 1
		}
		if sub > 0 && n > (limit+1)/sub {
			return limit + 1
		}
		return add(n*(sub+1), 1)
	case syntax.OpConcat, syntax.OpAlternate:
		total := 0
		for _, sub := range re.Sub {
			total = add(total, add(progSize(sub, limit), 1))
		}
		return total
	}
	return 1
}

// compileJSONPath parses a JSONPath expression of at most MaxPatternBytes,
// with kubectl's braces or without, and allows only what costs at most
// one visit of each value of the body: one expression from the root of
// fields (.a, ['a']), indexes and slices ([0], [-1], [1:3], [*]) and
// wildcards (.*). Recursive descent (..) visits every value once per
// level and its results are subtrees of one another: `{..[0]}` on 10 KB
// of nested arrays took 4.7 s of a core and 100 MiB. Filters run a path
// per element, unions repeat values, range/end and several expressions
// repeat the whole evaluation; none is needed to compare one value.
func compileJSONPath(s string) (*jsonpath.JSONPath, error) {
	if len(s) > MaxPatternBytes {
		return nil, fmt.Errorf("at most %d bytes", MaxPatternBytes)
	}
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("required: a JSONPath expression such as {.status}")
	}
	parsed, err := jsonpath.Parse("expect", braced(s))
	if err != nil {
		return nil, fmt.Errorf("not a JSONPath expression: %v", err)
	}
	if err := boundedPath(parsed.Root); err != nil {
		return nil, err
	}
	j := jsonpath.New("expect").AllowMissingKeys(false)
	if err := j.Parse(braced(s)); err != nil {
		return nil, fmt.Errorf("not a JSONPath expression: %v", err)
	}
	return j, nil
}

// boundedPath refuses what compileJSONPath does not allow in a parsed
// template.
func boundedPath(root *jsonpath.ListNode) error {
	const use = "; name the value by its path from the root, such as {.status.phase} or {.checks[0].status}"
	for _, expr := range root.Nodes {
		list, ok := expr.(*jsonpath.ListNode)
		if !ok {
			continue
		}
		if err := boundedSteps(list, use); err != nil {
			return err
		}
	}
	if len(root.Nodes) != 1 {
		return errors.New("one {...} expression and nothing around it" + use)
	}
	if _, ok := root.Nodes[0].(*jsonpath.ListNode); !ok {
		return errors.New("literal text is not a path" + use)
	}
	return nil
}

// boundedSteps refuses the steps of one expression that compileJSONPath
// does not allow.
func boundedSteps(expr *jsonpath.ListNode, use string) error {
	for _, n := range expr.Nodes {
		switch n := n.(type) {
		case *jsonpath.FieldNode, *jsonpath.ArrayNode, *jsonpath.WildcardNode:
		case *jsonpath.RecursiveNode:
			return errors.New("recursive descent (..) is not allowed: its results, and its cost, grow with the square of the body" + use)
		case *jsonpath.FilterNode:
			return errors.New("filters ([?(...)]) are not allowed: each runs a path per element" + use)
		case *jsonpath.UnionNode:
			return errors.New("unions ([a,b]) are not allowed: they repeat values" + use)
		case *jsonpath.IdentifierNode:
			return fmt.Errorf("%s is not allowed: it repeats the evaluation%s", n.Name, use)
		default:
			return fmt.Errorf("%s is not allowed%s", n.Type(), use)
		}
	}
	return nil
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
	if nestedDeeper(body, tenant.JSONDepth) {
		return fmt.Sprintf("HTTP probe failed: expect.jsonPath %s: the body nests deeper than %d levels", b.jsonPath, tenant.JSONDepth)
	}
	var data any
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber() // numbers print as written
	if err := dec.Decode(&data); err != nil {
		return "HTTP probe failed: expect.jsonPath " + b.jsonPath + ": the body is not JSON"
	}
	// The path visits each value of the body at most once (compileJSONPath),
	// and what it prints is read only up to one byte past the expected
	// value: n results print at least n-1 separating spaces, so more than
	// len(value)+1 of them cannot be equal and are not printed.
	b.mu.Lock()
	results, err := b.jp.FindResults(data)
	var out cappedBuffer
	out.max = len(b.value) + 1
	if err == nil && len(results) == 1 && len(results[0]) <= len(b.value)+1 {
		if perr := b.jp.PrintResults(&out, results[0]); perr != nil && perr != errCapped {
			err = perr
		}
	} else if err == nil {
		out.over = true
	}
	b.mu.Unlock()
	if err != nil {
		return "HTTP probe failed: expect.jsonPath " + b.jsonPath + ": not found in the body"
	}
	if out.over || out.String() != b.value {
		return fmt.Sprintf("HTTP probe failed: expect.jsonPath %s is not %q", b.jsonPath, b.value)
	}
	return ""
}

// nestedDeeper reports whether the JSON text s nests arrays and objects
// deeper than limit (brackets inside strings do not count), without
// decoding it: decoding recurses once per level.
func nestedDeeper(s string, limit int) bool {
	depth, inString, escaped := 0, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > limit {
				return true
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false
}

// cappedBuffer keeps at most max bytes and fails the write that would go
// past them (over is then set).
type cappedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

var errCapped = errors.New("expect: the printed value is longer than expected")

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.Len()+len(p) > c.max {
		c.over = true
		return 0, errCapped
	}
	return c.Buffer.Write(p)
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

// cut bounds a value quoted in an error (bound.Cut: both ends, at
// character boundaries).
func cut(s string) string { return bound.Cut(s, 64) }
