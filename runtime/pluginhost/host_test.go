package pluginhost_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/pluginhost"
	"github.com/probed/probed/runtime/pluginhost/pluginhosttest"
	"github.com/probed/probed/runtime/redact"
)

func testConfig(name string, mutate ...func(*pluginhost.PluginConfig)) pluginhost.PluginConfig {
	c := pluginhost.PluginConfig{Name: name, Path: testPlugin()}
	for _, m := range mutate {
		m(&c)
	}
	return c
}

func pluginError(t *testing.T, err error) *pluginhost.Error {
	t.Helper()
	var pe *pluginhost.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *pluginhost.Error", err, err)
	}
	return pe
}

// TestProbeRoundTrip: a probe reaches the plugin with its target, port
// (named, resolved by the host), timeout, type, identity and parameters, and
// the plugin's verdict, message and details come back.
func TestProbeRoundTrip(t *testing.T) {
	t.Parallel()
	h, _ := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t")}})
	if got := h.Kinds(); len(got) != 1 || got[0] != "test" {
		t.Fatalf("Kinds() = %v, want [test]", got)
	}
	if !h.HasKind("test") || h.HasKind("other") {
		t.Fatalf("HasKind wrong")
	}
	out, err := probeOnce(t, h, testSpec("test", 2, map[string]string{"mode": "ok", "x": "y"}))
	if err != nil {
		t.Fatal(err)
	}
	if out.Result != runtime.Success || out.Output != "ok" {
		t.Fatalf("outcome %+v", out)
	}
	want := map[string]string{
		"kind": "test", "probe_type": "readiness", "pod_uid": "uid-1", "pod": "default/pod-uid-1",
		"container": "app", "port": "8080", "timeout": "2s", "pod_ip": "10.1.2.3",
		"container_id": "containerd://abc", "attempt": "1", "param.x": "y", "param.mode": "ok",
	}
	for k, v := range want {
		if out.Details[k] != v {
			t.Errorf("details[%s] = %q, want %q", k, out.Details[k], v)
		}
	}
	if r, err := time.ParseDuration(out.Details["remaining"]); err != nil || r < 1500*time.Millisecond || r > 2*time.Second {
		t.Errorf("plugin saw %q left of the deadline, want about 2s", out.Details["remaining"])
	}

	out, err = probeOnce(t, h, testSpec("test", 1, map[string]string{"mode": "fail"}))
	if err != nil || out.Result != runtime.Failure || out.Output != "failed on purpose" {
		t.Fatalf("fail mode: %+v, %v", out, err)
	}
	// Output written after the handshake does not disturb the plugin.
	if out, err = probeOnce(t, h, testSpec("test", 1, map[string]string{"mode": "print"})); err != nil || out.Result != runtime.Success {
		t.Fatalf("print mode: %+v, %v", out, err)
	}
}

// TestPluginMisbehaviourIsAnError: a handler error, a Prepare error, a
// panic, a crash and a named port the container lacks make the attempt
// errored — never a Failure — and the plugin keeps serving.
func TestPluginMisbehaviourIsAnError(t *testing.T) {
	t.Parallel()
	h, _ := startHost(t, pluginhost.Options{
		Plugins: []pluginhost.PluginConfig{testConfig("t")},
		Restart: pluginhost.Backoff{Min: 10 * time.Millisecond},
	})
	cases := []struct {
		mode string
		code codes.Code
		msg  string
	}{
		{"error", codes.Unknown, "handler error on purpose"},
		{"badprepare", codes.FailedPrecondition, "prepare failed on purpose"},
		{"panic", codes.Internal, "panicked"},
		{"nosuchmode", codes.Unknown, `unknown mode "nosuchmode"`},
		{"crash", codes.Unavailable, "unavailable"},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			out, err := probeOnce(t, h, testSpec("test", 2, map[string]string{"mode": c.mode}))
			if err == nil {
				t.Fatalf("outcome %+v with no error", out)
			}
			if out.Result == runtime.Failure || out.Result == runtime.Success {
				t.Errorf("result %v, want unknown", out.Result)
			}
			pe := pluginError(t, err)
			if pe.Code != c.code || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %v (code %v), want code %v containing %q", err, pe.Code, c.code, c.msg)
			}
			// Not the restart-time bound (TestKillRestartsWithin2s, which
			// runs alone, checks that): only that the plugin serves again.
			waitFor(t, parallelStartWithin, "plugin serving again", func() bool {
				out, err := probeOnce(t, h, testSpec("test", 1, nil))
				return err == nil && out.Result == runtime.Success
			})
		})
	}
	spec := testSpec("test", 1, nil)
	spec.Plugin.Port.StrVal = "metrics"
	if _, err := probeOnce(t, h, spec); err == nil || !strings.Contains(err.Error(), `port "metrics" not found`) {
		t.Errorf("unknown named port: %v", err)
	}
}

// TestHangingPluginIsErroredInTime: a plugin that never answers makes the
// attempt errored within the probe's timeout plus 100 ms.
func TestHangingPluginIsErroredInTime(t *testing.T) {
	// Not parallel: it measures time.
	h, _ := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t")}})
	spec := testSpec("test", 1, map[string]string{"mode": "hang"})
	start := time.Now()
	out, err := probeOnce(t, h, spec)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("outcome %+v, want an error", out)
	}
	if pe := pluginError(t, err); pe.Code != codes.DeadlineExceeded {
		t.Errorf("code %v, want DeadlineExceeded: %v", pe.Code, err)
	}
	if took < time.Second || took > time.Second+100*time.Millisecond {
		t.Errorf("errored after %s, want within 1s..1.1s", took)
	}
	// A verdict the plugin reaches right at the deadline still counts.
	out, err = probeOnce(t, h, testSpec("test", 1, map[string]string{"mode": "sleep", "sleep": "1h"}))
	if err != nil || out.Result != runtime.Success {
		t.Errorf("answer at the deadline: %+v, %v", out, err)
	}
}

// TestInFlightCap: over the plugin's cap, a probe waits until its deadline
// and is then errored; below it, probes run.
func TestInFlightCap(t *testing.T) {
	// Not parallel: it measures time.
	h, _ := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t", func(c *pluginhost.PluginConfig) { c.MaxInFlight = 1 })}})
	if s := h.Status()[0]; s.MaxInFlight != 1 {
		t.Fatalf("MaxInFlight = %d", s.MaxInFlight)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		out, err := probeOnce(t, h, testSpec("test", 2, map[string]string{"mode": "sleep", "sleep": "1500ms"}))
		if err != nil || out.Result != runtime.Success {
			t.Errorf("slow probe: %+v, %v", out, err)
		}
	}()
	waitFor(t, time.Second, "slow probe in flight", func() bool { return h.Status()[0].InFlight == 1 })
	start := time.Now()
	_, err := probeOnce(t, h, testSpec("test", 1, nil))
	took := time.Since(start)
	if err == nil {
		t.Fatal("probe over the cap: no error")
	}
	if pe := pluginError(t, err); pe.Code != codes.ResourceExhausted || !strings.Contains(err.Error(), "1 probes already in flight") {
		t.Errorf("error %v (code %v)", err, pe.Code)
	}
	if took < 900*time.Millisecond || took > 1500*time.Millisecond {
		t.Errorf("over the cap, errored after %s, want at the deadline (1s)", took)
	}
	wg.Wait()
	if out, err := probeOnce(t, h, testSpec("test", 1, nil)); err != nil || out.Result != runtime.Success {
		t.Errorf("after the slow probe: %+v, %v", out, err)
	}
	// The plugin's own preference applies when the configuration sets none.
	h2, _ := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t2", func(c *pluginhost.PluginConfig) {
		c.Env = map[string]string{"TESTPLUGIN_MAX_CONCURRENCY": "7"}
	})}})
	if s := h2.Status()[0]; s.MaxInFlight != 7 {
		t.Errorf("MaxInFlight from the plugin = %d, want 7", s.MaxInFlight)
	}
}

// TestChecksum: a pinned binary whose SHA-256 differs is refused with an
// error naming both sums; the right sum starts it.
func TestChecksum(t *testing.T) {
	t.Parallel()
	path := privatePlugin(t)
	sum := sha256.New()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum.Write(data)
	good := hex.EncodeToString(sum.Sum(nil))
	bad := strings.Repeat("ab", 32)

	_, err = pluginhost.New(context.Background(), pluginhost.Options{
		Plugins: []pluginhost.PluginConfig{{Name: "pinned", Path: path, SHA256: bad}},
		Logger:  newLogger(&testlog.Buffer{}),
	})
	if err == nil {
		t.Fatal("a binary with the wrong sha256 started")
	}
	for _, want := range []string{`plugin "pinned": refusing to start`, "its sha256 is " + good, "the configuration pins " + bad} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if kids := pluginhosttest.Children(os.Getpid(), filepath.Dir(path)); len(kids) != 0 {
		t.Errorf("plugin processes running: %v", kids)
	}
	h, _ := startHost(t, pluginhost.Options{
		Plugins: []pluginhost.PluginConfig{{Name: "pinned", Path: path, SHA256: strings.ToUpper(good)}},
	})
	if s := h.Status()[0]; !s.Running || !s.Pinned {
		t.Errorf("status %+v", s)
	}
}

// TestStdoutBeforeHandshake: a plugin that prints to stdout before the
// go-plugin handshake is refused with an error that says so.
func TestStdoutBeforeHandshake(t *testing.T) {
	t.Parallel()
	_, err := pluginhost.New(context.Background(), pluginhost.Options{
		Plugins: []pluginhost.PluginConfig{testConfig("chatty", func(c *pluginhost.PluginConfig) {
			c.Env = map[string]string{"TESTPLUGIN_STDOUT": "hello from init"}
		})},
		Logger: newLogger(&testlog.Buffer{}),
	})
	if err == nil {
		t.Fatal("a plugin printing to stdout before the handshake started")
	}
	want := `plugin "chatty" (` + testPlugin() + `) wrote "hello from init" to stdout before the go-plugin handshake`
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "log to stderr instead") {
		t.Errorf("error %q, want it to contain %q", err, want)
	}
}

// TestStartErrors: other start failures are reported per plugin.
func TestStartErrors(t *testing.T) {
	t.Parallel()
	path := privatePlugin(t)
	priv := func(name string, mutate ...func(*pluginhost.PluginConfig)) pluginhost.PluginConfig {
		c := testConfig(name, mutate...)
		c.Path = path
		return c
	}
	notPlugin := filepath.Join(t.TempDir(), "not-a-plugin")
	if err := os.WriteFile(notPlugin, []byte("#!/bin/sh\nsleep 0.05\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  pluginhost.PluginConfig
		want string
	}{
		{"missing binary", pluginhost.PluginConfig{Name: "gone", Path: "/nonexistent/plugin"}, `plugin "gone"`},
		{"not a plugin", pluginhost.PluginConfig{Name: "sh", Path: notPlugin}, "exited before the go-plugin handshake"},
		{"configure fails", priv("cfg", func(c *pluginhost.PluginConfig) { c.Config = map[string]string{"fail": "no database"} }), `plugin "cfg": Configure`},
		{"invalid kind", priv("kind", func(c *pluginhost.PluginConfig) { c.Env = map[string]string{"TESTPLUGIN_KINDS": "Bad_Kind"} }), "Bad_Kind"},
		{"params for a kind not served", priv("p", func(c *pluginhost.PluginConfig) {
			c.Params = map[string]map[string]pluginhost.ParamSchema{"other": {}}
		}), `params for kind "other"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := pluginhost.New(context.Background(), pluginhost.Options{Plugins: []pluginhost.PluginConfig{c.cfg}, Logger: newLogger(&testlog.Buffer{})})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v, want an error containing %q", err, c.want)
			}
			t.Log(err)
		})
	}
	// Two plugins serving one kind.
	_, err := pluginhost.New(context.Background(), pluginhost.Options{
		Plugins: []pluginhost.PluginConfig{priv("a"), priv("b")},
		Logger:  newLogger(&testlog.Buffer{}),
	})
	if err == nil || !strings.Contains(err.Error(), `probe kind "test" is served by two plugins, "a" and "b"`) {
		t.Errorf("duplicate kind: %v", err)
	}
	if kids := pluginhosttest.Children(os.Getpid(), filepath.Dir(path)); len(kids) != 0 {
		t.Errorf("plugin processes left after failed starts: %v", kids)
	}
}

// TestKillRestartsWithin2s: after kill -9 the plugin serves again within
// 2 s, probes in between are errored, and the restart is counted.
func TestKillRestartsWithin2s(t *testing.T) {
	// Not parallel: it measures time.
	reg := prometheus.NewPedanticRegistry()
	h, logs := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t")}, Registerer: reg})
	old := pidOf(t, h, "t")
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var errored int
	waitFor(t, 2*time.Second, "plugin back after kill -9", func() bool {
		out, err := probeOnce(t, h, testSpec("test", 1, nil))
		if err != nil {
			errored++
			return false
		}
		if out.Result != runtime.Success {
			t.Fatalf("a probe while the plugin was down gave %+v", out)
		}
		return true
	})
	t.Logf("plugin back %s after kill -9 (%d errored probes meanwhile)", time.Since(start), errored)
	if got := metricValue(t, reg, "probed_plugin_up"); got != 1 {
		t.Errorf("probed_plugin_up = %v, want 1", got)
	}
	s := h.Status()[0]
	if !s.Running || s.PID == old || s.Restarts != 1 {
		t.Errorf("status after restart: %+v (old pid %d)", s, old)
	}
	if got := metricValue(t, reg, "probed_plugin_restarts_total"); got != 1 {
		t.Errorf("probed_plugin_restarts_total = %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "plugin restarted") {
		t.Errorf("no restart logged:\n%s", logs)
	}
}

// metricValue sums the samples of a metric family of reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
			return sum
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// TestRestartBackoff: a plugin that keeps dying is restarted with growing
// delays, not in a tight loop.
func TestRestartBackoff(t *testing.T) {
	t.Parallel()
	h, _ := startHost(t, pluginhost.Options{
		Plugins: []pluginhost.PluginConfig{testConfig("t")},
		Restart: pluginhost.Backoff{Min: 200 * time.Millisecond, Max: time.Second, ResetAfter: time.Minute},
	})
	start := time.Now()
	for i := 0; i < 3; i++ {
		pid := 0
		waitFor(t, parallelStartWithin, "plugin running", func() bool { pid = h.Status()[0].PID; return pid != 0 })
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitFor(t, parallelStartWithin, "plugin restarted", func() bool { p := h.Status()[0].PID; return p != 0 && p != pid })
	}
	// Delays: 0, 200 ms, 400 ms (plus three starts).
	if took := time.Since(start); took < 600*time.Millisecond {
		t.Errorf("three restarts took %s, want at least 600ms of backoff", took)
	}
	if r := h.Status()[0].Restarts; r != 3 {
		t.Errorf("restarts = %d, want 3", r)
	}
}

// TestCloseLeavesNothing: Close stops every plugin process and leaves no
// goroutine behind.
func TestCloseLeavesNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h, err := pluginhost.New(context.Background(), pluginhost.Options{
		Plugins: []pluginhost.PluginConfig{
			testConfig("a"),
			testConfig("b", func(c *pluginhost.PluginConfig) { c.Env = map[string]string{"TESTPLUGIN_KINDS": "other,more"} }),
		},
		Logger: newLogger(&testlog.Buffer{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{pidOf(t, h, "a"), pidOf(t, h, "b")}
	for _, kind := range []string{"test", "other", "more"} {
		if out, err := probeOnce(t, h, testSpec(kind, 1, nil)); err != nil || out.Result != runtime.Success {
			t.Fatalf("kind %s: %+v, %v", kind, out, err)
		}
	}
	// One probe in flight while closing.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := probeOnce(t, h, testSpec("test", 5, map[string]string{"mode": "hang"}))
		if err == nil {
			t.Error("probe in flight at Close: no error")
		}
	}()
	waitFor(t, time.Second, "probe in flight", func() bool { return h.Status()[0].InFlight == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("Close took %s", time.Since(start))
	for _, pid := range pids {
		if pluginhosttest.Alive(pid) {
			t.Errorf("plugin process %d still running after Close", pid)
		}
	}
	if kids := pluginhosttest.Children(os.Getpid(), binDir); len(kids) != 0 {
		t.Errorf("plugin processes left: %v", kids)
	}
	if err := h.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := probeOnce(t, h, testSpec("test", 1, nil)); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("probe after Close: %v", err)
	}
}

// TestTraceContextPropagates: the probe's trace context reaches the
// plugin's handler.
func TestTraceContextPropagates(t *testing.T) {
	t.Parallel()
	h, _ := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t")}})
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))
	pr, err := h.Handler("test").Prepare(testSpec("test", 1, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	out, err := pr.Probe(ctx, runtime.Target{PodIP: "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Details["trace_id"]; got != tid.String() {
		t.Errorf("plugin saw trace %q, want %s", got, tid)
	}
}

// TestParamsSchema: the configured schema rejects unknown, missing and
// malformed parameters at Prepare, and reserved names are always refused.
func TestParamsSchema(t *testing.T) {
	t.Parallel()
	h, _ := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t", func(c *pluginhost.PluginConfig) {
		c.Params = map[string]map[string]pluginhost.ParamSchema{"test": {
			"mode":  {Required: true, Pattern: "ok|fail|sleep"},
			"sleep": {},
		}}
	})}})
	hd := h.Handler("test")
	cases := []struct {
		params map[string]string
		want   string
	}{
		{map[string]string{"mode": "ok"}, ""},
		{map[string]string{"mode": "fail", "sleep": "1s"}, ""},
		{map[string]string{"sleep": "1s"}, `missing required parameter "mode"`},
		{map[string]string{"mode": "ok", "bogus": "1"}, `unknown parameter "bogus" (known: mode, sleep)`},
		{map[string]string{"mode": "okay"}, `parameter "mode" does not match`},
		{map[string]string{"mode": "ok", "probed.io/spec": "{}"}, "reserved"},
	}
	for _, c := range cases {
		_, err := hd.Prepare(testSpec("test", 1, c.params))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.params, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want %q", c.params, err, c.want)
		}
	}
	// A plugin kind needs a plugin handler.
	spec := testSpec("test", 1, nil)
	spec.Plugin = nil
	if _, err := hd.Prepare(spec); err == nil || !strings.Contains(err.Error(), "needs a plugin handler") {
		t.Errorf("spec without plugin action: %v", err)
	}
}

// TestRegister: the kinds land on a runtime, a built-in kind served by a
// plugin replaces the in-process handler, and a probe prepared before its
// plugin kind was registered runs once it is.
func TestRegister(t *testing.T) {
	t.Parallel()
	h, _ := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{
		testConfig("t", func(c *pluginhost.PluginConfig) { c.Env = map[string]string{"TESTPLUGIN_KINDS": "test,tcp"} }),
	}})
	rt, err := runtime.New(runtime.Options{PoolSize: 4, ExecPoolSize: 1, Logger: newLogger(&testlog.Buffer{})})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	builtin := runtime.HandlerFunc(func(*runtime.Spec) (runtime.Prober, error) { return nil, errors.New("in-process") })
	if err := rt.Register(runtime.KindTCP, builtin); err != nil {
		t.Fatal(err)
	}
	early := rt.Prepare(testSpec("test", 1, nil))
	if early.Err() == nil {
		t.Fatal("prepared before registration without error")
	}
	if err := h.Register(rt); err != nil {
		t.Fatal(err)
	}
	if got := rt.Kinds(); strings.Join(got, ",") != "tcp,test" {
		t.Errorf("kinds %v", got)
	}
	if rep := rt.Run(context.Background(), early, runtime.Target{PodIP: "10.0.0.1"}); rep.Err != nil || rep.Outcome.Result != runtime.Success {
		t.Errorf("early probe after registration: %+v", rep)
	}
	// tcp now goes to the plugin (which refuses built-in specs).
	p := rt.Prepare(&runtime.Spec{Kind: runtime.KindTCP, Probe: testSpec("x", 1, nil).Probe})
	if rep := rt.Run(context.Background(), p, runtime.Target{}); rep.Err == nil || strings.Contains(rep.Err.Error(), "in-process") {
		t.Errorf("tcp after Register: %+v", rep)
	}
	// Registering again fails: the plugin kind is taken.
	if err := h.Register(rt); err == nil {
		t.Error("second Register succeeded")
	}
}

// TestLastErrorIsRedacted: a restart that fails with an error echoing the
// plugin's configuration shows in Status (and so in /debug/scheduler)
// and in the log without the secret values (one redaction rule everywhere).
func TestLastErrorIsRedacted(t *testing.T) {
	t.Parallel()
	trigger := filepath.Join(t.TempDir(), "fail-now")
	h, logs := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t", func(c *pluginhost.PluginConfig) {
		c.Config = map[string]string{"fail_when_file": trigger, "db_password": "s3cr3t-config-value"}
		c.Env = map[string]string{"UPSTREAM_DSN": "postgres-dsn-from-env"}
	})}})
	msg := "cannot connect as db_password s3cr3t-config-value via postgres-dsn-from-env, Authorization: Bearer abc.def.ghi"
	if err := os.WriteFile(trigger, []byte(msg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pidOf(t, h, "t"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var last string
	waitFor(t, 10*time.Second, "a failed restart in Status", func() bool {
		last = h.Status()[0].LastError
		return strings.Contains(last, "cannot connect")
	})
	for _, secret := range []string{"s3cr3t-config-value", "postgres-dsn-from-env", "abc.def.ghi"} {
		if strings.Contains(last, secret) {
			t.Errorf("LastError shows %q: %s", secret, last)
		}
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log shows %q:\n%s", secret, logs)
		}
	}
	if !strings.Contains(last, redact.Mask) {
		t.Errorf("LastError has no %s: %s", redact.Mask, last)
	}
}
