package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/runtime"
)

func server(t *testing.T) int {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-State", "warming")
		w.Header().Add("X-State", "ready")
		io.WriteString(w, `{"status":{"ready":true,"phase":"Running","load":0.5,"items":[{"name":"db","up":null}]}}`)
	})
	mux.HandleFunc("/teapot", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	mux.HandleFunc("/fail", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "secret internal detail")
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ready", http.StatusFound) })
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://elsewhere.invalid/", http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/text", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "not json") })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	return port
}

func spec(port int, params map[string]string) *runtime.Spec {
	return &runtime.Spec{
		Kind:      Kind,
		Container: &v1.Container{Name: "app"},
		Probe:     &v1.Probe{TimeoutSeconds: 1},
		Plugin:    &runtime.PluginAction{Name: Kind, Port: intstr.FromInt32(int32(port)), Params: params},
	}
}

func TestProbe(t *testing.T) {
	port := server(t)
	cases := []struct {
		name   string
		params map[string]string
		result runtime.Result
		output string
		code   int
	}{
		{"default path and status", map[string]string{"path": "/ready"}, runtime.Success, "", 200},
		{"404 outside the default range", map[string]string{"path": "/nope"}, runtime.Failure, "HTTP status 404, want 200-399", 404},
		{"503 does not leak the body", map[string]string{"path": "/fail"}, runtime.Failure, "HTTP status 503, want 200-399", 503},
		{"status code", map[string]string{"path": "/teapot", "status": "418"}, runtime.Success, "", 418},
		{"status range miss", map[string]string{"path": "/teapot", "status": "200-299"}, runtime.Failure, "HTTP status 418, want 200-299", 418},
		{"status list", map[string]string{"path": "/teapot", "status": "200-299, 418"}, runtime.Success, "", 418},
		{"body match", map[string]string{"path": "/ready", "body": "^ok$"}, runtime.Success, "", 200},
		{"body mismatch", map[string]string{"path": "/ready", "body": "^ready$"}, runtime.Failure, `body does not match "^ready$"`, 200},
		{"header match on any value", map[string]string{"path": "/status", "header": "x-state: ^ready$"}, runtime.Success, "", 200},
		{"header mismatch", map[string]string{"path": "/status", "header": "X-State: ^down$"}, runtime.Failure, `header X-State (2 values) does not match "^down$"`, 200},
		{"header absent", map[string]string{"path": "/status", "header": "X-Other: ."}, runtime.Failure, `header X-Other (0 values) does not match "."`, 200},
		{"json bool", map[string]string{"path": "/status", "json": "status.ready=true"}, runtime.Success, "", 200},
		{"json string", map[string]string{"path": "/status", "json": "status.phase=Running"}, runtime.Success, "", 200},
		{"json number", map[string]string{"path": "/status", "json": "status.load=0.5"}, runtime.Success, "", 200},
		{"json array and null", map[string]string{"path": "/status", "json": "status.items.0.up=null"}, runtime.Success, "", 200},
		{"json mismatch", map[string]string{"path": "/status", "json": "status.phase=Pending"}, runtime.Failure, `json: field status.phase is "Running", want "Pending"`, 200},
		{"json missing", map[string]string{"path": "/status", "json": "status.gone=1"}, runtime.Failure, "json: field status.gone not found", 200},
		{"json index out of range", map[string]string{"path": "/status", "json": "status.items.3.name=db"}, runtime.Failure, "json: field status.items.3 not found (array of 1)", 200},
		{"json object", map[string]string{"path": "/status", "json": "status=x"}, runtime.Failure, `json: field status is an object or array, want "x"`, 200},
		{"not json", map[string]string{"path": "/text", "json": "a=b"}, runtime.Failure, "json: the body is not JSON", 200},
		{"same-host redirect followed", map[string]string{"path": "/moved", "body": "ok"}, runtime.Success, "", 200},
		{"redirect elsewhere not followed", map[string]string{"path": "/away", "status": "200-299"}, runtime.Failure, "HTTP status 302, want 200-299", 302},
		{"all at once", map[string]string{"path": "/status", "status": "200", "header": "Content-Type: json", "body": `"ready"`, "json": "status.ready=true"}, runtime.Success, "", 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pr, err := Handler{}.Prepare(spec(port, c.params))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			out, err := pr.Probe(ctx, runtime.Target{PodIP: "127.0.0.1"})
			if err != nil {
				t.Fatal(err)
			}
			if out.Result != c.result || out.Output != c.output || out.StatusCode != c.code {
				t.Errorf("got %v %q (status %d), want %v %q (status %d)", out.Result, out.Output, out.StatusCode, c.result, c.output, c.code)
			}
			if out.Details["status_code"] != strconv.Itoa(c.code) {
				t.Errorf("details %v", out.Details)
			}
			if strings.Contains(out.Output, "secret") {
				t.Errorf("output leaks the body: %q", out.Output)
			}
		})
	}
}

func TestProbeTransportFailures(t *testing.T) {
	port := server(t)
	pr, err := Handler{}.Prepare(spec(port, map[string]string{"path": "/slow"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	out, err := pr.Probe(ctx, runtime.Target{PodIP: "127.0.0.1"})
	if err != nil || out.Result != runtime.Failure || !strings.Contains(out.Output, "deadline exceeded") {
		t.Errorf("timeout: %+v, %v", out, err)
	}
	if d := time.Since(start); d > 1200*time.Millisecond {
		t.Errorf("timeout took %s", d)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	pr, _ = Handler{}.Prepare(spec(closed, nil))
	out, err = pr.Probe(context.Background(), runtime.Target{PodIP: "127.0.0.1"})
	if err != nil || out.Result != runtime.Failure || !strings.Contains(out.Output, "connection refused") {
		t.Errorf("closed port: %+v, %v", out, err)
	}
}

func TestPrepareErrors(t *testing.T) {
	cases := []struct {
		port   int
		params map[string]string
		want   string
	}{
		{0, nil, "needs a port"},
		{80, map[string]string{"path": "ready"}, "must start with /"},
		{80, map[string]string{"scheme": "ftp"}, "want http or https"},
		{80, map[string]string{"status": "2xx"}, "status"},
		{80, map[string]string{"status": "300-200"}, "status"},
		{80, map[string]string{"status": "99"}, "status"},
		{80, map[string]string{"header": "no colon"}, "Name: regexp"},
		{80, map[string]string{"header": "X: ("}, "header regexp"},
		{80, map[string]string{"body": "("}, "body regexp"},
		{80, map[string]string{"json": "nofield"}, "field.path=value"},
	}
	for _, c := range cases {
		_, err := Handler{}.Prepare(spec(c.port, c.params))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.params, err, c.want)
		}
	}
	if _, err := (Handler{}).Prepare(&runtime.Spec{Kind: Kind, Probe: &v1.Probe{}}); err == nil {
		t.Error("spec without plugin action: no error")
	}
}

// TestNotCutOnRealTimeForInjectedClock: a request from a host on an
// injected clock (no deadline, the context marked, docs/plugins.md
// Deadlines) is bounded by the context alone: a target that answers after
// more real time than timeoutSeconds is not cut off.
func TestNotCutOnRealTimeForInjectedClock(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/late", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(1300 * time.Millisecond)
		io.WriteString(w, "ok")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	pr, err := Handler{}.Prepare(spec(srv.Listener.Addr().(*net.TCPAddr).Port, map[string]string{"path": "/late"}))
	if err != nil {
		t.Fatal(err)
	}
	out, err := pr.Probe(runtime.WithInjectedDeadline(context.Background()), runtime.Target{PodIP: "127.0.0.1"})
	if err != nil || out.Result != runtime.Success {
		t.Fatalf("%+v, %v, want Success", out, err)
	}
}
