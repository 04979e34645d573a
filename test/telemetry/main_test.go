// Package telemetry_test checks the agent's telemetry end to end: spans
// received by a real OTLP/gRPC collector over a loopback connection, and
// Prometheus metrics scraped over HTTP from a running agent, with real HTTP
// targets and a real plugin process. Loopback only.
package telemetry_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/internal/agenttest"
	"github.com/probed/probed/internal/testlog"
	"github.com/probed/probed/runtime/pluginhost/pluginhosttest"
)

// binDir holds the test plugin binary TestMain builds.
var binDir string

// The secrets the targets put in their bodies; none may reach telemetry
// (BR-22).
const (
	secret500      = "token=EXAMPLE-SECRET-123"
	secret200      = "token=EXAMPLE-SECRET-OK-456"
	secretRedirect = "token=EXAMPLE-SECRET-REDIRECT-789"
	secretMarker   = "EXAMPLE-SECRET"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "probed-telemetry-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := pluginhosttest.Build(dir, "../../runtime/pluginhost/testdata/testplugin"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binDir = dir
	// Race-built plugins would otherwise sleep 1 s at exit.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	// Hermetic: no OTEL_* setting of the environment applies.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			os.Unsetenv(k)
		}
	}
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(), goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// ---------------------------------------------------------------------------
// Targets.

// target is a loopback HTTP server: /ok* answer 200 with secret200, /fail*
// 500 with secret500, /redirect* a 302 to another host (not followed: a
// warning) with secretRedirect. It counts requests by path.
type target struct {
	srv  *httptest.Server
	port int
	mu   sync.Mutex
	hits map[string]int
}

func newTarget(t *testing.T) *target {
	t.Helper()
	tg := &target{hits: map[string]int{}}
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.mu.Lock()
		tg.hits[r.URL.Path]++
		tg.mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/fail"):
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, secret500)
		case strings.HasPrefix(r.URL.Path, "/redirect"):
			// Another host: the kubelet's prober does not follow it.
			w.Header().Set("Location", "http://127.0.0.2:9/elsewhere")
			w.WriteHeader(http.StatusFound)
			_, _ = io.WriteString(w, secretRedirect)
		default:
			_, _ = io.WriteString(w, secret200)
		}
	}))
	t.Cleanup(tg.srv.Close)
	tg.port = tg.srv.Listener.Addr().(*net.TCPAddr).Port
	return tg
}

func (tg *target) count(path string) int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.hits[path]
}

// ---------------------------------------------------------------------------
// The agent.

// runningAgent is an agent.Agent running in process.
type runningAgent struct {
	t    *testing.T
	a    *agent.Agent
	base string
	logs *testlog.Buffer
	run  *agenttest.Run
}

var httpClient = &http.Client{
	Timeout:   5 * time.Second,
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
}

// startAgent builds and runs an agent on dir (API on 127.0.0.1:0); mutate
// adjusts the options. t.Cleanup stops it if the test has not.
func startAgent(t *testing.T, dir string, mutate func(*agent.Options)) *runningAgent {
	t.Helper()
	logs := &testlog.Buffer{}
	opts := agent.Options{
		ManifestDir:   dir,
		Listen:        "127.0.0.1:0",
		Rescan:        300 * time.Millisecond,
		SyncFrequency: time.Minute,
		PoolSize:      16,
		ExecPoolSize:  4,
		SlowPoolSize:  8,
		History:       100,
		Logger:        slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&opts)
	}
	a, err := agent.New(opts)
	if err != nil {
		t.Fatalf("agent.New: %v\nlogs:\n%s", err, logs.String())
	}
	t.Cleanup(func() { // after the agent's stop
		if t.Failed() {
			t.Logf("agent logs (tail):\n%s", tail(logs.String(), 60))
		}
	})
	run := agenttest.Of(t, a)
	return &runningAgent{t: t, a: a, base: run.Base, logs: logs, run: run}
}

// stop ends Run (graceful shutdown: in-flight probes finish and apply their
// results) and checks that it returned nil.
func (r *runningAgent) stop() {
	r.t.Helper()
	r.run.Stop()
}

func (r *runningAgent) get(path string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, r.base+path, nil)
	if err != nil {
		return nil, err
	}
	// The Prometheus text format.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return body, nil
}

// history reads GET /pods/{ns}/{name}/probes.
func (r *runningAgent) history(ns, name string) (agent.PodHistory, error) {
	var h agent.PodHistory
	body, err := r.get("/pods/" + ns + "/" + name + "/probes")
	if err != nil {
		return h, err
	}
	err = json.Unmarshal(body, &h)
	return h, err
}

// probeHistory returns the history of one probe of a pod (nil: none yet).
func probeHistory(h agent.PodHistory, container, typ string) *history.Probe {
	for i := range h.Probes {
		if h.Probes[i].Container == container && h.Probes[i].Type == typ {
			return &h.Probes[i]
		}
	}
	return nil
}

// writeManifest writes a manifest atomically (a hidden temporary file,
// which the agent ignores, renamed into place).
func writeManifest(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// pluginConfig links the test plugin into a directory of the test's own
// (so its process can be told apart from other tests') and writes a plugin
// configuration serving the kind "test"; it returns the configuration
// file and the plugin's directory.
func pluginConfig(t *testing.T) (cfg, dir string) {
	t.Helper()
	dir = t.TempDir()
	bin := filepath.Join(dir, "testplugin")
	// A hard link, not a copy: writing an executable while other tests
	// fork can make exec fail with ETXTBSY (golang/go#22315).
	if err := os.Link(filepath.Join(binDir, "testplugin"), bin); err != nil {
		t.Skipf("cannot link the test plugin: %v", err)
	}
	cfg = filepath.Join(t.TempDir(), "plugins.yaml")
	content := fmt.Sprintf("plugins:\n- name: testplugin\n  path: %s\n  env: {TESTPLUGIN_KINDS: test}\n", bin)
	if err := os.WriteFile(cfg, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, dir
}

// eventually polls cond every 50 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, desc := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last state: %s", what, timeout, desc)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// traceLine is one call the test plugin received: the trace context it saw.
type traceLine struct {
	traceID trace.TraceID
	spanID  trace.SpanID
	flags   string
}

// readTraceFile parses the test plugin's tracefile.
func readTraceFile(t *testing.T, path string) []traceLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []traceLine
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l == "" {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("tracefile line %q: want <trace id> <span id> <flags>", l)
		}
		tid, err := trace.TraceIDFromHex(f[0])
		if err != nil {
			t.Fatalf("tracefile line %q: the plugin received no valid trace ID: %v", l, err)
		}
		sid, err := trace.SpanIDFromHex(f[1])
		if err != nil {
			t.Fatalf("tracefile line %q: the plugin received no valid span ID: %v", l, err)
		}
		out = append(out, traceLine{tid, sid, f[2]})
	}
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
