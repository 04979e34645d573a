package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	probehttp "github.com/probed/probed/plugins/http"
	"github.com/probed/probed/plugins/sdk"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// Kind is the probe kind this plugin serves.
const Kind = "http-match"

// MaxBodyBytes is the most of the response body read for the body and json
// checks: 1 MiB. A body check sees only this prefix; a json check of a
// longer body fails.
const MaxBodyBytes = 1 << 20

// Params are the kind's parameters.
var Params = []sdk.Param{
	{Name: "path", Description: `request path and query, default "/"`},
	{Name: "scheme", Description: `"http" (default) or "https" (certificates are not verified, as for the kubelet's HTTPS probes)`},
	{Name: "status", Description: `accepted status codes: a code ("204"), a range ("200-299") or a comma-separated list of them; default "200-399", the kubelet's rule`},
	{Name: "header", Description: `"Name: regexp": some value of header Name must match the regular expression`},
	{Name: "body", Description: "a regular expression (RE2) the body must match (first 1 MiB)"},
	{Name: "json", Description: `"field.path=value": the body is JSON and the field at the dotted path (array indexes as numbers: items.0.name) equals value (strings unquoted; numbers, true, false, null as written)`},
}

// Handler prepares http-match probes.
type Handler struct{}

// statusRange is an inclusive range of status codes.
type statusRange struct{ lo, hi int }

type prober struct {
	client   *http.Client
	untimed  *http.Client // for a host on an injected clock
	scheme   string
	port     string
	path     string
	status   []statusRange
	statusIn string
	header   string
	headerRE *regexp.Regexp
	bodyRE   *regexp.Regexp
	jsonPath []string
	jsonWant string
}

// Prepare parses the parameters. It fails — every run of the probe errored
// — when the probe has no port (plugin.port), or a parameter is malformed:
// a path not starting with "/", an unknown scheme, a status that is not a
// code 100-599 or range of them, a header without "Name:", or a regular
// expression or json condition that does not parse.
func (Handler) Prepare(spec *runtime.Spec) (runtime.Prober, error) {
	if spec == nil || spec.Plugin == nil {
		return nil, errors.New("http-match: the probe has no plugin handler")
	}
	a := spec.Plugin
	port := a.Port.IntValue()
	if port <= 0 || port > 65535 {
		return nil, errors.New("http-match: the probe needs a port (plugin.port)")
	}
	p := &prober{port: strconv.Itoa(port), path: "/", scheme: "http", statusIn: "200-399", status: []statusRange{{200, 399}}}
	prm := a.Params
	if v, ok := prm["path"]; ok {
		if !strings.HasPrefix(v, "/") {
			return nil, fmt.Errorf("http-match: path %q must start with /", v)
		}
		p.path = v
	}
	if v, ok := prm["scheme"]; ok {
		switch strings.ToLower(v) {
		case "http", "https":
			p.scheme = strings.ToLower(v)
		default:
			return nil, fmt.Errorf("http-match: scheme %q: want http or https", v)
		}
	}
	if v, ok := prm["status"]; ok {
		r, err := parseStatus(v)
		if err != nil {
			return nil, err
		}
		p.status, p.statusIn = r, v
	}
	if v, ok := prm["header"]; ok {
		name, expr, found := strings.Cut(v, ":")
		name = strings.TrimSpace(name)
		if !found || name == "" {
			return nil, fmt.Errorf(`http-match: header %q: want "Name: regexp"`, v)
		}
		re, err := regexp.Compile(strings.TrimSpace(expr))
		if err != nil {
			return nil, fmt.Errorf("http-match: header regexp: %w", err)
		}
		p.header, p.headerRE = http.CanonicalHeaderKey(name), re
	}
	if v, ok := prm["body"]; ok {
		re, err := regexp.Compile(v)
		if err != nil {
			return nil, fmt.Errorf("http-match: body regexp: %w", err)
		}
		p.bodyRE = re
	}
	if v, ok := prm["json"]; ok {
		path, want, found := strings.Cut(v, "=")
		path = strings.TrimSpace(path)
		if !found || path == "" {
			return nil, fmt.Errorf(`http-match: json %q: want "field.path=value"`, v)
		}
		p.jsonPath, p.jsonWant = strings.Split(path, "."), want
	}
	p.client = newClient(spec.Timeout())
	// A host on an injected clock (a fake clock in its tests) sends no
	// deadline and cancels the call when its clock passes the deadline:
	// that client has no timer of its own (docs/plugins.md, Deadlines).
	p.untimed = newClient(0)
	return p, nil
}

// newClient returns the probe client; timeout bounds each request, its
// connect and its TLS handshake (zero: only the request's context does).
func newClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy: nil,
			// The request's context carries the agent's egress policy
			// (cluster mode): sdk.Dialer connects only where it allows,
			// redirects included.
			DialContext:         sdk.Dialer(timeout).DialContext,
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
			TLSHandshakeTimeout: timeout,
			DisableKeepAlives:   true,
			// A hostile target's headers cost at most 64 KiB per probe,
			// as with the built-in http handler.
			MaxResponseHeaderBytes: runtime.MaxResponseHeaderBytes,
		},
		// Redirects to the same host are followed (at most 10 requests);
		// a redirect elsewhere is not, and its 3xx answer is checked.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			if req.URL.Hostname() != via[0].URL.Hostname() {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
}

// parseStatus parses "200", "200-299" or a comma-separated list of them.
func parseStatus(s string) ([]statusRange, error) {
	var out []statusRange
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err1 != nil || err2 != nil || a < 100 || b > 599 || a > b {
			return nil, fmt.Errorf(`http-match: status %q: want a code 100-599, a range like "200-299", or a comma-separated list`, s)
		}
		out = append(out, statusRange{a, b})
	}
	return out, nil
}

// Probe sends one GET to the pod IP and checks the answer. Every outcome
// is a verdict (nil error): a request that fails (refused, timed out) or
// an answer that does not match is a Failure whose output says which check
// failed (never the body); otherwise Success. Details carry status_code.
func (p *prober) Probe(ctx context.Context, t runtime.Target) (runtime.Outcome, error) {
	u := url.URL{Scheme: p.scheme, Host: net.JoinHostPort(t.PodIP, p.port)}
	target := u.String() + p.path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fail(0, "invalid request URL: %v", err), nil
	}
	req.Header.Set("User-Agent", runtime.KubeProbeUserAgent)
	req.Header.Set("Accept", "*/*")
	client := p.client
	if runtime.OnInjectedClock(ctx) {
		client = p.untimed
	}
	resp, err := client.Do(req)
	if err != nil {
		// The error is the Cause: the SDK makes an attempt the plugin
		// could not make (its descriptors ran out) errored, not a Failure.
		// Its text goes through the built-in http handler's rule, which
		// withholds what the target sent under the egress policy.
		o := fail(0, "%v", probehttp.WithholdError(ctx, req.URL, err))
		o.Cause = err
		return o, nil
	}
	defer resp.Body.Close()
	code := resp.StatusCode
	if !p.statusOK(code) {
		return fail(code, "HTTP status %d, want %s", code, p.statusIn), nil
	}
	if p.headerRE != nil {
		vals := resp.Header.Values(p.header)
		ok := false
		for _, v := range vals {
			if p.headerRE.MatchString(v) {
				ok = true
				break
			}
		}
		if !ok {
			return fail(code, "header %s (%d values) does not match %q", p.header, len(vals), p.headerRE), nil
		}
	}
	if p.bodyRE != nil || p.jsonPath != nil {
		body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
		if err != nil {
			return fail(code, "reading the body: %v", egress.WithholdError(ctx, err)), nil
		}
		truncated := len(body) > MaxBodyBytes
		if truncated {
			body = body[:MaxBodyBytes]
		}
		if p.bodyRE != nil && !p.bodyRE.Match(body) {
			return fail(code, "body does not match %q", p.bodyRE), nil
		}
		if p.jsonPath != nil {
			if truncated {
				return fail(code, "json: the body is longer than %d bytes", MaxBodyBytes), nil
			}
			if msg := checkJSON(ctx, body, p.jsonPath, p.jsonWant); msg != "" {
				return fail(code, "json: %s", msg), nil
			}
		}
	}
	return runtime.Outcome{Result: runtime.Success, StatusCode: code, Details: map[string]string{"status_code": strconv.Itoa(code)}}, nil
}

func (p *prober) statusOK(code int) bool {
	for _, r := range p.status {
		if code >= r.lo && code <= r.hi {
			return true
		}
	}
	return false
}

func fail(code int, format string, args ...any) runtime.Outcome {
	o := runtime.Outcome{Result: runtime.Failure, StatusCode: code, Output: fmt.Sprintf(format, args...)}
	if code != 0 {
		o.Details = map[string]string{"status_code": strconv.Itoa(code)}
	}
	return o
}

// checkJSON returns "" when the field at path of the JSON document body
// equals want, else what is wrong; the value the target sent is withheld
// under the egress policy of ctx (egress.Withhold).
func checkJSON(ctx context.Context, body []byte, path []string, want string) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "the body is not JSON"
	}
	for i, key := range path {
		switch node := v.(type) {
		case map[string]any:
			next, ok := node[key]
			if !ok {
				return fmt.Sprintf("field %s not found", strings.Join(path[:i+1], "."))
			}
			v = next
		case []any:
			idx, err := strconv.Atoi(key)
			if err != nil || idx < 0 || idx >= len(node) {
				return fmt.Sprintf("field %s not found (array of %d)", strings.Join(path[:i+1], "."), len(node))
			}
			v = node[idx]
		default:
			return fmt.Sprintf("field %s not found (%s is not an object)", strings.Join(path[:i+1], "."), strings.Join(path[:i], "."))
		}
	}
	got, ok := scalar(v)
	if !ok {
		return fmt.Sprintf("field %s is an object or array, want %q", strings.Join(path, "."), want)
	}
	if got != want {
		if len(got) > 64 {
			got = got[:64] + "..."
		}
		return fmt.Sprintf("field %s is %s, want %q", strings.Join(path, "."), egress.Withhold(ctx, strconv.Quote(got)), want)
	}
	return ""
}

// scalar returns a JSON scalar as text: strings unquoted, numbers as
// written, true, false, null.
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	case nil:
		return "null", true
	}
	return "", false
}
