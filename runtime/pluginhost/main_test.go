package pluginhost_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/pluginhost"
	"github.com/probed/probed/runtime/pluginhost/pluginhosttest"
)

// binDir holds the plugin binaries built for the tests.
var binDir string

// testPlugin is the path of the test plugin binary.
func testPlugin() string { return filepath.Join(binDir, "testplugin") }

func TestMain(m *testing.M) {
	if mode := os.Getenv(parentModeEnv); mode != "" {
		runParent(mode)
		return
	}
	dir, err := os.MkdirTemp("", "pluginhost-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := pluginhosttest.Build(dir, "./testdata/testplugin"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binDir = dir
	// Race-built plugins would otherwise sleep 1 s at exit.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(), goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// privatePlugin links the test plugin into a directory of the test's own,
// for checks of the processes running from it. (A hard link, not a copy:
// writing an executable while other tests fork can make exec fail with
// ETXTBSY, golang/go#22315.)
func privatePlugin(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "testplugin")
	if err := os.Link(testPlugin(), path); err != nil {
		t.Skipf("cannot link the test plugin: %v", err)
	}
	return path
}

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startHost starts a host with opts (Logger defaults to a buffer that is
// dumped when the test fails) and closes it at cleanup.
func startHost(t *testing.T, opts pluginhost.Options) (*pluginhost.Host, *testlog.Buffer) {
	t.Helper()
	logs := &testlog.Buffer{}
	if opts.Logger == nil {
		opts.Logger = newLogger(logs)
	}
	h, err := pluginhost.New(context.Background(), opts)
	if err != nil {
		t.Fatalf("pluginhost.New: %v\nlogs:\n%s", err, logs)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if t.Failed() {
			t.Logf("host logs:\n%s", logs)
		}
	})
	return h, logs
}

// testSpec is a custom probe of kind on the pod of pluginhosttest.Pod.
func testSpec(kind string, timeoutSeconds int32, params map[string]string) *runtime.Spec {
	pod, _ := pluginhosttest.Pod("uid-1", nil)
	return &runtime.Spec{
		Kind:      kind,
		ProbeType: runtime.Readiness,
		Pod:       pod,
		Container: &pod.Spec.Containers[0],
		Probe:     &v1.Probe{TimeoutSeconds: timeoutSeconds},
		Plugin:    &runtime.PluginAction{Name: kind, Port: intstr.FromString("http"), Params: params},
	}
}

// probeOnce prepares spec on h's handler and makes one attempt bounded by
// the spec's timeout.
func probeOnce(t *testing.T, h *pluginhost.Host, spec *runtime.Spec) (runtime.Outcome, error) {
	t.Helper()
	hd := h.Handler(spec.Kind)
	if hd == nil {
		t.Fatalf("no handler for kind %q", spec.Kind)
	}
	pr, err := hd.Prepare(spec)
	if err != nil {
		return runtime.Outcome{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), spec.Timeout())
	defer cancel()
	return pr.Probe(ctx, runtime.Target{PodIP: "10.1.2.3", ContainerID: "containerd://abc", Attempt: 1})
}

// parallelStartWithin bounds how long a parallel test waits for a plugin to
// start or restart. It is generous on purpose: such a start (fork/exec of a
// race-built binary, go-plugin's mTLS handshake) competes with the other
// parallel tests' plugins and, in CI, with other test packages, and took
// about 2 s on a loaded 2-core machine. The restart time itself is asserted
// by tests that run alone (TestKillRestartsWithin2s,
// TestKillDuringProbingNoLivenessFailure).
const parallelStartWithin = 15 * time.Second

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func pidOf(t *testing.T, h *pluginhost.Host, name string) int {
	t.Helper()
	for _, s := range h.Status() {
		if s.Name == name {
			return s.PID
		}
	}
	t.Fatalf("no plugin %q", name)
	return 0
}
