package pluginhost_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/pluginhost"
)

type pluginAttempt struct {
	out runtime.Outcome
	err error
}

// probeOnFakeClock prepares spec on h's handler and starts one attempt
// whose deadline, the spec's timeout, runs on fc as runtime.Run makes it.
func probeOnFakeClock(t *testing.T, h *pluginhost.Host, spec *runtime.Spec, fc *testingclock.FakeClock) <-chan pluginAttempt {
	t.Helper()
	pr, err := h.Handler(spec.Kind).Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan pluginAttempt, 1)
	ctx, cancel := runtime.WithTimeout(context.Background(), fc, spec.Timeout())
	go func() {
		defer cancel()
		out, err := pr.Probe(ctx, runtime.Target{PodIP: "10.1.2.3", ContainerID: "containerd://abc", Attempt: 1})
		done <- pluginAttempt{out, err}
	}()
	return done
}

func awaitPlugin(t *testing.T, done <-chan pluginAttempt) pluginAttempt {
	t.Helper()
	select {
	case a := <-done:
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("the plugin attempt did not end")
		return pluginAttempt{}
	}
}

// On a fake clock the plugin, a process of its own, cannot see the host's
// clock: it is told no time left and sees no deadline (the SDK sets none),
// while ProbeRequest.timeout still names timeoutSeconds (docs/plugins.md).
func TestPluginSeesNoDeadlineOnFakeClock(t *testing.T) {
	t.Parallel()
	h, _ := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t")}})
	fc := testingclock.NewFakeClock(time.Now())
	a := awaitPlugin(t, probeOnFakeClock(t, h, testSpec("test", 2, map[string]string{"mode": "ok"}), fc))
	if a.err != nil || a.out.Result != runtime.Success {
		t.Fatalf("(%+v, %v), want Success", a.out, a.err)
	}
	if r, ok := a.out.Details["remaining"]; ok {
		t.Errorf("the plugin saw a deadline %s ahead, want none", r)
	}
	if a.out.Details["timeout"] != "2s" {
		t.Errorf("the plugin saw timeout %q, want 2s", a.out.Details["timeout"])
	}
}

// The plugin's deadline on a fake clock: a plugin that has not answered
// when the host's fake clock passes timeoutSeconds (30 s: a real-time
// deadline would not end it within the wait) is errored with
// codes.DeadlineExceeded, as a plugin that misses its deadline on the real
// clock; the host cancels the call, so the plugin's handler sees its
// context end.
func TestPluginDeadlineOnFakeClock(t *testing.T) {
	t.Parallel()
	h, _ := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t")}})
	fc := testingclock.NewFakeClock(time.Now())
	// The handler waits on its context, up to an hour.
	done := probeOnFakeClock(t, h, testSpec("test", 30, map[string]string{"mode": "sleep", "sleep": "1h"}), fc)
	select {
	case a := <-done:
		t.Fatalf("ended before the fake clock reached the deadline: (%+v, %v)", a.out, a.err)
	case <-time.After(200 * time.Millisecond):
	}
	fc.Step(30 * time.Second)
	a := awaitPlugin(t, done)
	if a.err == nil {
		t.Fatalf("outcome %+v, want an error", a.out)
	}
	if pe := pluginError(t, a.err); pe.Code != codes.DeadlineExceeded {
		t.Fatalf("code %v, want DeadlineExceeded: %v", pe.Code, a.err)
	}
}

// A plugin that answers after more real time than timeoutSeconds, while the
// host's fake clock stays before the deadline, is not cut off, neither by
// the host nor by the SDK: Success, with the plugin's whole sleep passed.
func TestPluginNotCutOnRealTimeOnFakeClock(t *testing.T) {
	t.Parallel()
	h, _ := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{testConfig("t")}})
	fc := testingclock.NewFakeClock(time.Now())
	a := awaitPlugin(t, probeOnFakeClock(t, h, testSpec("test", 1, map[string]string{"mode": "sleep", "sleep": "1300ms"}), fc))
	if a.err != nil || a.out.Result != runtime.Success || a.out.Details["sleep_end"] != "slept" {
		t.Fatalf("(%+v, %v), want Success after the whole sleep", a.out, a.err)
	}
}
