package runtime_test

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/internal/nettest"
	probeexec "github.com/probed/probed/plugins/exec"
	probehttp "github.com/probed/probed/plugins/http"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
)

// A run's report (and so its K4 event, made from it) never
// shows the container's
// env values (here printed by a real exec probe, and expanded into the
// command of one that cannot start), nor the query values of an HTTP
// probe's path (Go's error text quotes the URL), nor a plugin's
// secret-named parameter value.
func TestRunRedactsReports(t *testing.T) {
	rt := runtimeWith(t, map[string]runtime.Handler{
		runtime.KindExec: probeexec.New(&probeexec.LocalRunner{}),
		runtime.KindHTTP: probehttp.New(),
		"echo-params":    echoParams{},
	})
	closedPort := nettest.ClosedPort(t)

	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Env: []v1.EnvVar{
			{Name: "DB_PASSWORD", Value: "RT-SECRET-1"}, {Name: "API_TOKEN", Value: "RT-TOKEN-2"}}}}}}
	c := &pod.Spec.Containers[0]
	specs := []*runtime.Spec{
		{Kind: runtime.KindExec, Probe: &v1.Probe{TimeoutSeconds: 5, ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{
			Command: []string{"/bin/sh", "-c", "echo password=$(DB_PASSWORD) and $(API_TOKEN); exit 1"}}}}},
		{Kind: runtime.KindExec, Probe: &v1.Probe{TimeoutSeconds: 5, ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{
			Command: []string{"/nonexistent/check-$(API_TOKEN)"}}}}},
		{Kind: runtime.KindHTTP, Probe: &v1.Probe{TimeoutSeconds: 5, ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
			Host: "127.0.0.1", Port: intstr.FromInt(closedPort), Path: "/x?token=RT-QUERY-3&v=RT-QUERY-4"}}}},
		{Kind: "echo-params", Probe: &v1.Probe{TimeoutSeconds: 5},
			Plugin: &runtime.PluginAction{Name: "echo-params", Params: map[string]string{"password": "RT-PARAM-5"}}},
	}
	var shown []string
	for _, s := range specs {
		s.ProbeType, s.Pod, s.Container = runtime.Liveness, pod, c
		rep := rt.Run(context.Background(), rt.Prepare(s), runtime.Target{PodIP: "127.0.0.1", ContainerID: "containerd://c"})
		if rep.Err == nil && rep.Outcome.Result != runtime.Failure {
			t.Errorf("%s: %+v, want a failure or an error", s.Kind, rep)
		}
		shown = append(shown, rep.Outcome.Output)
		if rep.Err != nil {
			shown = append(shown, rep.Err.Error())
		}
	}
	all := strings.Join(shown, "\n")
	for _, secret := range []string{"RT-SECRET-1", "RT-TOKEN-2", "RT-QUERY-3", "RT-QUERY-4", "RT-PARAM-5"} {
		if strings.Contains(all, secret) {
			t.Errorf("%s shown:\n%s", secret, all)
		}
	}
	for _, want := range []string{"password=REDACTED and REDACTED", "/nonexistent/check-REDACTED",
		"/x?token=REDACTED&v=REDACTED", "connection refused", "plugin said REDACTED"} {
		if !strings.Contains(all, want) {
			t.Errorf("%q missing:\n%s", want, all)
		}
	}
}

// echoParams is a handler whose probe fails with its parameters in the
// output, as a careless plugin's error would.
type echoParams struct{}

func (echoParams) Prepare(spec *runtime.Spec) (runtime.Prober, error) {
	return runtime.ProberFunc(func(context.Context, runtime.Target) (runtime.Outcome, error) {
		return runtime.Outcome{Result: runtime.Failure, Output: "plugin said " + spec.Plugin.Params["password"]}, nil
	}), nil
}

// A run's report is cut to bound.MessageBytes after
// redaction: an HTTP probe with a 250 KB path against a closed port (Go's
// error quotes the URL) and a handler answering 1 MiB report at most 1 KiB,
// keeping the start and the end of the text (what was tried, what
// happened), and so does their K4 event, made from the report.
func TestRunCutsReports(t *testing.T) {
	rt := runtimeWith(t, map[string]runtime.Handler{
		runtime.KindHTTP: probehttp.New(),
		"chatty": runtime.HandlerFunc(func(*runtime.Spec) (runtime.Prober, error) {
			return runtime.ProberFunc(func(context.Context, runtime.Target) (runtime.Outcome, error) {
				return runtime.Outcome{Result: runtime.Failure, Output: strings.Repeat("x", 1<<20) + " the end"}, nil
			}), nil
		}),
	})
	closedPort := nettest.ClosedPort(t)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	for _, s := range []*runtime.Spec{
		{Kind: runtime.KindHTTP, Probe: &v1.Probe{TimeoutSeconds: 5, ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
			Host: "127.0.0.1", Port: intstr.FromInt(closedPort), Path: "/" + strings.Repeat("a", 250_000)}}}},
		{Kind: "chatty", Probe: &v1.Probe{TimeoutSeconds: 5}, Plugin: &runtime.PluginAction{Name: "chatty"}},
	} {
		s.ProbeType, s.Pod, s.Container = runtime.Readiness, pod, &pod.Spec.Containers[0]
		rep := rt.Run(context.Background(), rt.Prepare(s), runtime.Target{PodIP: "127.0.0.1", ContainerID: "containerd://c"})
		text := rep.Outcome.Output
		if rep.Err != nil {
			text = rep.Err.Error()
		}
		if len(text) > bound.MessageBytes || !strings.Contains(text, " bytes cut]…") {
			t.Errorf("%s: report of %d bytes: %.200q", s.Kind, len(text), text)
		}
		if want := map[string]string{runtime.KindHTTP: "connection refused", "chatty": "the end"}[s.Kind]; !strings.HasSuffix(text, want) {
			t.Errorf("%s: report %q lost its end %q", s.Kind, text[max(0, len(text)-100):], want)
		}
	}
}

// runtimeWith returns a small runtime with handlers registered; closed at
// the test's end.
func runtimeWith(t *testing.T, handlers map[string]runtime.Handler) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(runtime.Options{PoolSize: 2, SlowPoolSize: 2, ExecPoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	for kind, h := range handlers {
		if err := rt.Register(kind, h); err != nil {
			t.Fatal(err)
		}
	}
	return rt
}
