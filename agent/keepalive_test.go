package agent_test

import (
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/internal/nettest"
)

// countingTarget is a loopback HTTP target that counts its requests and
// the connections it accepted and has open.
type countingTarget struct {
	*httptest.Server
	nettest.ConnCount
	requests atomic.Int64
}

func newCountingTarget(t *testing.T) *countingTarget {
	t.Helper()
	ct := &countingTarget{}
	ct.Server = httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, _ *nethttp.Request) {
		ct.requests.Add(1)
		_, _ = w.Write([]byte("ok"))
	}))
	ct.Track(ct.Config)
	ct.Start()
	t.Cleanup(ct.Close)
	return ct
}

func (ct *countingTarget) port() int { return ct.Listener.Addr().(*net.TCPAddr).Port }

// Kept connections through the agent: a pod whose annotation says
// httpGet.keepAlive: true is probed over one connection, run after run,
// beside a pod probed the kubelet's way (a connection per run);
// probed_http_kept_connections counts the kept one; deleting the pod
// closes it.
func TestAgent_HTTPKeepAlive(t *testing.T) {
	kept, plain := newCountingTarget(t), newCountingTarget(t)
	dir := t.TempDir()
	pod := func(name string, port int, keepAlive string) string {
		return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: shop
  annotations:
    probed.io/probes: '[{"container": "app", "type": "readiness", "periodSeconds": 1, "periodMilliseconds": -800, "httpGet": {"path": "/ready", "port": ` + strconv.Itoa(port) + keepAlive + `}}]'
spec:
  containers:
  - name: app
    image: example/app
`
	}
	writeFile(t, filepath.Join(dir, "kept.yaml"), pod("kept", kept.port(), `, "keepAlive": true`))
	writeFile(t, filepath.Join(dir, "plain.yaml"), pod("plain", plain.port(), ""))
	r := startAgent(t, dir, nil)
	r.eventually("ten runs on each pod", func() bool { return kept.requests.Load() >= 10 && plain.requests.Load() >= 10 })
	if n := kept.Accepted.Load(); n != 1 {
		t.Fatalf("the kept-alive probe opened %d connections for %d runs, want 1", n, kept.requests.Load())
	}
	if n := plain.Accepted.Load(); n < 10 {
		t.Fatalf("the plain probe opened %d connections for %d runs, want one per run", n, plain.requests.Load())
	}
	gauge := regexp.MustCompile(`(?m)^probed_http_kept_connections (\d+)$`)
	if m := gauge.FindStringSubmatch(r.text("/metrics")); m == nil || m[1] != "1" {
		t.Fatalf("probed_http_kept_connections = %v, want 1", m)
	}
	if err := os.Remove(filepath.Join(dir, "kept.yaml")); err != nil {
		t.Fatal(err)
	}
	r.eventually("the removed pod's connection closed", func() bool { return kept.Open.Load() == 0 })
	r.eventually("probed_http_kept_connections 0", func() bool {
		m := gauge.FindStringSubmatch(r.text("/metrics"))
		return m != nil && m[1] == "0"
	})
}

// --http-keep-alive keeps the connection of every HTTP probe that does not
// say otherwise.
func TestAgent_HTTPKeepAliveFlag(t *testing.T) {
	target := newCountingTarget(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "pod.yaml"), `apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: shop
spec:
  containers:
  - name: app
    image: example/app
    readinessProbe:
      periodSeconds: 1
      httpGet: {path: /ready, port: `+strconv.Itoa(target.port())+`}
`)
	startAgent(t, dir, func(o *agent.Options) { o.HTTPKeepAlive = true })
	deadline := time.Now().Add(15 * time.Second) // three runs of a 1 s probe
	for target.requests.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d runs in 15 s, want 3", target.requests.Load())
		}
		time.Sleep(25 * time.Millisecond)
	}
	if n := target.Accepted.Load(); n != 1 {
		t.Fatalf("a spec probe under --http-keep-alive opened %d connections for %d runs, want 1", n, target.requests.Load())
	}
}
