package redact_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/redact"
)

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/x?token=abc", "/x?token=REDACTED"},
		{"/x?access_token=abc&page=2", "/x?access_token=REDACTED&page=REDACTED"},
		{"/x?abc", "/x?REDACTED"},
		{"/healthz", "/healthz"},
		{"https://user:s3cret@db.example:5432/x", "https://user:REDACTED@db.example:5432/x"},
		{"https://tokenonly@host/x", "https://tokenonly@host/x"},
		{"http://h/api;session=abc/ok?x=1#access_token=def", "http://h/api;session=REDACTED/ok?x=REDACTED#access_token=REDACTED"},
		{"/v1/key=abc/status", "/v1/key=REDACTED/status"},
		{"/x?", "/x?"},
	} {
		if got := redact.URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
		if again := redact.URL(redact.URL(c.in)); again != c.want {
			t.Errorf("URL twice (%q) = %q, want %q", c.in, again, c.want)
		}
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		// Go's net/http error text, with the URL of a probe path.
		{`Get "http://10.0.0.1:8080/x?token=abc&v=1": dial tcp 10.0.0.1:8080: connect: connection refused`,
			`Get "http://10.0.0.1:8080/x?token=REDACTED&v=REDACTED": dial tcp 10.0.0.1:8080: connect: connection refused`},
		{"GET /x?access_token=abc failed", "GET /x?access_token=REDACTED failed"},
		{"curl -H 'Authorization: Bearer abc.def' https://u:pw@h/", "curl -H 'Authorization: REDACTED' https://u:REDACTED@h/"},
		{"header: Authorization: Bearer abc.def", "header: Authorization: REDACTED"},
		{"sent Bearer eyJhbGciOi.x-y_z", "sent Bearer REDACTED"},
		{"Basic dXNlcjpwYXNz sent", "Basic REDACTED sent"},
		{"basic checks passed", "basic checks passed"},
		{"DB_PASSWORD=hunter2 API_KEY=k1 user=bob", "DB_PASSWORD=REDACTED API_KEY=REDACTED user=bob"},
		{`{"password": "hunter2", "user": "bob"}`, `{"password": "REDACTED", "user": "bob"}`},
		{"mysql --password hunter2 -h db", "mysql --password REDACTED -h db"},
		{"redis --auth=s3cret ok", "redis --auth=REDACTED ok"},
		{"token:\nnext line", "token:\nnext line"},
		{"--token\nnext line", "--token\nnext line"},
		{"HTTP probe failed with statuscode: 500", "HTTP probe failed with statuscode: 500"},
		{"dial tcp 127.0.0.1:1: connect: connection refused", "dial tcp 127.0.0.1:1: connect: connection refused"},
	} {
		got := redact.Text(c.in)
		if got != c.want {
			t.Errorf("Text(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
		if again := redact.Text(got); again != got {
			t.Errorf("Text is not idempotent on %q: %q", got, again)
		}
	}
}

func TestIsSecretKey(t *testing.T) {
	for _, k := range []string{"token", "access_token", "X-Api-Key", "apikey", "DB_PASSWORD", "passwd", "pwd", "Authorization",
		"credentials", "private_key", "SESSION_ID", "Cookie", "client_secret", "signature"} {
		if !redact.IsSecretKey(k) {
			t.Errorf("IsSecretKey(%q) = false", k)
		}
	}
	for _, k := range []string{"path", "host", "body", "user", "port", "pod", "err"} {
		if redact.IsSecretKey(k) {
			t.Errorf("IsSecretKey(%q) = true", k)
		}
	}
}

func TestSecretsFromContainer(t *testing.T) {
	c := &v1.Container{Env: []v1.EnvVar{
		{Name: "DB_PASSWORD", Value: "pw1"},                           // short, but secret-named
		{Name: "DSN", Value: "postgres://app:hunter22@db/app"},        // long
		{Name: "PORT", Value: "8080"},                                 // short, not secret-named: kept
		{Name: "FROM_SECRET", ValueFrom: &v1.EnvVarSource{}},          // unknown to probed
		{Name: "GREETING", Value: "sekrit-value-in-a-plain-variable"}, // long
	}}
	s := redact.ForContainer(c, map[string]string{"password": "redispw", "path": "/ready"})
	out := s.Text("env: DB_PASSWORD=pw1 PORT=8080 DSN=postgres://app:hunter22@db/app GREETING=sekrit-value-in-a-plain-variable; pw1 redispw /ready")
	for _, leaked := range []string{"pw1", "hunter22", "sekrit", "redispw"} {
		if strings.Contains(out, leaked) {
			t.Errorf("%q leaked: %s", leaked, out)
		}
	}
	for _, kept := range []string{"PORT=8080", "/ready"} {
		if !strings.Contains(out, kept) {
			t.Errorf("%q lost: %s", kept, out)
		}
	}
}

func TestCommand(t *testing.T) {
	s := redact.ForContainer(&v1.Container{Env: []v1.EnvVar{{Name: "TOKEN", Value: "tok-123"}}}, nil)
	in := []string{"check", "--password", "hunter2", "-token=abc", "--url=http://h/x?k=v", "literal tok-123", "-v"}
	got := s.Command(in)
	want := []string{"check", "--password", "REDACTED", "-token=REDACTED", "--url=http://h/x?k=REDACTED", "literal REDACTED", "-v"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Command = %q, want %q", got, want)
	}
	if in[2] != "hunter2" {
		t.Error("Command modified its input")
	}
}

func TestValue(t *testing.T) {
	v := map[string]any{
		"password": "hunter2",
		"header":   "Authorization: Bearer abc",
		"path":     "/x?token=abc",
		"nested":   []any{map[string]any{"apiKey": map[string]any{"x": "y"}}, "Basic dXNlcjpwYXNz"},
		"body":     "ok",
	}
	var none redact.Secrets
	none.Value(v)
	want := map[string]any{
		"password": "REDACTED",
		"header":   "Authorization: REDACTED",
		"path":     "/x?token=REDACTED",
		"nested":   []any{map[string]any{"apiKey": "REDACTED"}, "Basic REDACTED"},
		"body":     "ok",
	}
	if got, w := slog.AnyValue(v).String(), slog.AnyValue(want).String(); got != w {
		t.Errorf("Value = %s, want %s", got, w)
	}
}

func TestErrorKeepsIdentity(t *testing.T) {
	base := &fs.PathError{Op: "open", Path: "/x?token=abc", Err: fs.ErrNotExist}
	var none redact.Secrets
	err := none.Error(base)
	if err.Error() != "open /x?token=REDACTED: file does not exist" {
		t.Errorf("Error() = %q", err.Error())
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("errors.Is lost the wrapped error")
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		t.Error("errors.As lost the wrapped error")
	}
	plain := errors.New("connection refused")
	if none.Error(plain) != plain {
		t.Error("an error with nothing to redact was wrapped")
	}
}

// TestHandler: every log line through the handler is redacted, message,
// attributes, errors, groups and WithAttrs alike.
func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	// No time attribute: a timestamp's digits would match the "42" looked for.
	noTime := func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}
	log := slog.New(redact.NewHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: noTime})))
	log = log.With("target", "http://h/x?token=with-attrs")
	log.WithGroup("g").Debug("probe errored: Bearer abc.def",
		"err", errors.New(`Get "http://h/x?access_token=e1": EOF`),
		"line", "DB_PASSWORD=hunter2",
		"password", 42,
		slog.Group("probe", "path", "/y?k=group-val"))
	out := buf.String()
	for _, leaked := range []string{"with-attrs", "abc.def", "e1", "hunter2", "42", "group-val"} {
		if strings.Contains(out, leaked) {
			t.Errorf("%q leaked: %s", leaked, out)
		}
	}
	if !strings.Contains(out, `"password":"REDACTED"`) || !strings.Contains(out, "/y?k=REDACTED") {
		t.Errorf("unexpected output: %s", out)
	}
	if !log.Handler().Enabled(context.Background(), slog.LevelDebug) {
		t.Error("Enabled not passed on")
	}
}

// BenchmarkText: the cost of redacting one typical failure message (each
// non-success run pays it once).
func BenchmarkText(b *testing.B) {
	msg := `Get "http://10.0.0.1:8080/healthz?token=abc": dial tcp 10.0.0.1:8080: connect: connection refused`
	s := redact.ForContainer(&v1.Container{Env: []v1.EnvVar{{Name: "DB_PASSWORD", Value: "hunter22"}, {Name: "PORT", Value: "8080"}}}, nil)
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Text(msg)
	}
}

// FuzzText: any text is redacted without a panic, the rule is idempotent,
// and a value after "token=" never survives.
func FuzzText(f *testing.F) {
	for _, s := range []string{"", "a", "token=", "?", "://", "x://", "/?", "--pass", `"key":"`, "Basic ", "Bearer", "a=b?c=d#e",
		`Get "http://u:p@h/x?token=abc": EOF`, "-token\t\tv", "'auth': 'x", "k:\x00v"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		once := redact.Text(s)
		if twice := redact.Text(once); twice != once {
			t.Errorf("not idempotent: %q → %q → %q", s, once, twice)
		}
		if out := redact.Text(s + " token=PLANTED-SECRET"); strings.Contains(out, "PLANTED-SECRET") {
			t.Errorf("planted secret survived in %q", out)
		}
	})
}

// TestHeaderAndHTTPGet: the header rule of every shown probe and hook,
// spec or annotation: Host, Accept, User-Agent and
// Content-Type values are shown (any case), every other non-empty value is
// hidden whole; HTTPGet applies it and the URL rule to the path in place.
func TestHeaderAndHTTPGet(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"Host", "app.example", "app.example"},
		{"accept", "text/plain", "text/plain"},
		{"USER-AGENT", "probe/1", "probe/1"},
		{"Content-Type", "application/json", "application/json"},
		{"Authorization", "Bearer abc", redact.Mask},
		{"X-Tenant", "plain-looking", redact.Mask},
		{"X-Empty", "", ""},
	} {
		if got := redact.Header(c.name, c.value); got != c.want {
			t.Errorf("Header(%q, %q) = %q, want %q", c.name, c.value, got, c.want)
		}
	}
	g := &v1.HTTPGetAction{Path: "/x?token=abc", HTTPHeaders: []v1.HTTPHeader{{Name: "Cookie", Value: "s=1"}, {Name: "Host", Value: "h"}}}
	redact.ForContainer(nil, nil).HTTPGet(g)
	if g.Path != "/x?token=REDACTED" || g.HTTPHeaders[0].Value != redact.Mask || g.HTTPHeaders[1].Value != "h" {
		t.Errorf("HTTPGet = %+v", g)
	}
	redact.Secrets{}.HTTPGet(nil) // no panic
}

// The log handler cuts the message and every string, error
// and Stringer attribute to bound.LogValueBytes after redacting it.
func TestHandlerCutsLongValues(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(redact.NewHandler(slog.NewTextHandler(&buf, nil)))
	long := "/x?token=abc&" + strings.Repeat("a", 100_000) + "=end"
	log.Warn(long, "path", long, "err", errors.New(long))
	out := buf.String()
	if len(out) > 4*bound.LogValueBytes || strings.Contains(out, "abc") || strings.Count(out, " bytes cut]…") != 3 {
		t.Errorf("line of %d bytes: %.400s", len(out), out)
	}
}
