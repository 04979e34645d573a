package manager

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/runtime"
)

// runRecords is an Observer keeping every record.
type runRecords struct {
	mu   sync.Mutex
	recs []RunRecord
}

func (o *runRecords) ProbeRan(r RunRecord) {
	o.mu.Lock()
	o.recs = append(o.recs, r)
	o.mu.Unlock()
}

// Secrets in probe paths and in what a command prints reach
// neither the span (url.full, status, exception event), nor the run record
// the history is built from, nor the manager's logs. Real built-in
// handlers: an HTTP probe whose URL cannot be built (errored, the error
// quotes the URL), an HTTP probe to a closed port (Failure, Go's error
// quotes the URL), an exec probe that prints an env value of the
// container ($(VAR) expansion, E1) and one whose command, holding an env
// value, cannot start (errored: the span's status and exception event
// quote the error).
func TestSecretsRedactedInSpansRunRecordsAndLogs(t *testing.T) {
	secrets := []string{"SPAN-TOKEN-1", "SPAN-SESSION-2", "SPAN-TOKEN-3", "EXEC-SECRET-4", "EXEC-TOKEN-5"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	var logs testlog.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rt, err := runtime.New(runtime.Options{PoolSize: 4, ExecPoolSize: 4, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	if err := RegisterBuiltins(rt, nil); err != nil {
		t.Fatal(err)
	}
	observer := &runRecords{}
	e := newTestEnv(t, func(o *Options) {
		o.Runtime, o.TracerProvider, o.Observer, o.Logger = rt, tp, observer, logger
	})
	httpProbe := func(path string) *v1.Probe {
		p := execProbe()
		p.Exec = nil
		p.HTTPGet = &v1.HTTPGetAction{Path: path, Port: intstr.FromInt(closedPort), Host: "127.0.0.1"}
		return p
	}
	exec := execProbe()
	exec.Exec.Command = []string{"/bin/sh", "-c", "echo the password is $(DB_PASSWORD); exit 1"}
	execContainer := named("exec", probeOf(runtime.Readiness, exec))
	execContainer.Env = []v1.EnvVar{{Name: "DB_PASSWORD", Value: "EXEC-SECRET-4"}}
	missing := execProbe()
	missing.Exec.Command = []string{"/nonexistent/check-$(API_TOKEN)"}
	missingContainer := named("missing", probeOf(runtime.Readiness, missing))
	missingContainer.Env = []v1.EnvVar{{Name: "API_TOKEN", Value: "EXEC-TOKEN-5"}}
	pod := podWith("redact",
		named("bad-url", probeOf(runtime.Readiness, httpProbe("/x%zz?token=SPAN-TOKEN-1"))),
		named("refused", probeOf(runtime.Readiness, httpProbe("/ok;session=SPAN-SESSION-2?access_token=SPAN-TOKEN-3"))),
		execContainer, missingContainer)
	status := runningStatus(fakeNow, true)
	status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		cs := runningStatus(fakeNow, true).ContainerStatuses[0]
		cs.Name, cs.ContainerID = c.Name, "containerd://"+c.Name
		status.ContainerStatuses = append(status.ContainerStatuses, cs)
	}
	e.status.set("redact", status)
	e.m.AddPod(context.Background(), pod)
	for _, c := range pod.Spec.Containers {
		e.runOnce(e.worker("redact", c.Name, runtime.Readiness))
	}

	var shown []string
	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	sawURL := false
	for _, s := range spans {
		for _, a := range s.Attributes() {
			shown = append(shown, string(a.Key)+"="+a.Value.Emit())
			if a.Key == "url.full" && strings.Contains(a.Value.AsString(), "/ok;session=REDACTED?access_token=REDACTED") {
				sawURL = true
			}
		}
		shown = append(shown, s.Status().Description)
		for _, ev := range s.Events() {
			for _, a := range ev.Attributes {
				shown = append(shown, a.Value.Emit())
			}
		}
	}
	if !sawURL {
		t.Errorf("no url.full with the path redacted among %v", shown)
	}
	observer.mu.Lock()
	if len(observer.recs) != 4 {
		t.Errorf("%d run records, want 4", len(observer.recs))
	}
	for _, r := range observer.recs {
		if r.Message == "" {
			t.Errorf("%s: empty message; want the failure or error text", r.ContainerName)
		}
		shown = append(shown, r.Message)
		if r.Err != nil {
			shown = append(shown, r.Err.Error())
		}
	}
	observer.mu.Unlock()
	shown = append(shown, logs.String())
	all := strings.Join(shown, "\n")
	for _, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("%s shown:\n%s", s, all)
		}
	}
	for _, want := range []string{"the password is REDACTED", "connection refused", "/nonexistent/check-REDACTED",
		`/ok;session=REDACTED?access_token=REDACTED": dial tcp`} {
		if !strings.Contains(all, want) {
			t.Errorf("%q missing:\n%s", want, all)
		}
	}
}
