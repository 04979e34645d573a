package statuspage_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/internal/agenttest"
)

// The browser tests drive a real headless Chromium (Debian's chromium
// package) through chromedp against a real agent (agent.New and Run, manifest
// mode) probing real loopback targets. Without a chromium binary they skip,
// unless PROBED_REQUIRE_BROWSER=1 (CI), when they fail.
// PROBED_SCREENSHOT_DIR=docs writes the screenshots of docs/operations.md.

// chromiumNames are the binaries tried, in order, on PATH; PROBED_CHROMIUM
// names one explicitly.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

func chromiumPath() string {
	if p := os.Getenv("PROBED_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// shared is the one Chromium of the package's tests (started by the first
// test that needs it, stopped by TestMain); each test opens its own tab.
var shared struct {
	once         sync.Once
	ctx          context.Context // the browser's first tab
	cancel       func()
	err          error
	path         string
	closeBrowser func()
}

// stopBrowser ends the shared Chromium, if one was started.
func stopBrowser() {
	if shared.closeBrowser != nil {
		shared.closeBrowser()
	}
}

// browser returns a new tab of the shared headless Chromium, closed at the
// test's cleanup. It skips the test when no chromium binary is found,
// unless PROBED_REQUIRE_BROWSER=1.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		msg := fmt.Sprintf("no chromium binary (PROBED_CHROMIUM, or %s on PATH): install Debian's chromium package", strings.Join(chromiumNames, ", "))
		if os.Getenv("PROBED_REQUIRE_BROWSER") == "1" {
			t.Fatal("PROBED_REQUIRE_BROWSER=1: " + msg)
		}
		t.Skip(msg + "; set PROBED_REQUIRE_BROWSER=1 to fail instead")
	}
	shared.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
			chromedp.WindowSize(1280, 800), chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
		allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(allocCtx)
		shared.ctx, shared.path = ctx, path
		shared.closeBrowser = func() { cancel(); cancelAlloc() }
		shared.err = chromedp.Do(ctx) // starts the browser
	})
	if shared.err != nil {
		t.Fatalf("starting %s: %v", shared.path, shared.err)
	}
	tab, closeTab := chromedp.NewContext(shared.ctx)
	t.Cleanup(closeTab)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	return tab
}

// tcpServer is a loopback listener that accepts and closes connections
// until down is called.
type tcpServer struct {
	ln   net.Listener
	port int
	once sync.Once
	done chan struct{}
}

func newTCPServer(t *testing.T) *tcpServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tcpServer{ln: ln, port: ln.Addr().(*net.TCPAddr).Port, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(s.down)
	return s
}

// down takes the target down: connections are refused from now on.
func (s *tcpServer) down() {
	s.once.Do(func() {
		s.ln.Close()
		<-s.done
	})
}

// browserSecrets are the secrets of shop/vault's annotation probe;
// rejectedFile is the name of a manifest the agent rejects, with an ESC
// sequence that would clear a terminal.
var browserSecrets = []string{"BROWSER-TOKEN-1", "BROWSER-HEADER-2"}

const rejectedFile = "bad\x1b[2J.yaml"

// hostileAnnotation and hostileOutput are pod values that hold markup and
// script; the page must show them as text.
const (
	hostileAnnotation = `<script>window.__pwned="annotation"</script><img src=x onerror="window.__pwned='img'">`
	hostileOutput     = `<script>window.__pwned="output"</script><b onmouseover="window.__pwned=1">bold</b>`
)

// startAgent runs a real agent on loopback over a manifest directory with
// three pods: shop/api (an HTTP readiness probe), shop/web (an HTTP liveness probe and a TCP readiness probe of
// real loopback targets, period 1 s), shop/hostile (an annotation with
// markup, an exec readiness probe whose failure message is markup),
// shop/vault (an annotation probe with secrets) and a rejected manifest.
func startAgent(t *testing.T) (base string, tcp *tcpServer) {
	t.Helper()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(web.Close)
	webPort := web.Listener.Addr().(*net.TCPAddr).Port
	tcp = newTCPServer(t)
	dir := t.TempDir()
	manifests := map[string]string{
		"web.yaml": fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  containers:
  - name: app
    image: app
    ports: [{name: http, containerPort: %d}]
    livenessProbe:
      httpGet: {path: /healthz, port: http}
      periodSeconds: 1
      timeoutSeconds: 5
      failureThreshold: 3
    readinessProbe:
      tcpSocket: {port: %d}
      periodSeconds: 1
      timeoutSeconds: 5
      failureThreshold: 2
`, webPort, tcp.port),
		"api.yaml": fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: api, namespace: shop}
spec:
  containers:
  - name: api
    image: api
    readinessProbe:
      httpGet: {path: /ready, port: %d}
      periodSeconds: 1
      timeoutSeconds: 5
`, webPort),
		"hostile.yaml": fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: hostile
  namespace: shop
  annotations:
    note: %q
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      exec: {command: [sh, -c, %q]}
      periodSeconds: 1
      timeoutSeconds: 5
`, hostileAnnotation, "printf '%s' '"+hostileOutput+"'; exit 1"),
		// An annotation probe whose query and header carry secrets: the
		// page shows its target redacted.
		"vault.yaml": fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: vault
  namespace: shop
  annotations:
    probed.io/probes: '[{"container":"app","type":"readiness","periodSeconds":1,"timeoutSeconds":5,"httpGet":{"path":"/ready?token=%s","port":%d,"httpHeaders":[{"name":"X-Auth","value":"%s"}]}}]'
spec:
  containers:
  - name: app
    image: app
`, browserSecrets[0], webPort, browserSecrets[1]),
		// A rejected manifest whose file name holds an ESC sequence:
		// the rejected-manifests table shows it escaped.
		rejectedFile: "kind: Pod\nmetadata: {name: [\n",
	}
	writeManifests(t, dir, manifests)
	return runAgent(t, dir, "", nil), tcp
}

// writeManifests writes each manifest under its file name in dir.
func writeManifests(t *testing.T, dir string, manifests map[string]string) {
	t.Helper()
	for name, body := range manifests {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// runAgent runs a real agent (agent.New and Run, manifest mode, host exec
// allowed) over dir until the test's cleanup, and returns its base URL. It
// listens on listen, or on a free loopback port when listen is "" or
// taken. prepare, when set, is called with the agent's listen address after
// New and before Run: the manifests are read at Run.
func runAgent(t *testing.T, dir, listen string, prepare func(addr string)) string {
	t.Helper()
	free := "127.0.0.1:0"
	if listen == "" {
		listen = free
	}
	opts := agent.Options{ManifestDir: dir, Listen: listen, AllowHostExec: true, PoolSize: 8, ExecPoolSize: 2,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	a, err := agent.New(opts)
	if err != nil && listen != free {
		t.Logf("listening on %s: %v; on a free port instead", listen, err)
		opts.Listen = free
		a, err = agent.New(opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(a.Addr().String())
	}
	return runUntilCleanup(t, a)
}

// runUntilCleanup runs a until the test's cleanup and returns its base URL.
func runUntilCleanup(t *testing.T, a *agent.Agent) string {
	t.Helper()
	return agenttest.Of(t, a).Base
}

// attribute reads an attribute of the first element a CSS selector
// matches now; "" when no element matches or it has no such attribute. It
// reads the DOM through the DevTools protocol, so it works with the page's
// JavaScript disabled.
func attribute(ctx context.Context, t *testing.T, css, name string) string {
	t.Helper()
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := chromedp.Run(qctx, chromedp.Nodes(chromedp.CSS(css), chromedp.AtLeast(0)))
	if err != nil {
		t.Fatalf("%s: %v", css, err)
	}
	if len(nodes) == 0 {
		return ""
	}
	return nodes[0].AttributeValue(name)
}

// waitFor polls cond every 100 ms until it holds or the bound passes; it
// returns how long it took.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %s", what, bound)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

// selectorFor is the CSS selector of a probe row of a pod on the index.
func selectorFor(pod, probe string) string {
	return fmt.Sprintf(`tbody[data-pod=%q] tr[data-probe=%q]`, pod, probe)
}

// pageText is the page's whole text (textContent of the document element).
func pageText(ctx context.Context, t *testing.T) string {
	t.Helper()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.textContent`))
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// TestBrowser_RowsTurnFailingAndHostileValuesAreInert: in a real browser
// with JavaScript on, the index shows the agent's pods and probes; a TCP
// target taken down turns its row failing within a period (plus the page's
// one-second refresh, no reload: the refresh script); the pods' markup is
// shown literally and no script of it ran.
func TestBrowser_RowsTurnFailingAndHostileValuesAreInert(t *testing.T) {
	ctx := browser(t)
	base, tcp := startAgent(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/?refresh=1")); err != nil {
		t.Fatal(err)
	}
	web := selectorFor("shop/web", "app/readiness")
	waitFor(t, 10*time.Second, "shop/web readiness succeeds", func() bool { return attribute(ctx, t, web, "data-result") == "success" })
	// Timeouts of 5 s keep a loaded machine (the race detector, parallel
	// packages) from failing the healthy probes.
	waitFor(t, 10*time.Second, "shop/web liveness and shop/api readiness succeed", func() bool {
		return attribute(ctx, t, selectorFor("shop/web", "app/liveness"), "data-result") == "success" &&
			attribute(ctx, t, selectorFor("shop/api", "api/readiness"), "data-result") == "success"
	})
	if got := attribute(ctx, t, "html", "data-refresh-script"); got != "on" {
		t.Fatalf("the refresh script did not run (data-refresh-script=%q): JavaScript is off?", got)
	}
	waitFor(t, 10*time.Second, "shop/hostile readiness fails", func() bool {
		return attribute(ctx, t, selectorFor("shop/hostile", "app/readiness"), "data-result") == "failure"
	})
	text := pageText(ctx, t)
	for _, want := range []string{"shop/web", "shop/hostile", "GET http://127.0.0.1:", fmt.Sprintf("tcp :%d", tcp.port), hostileOutput} {
		if !strings.Contains(text, want) {
			t.Errorf("page text misses %q", want)
		}
	}
	// Failing first: the hostile pod's failing row precedes the others.
	order, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("tbody[data-pod]")).map(e => e.dataset.pod)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, " ") != "shop/hostile shop/api shop/vault shop/web" {
		t.Errorf("rows %v, want the failing pod first", order)
	}
	assertNoScriptRan(ctx, t)
	assertRedactedAndEscaped(ctx, t, true)

	tcp.down()
	took := waitFor(t, 10*time.Second, "shop/web readiness row turns failing after its target went down", func() bool {
		return attribute(ctx, t, web, "data-result") == "failure"
	})
	// One period (1 s) for the next run, one refresh (1 s) to show it,
	// and slack for a loaded machine.
	if bound := 1*time.Second + 1*time.Second + 3*time.Second; took > bound {
		t.Errorf("row turned failing after %s, want within %s", took, bound)
	}
	if got := attribute(ctx, t, `tbody[data-pod="shop/web"]`, "data-failing"); got != "true" {
		t.Errorf("shop/web pod data-failing=%q after its readiness failed", got)
	}
	if got := attribute(ctx, t, selectorFor("shop/api", "api/readiness"), "data-result"); got != "success" {
		t.Errorf("the healthy shop/api readiness row turned %q", got)
	}

	// The pod's page: its history and its annotation, as text.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/pod/shop/hostile?refresh=0")); err != nil {
		t.Fatal(err)
	}
	text = pageText(ctx, t)
	for _, want := range []string{hostileAnnotation, hostileOutput, "after thresholds"} {
		if !strings.Contains(text, want) {
			t.Errorf("pod page misses %q", want)
		}
	}
	assertNoScriptRan(ctx, t)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/pod/shop/vault?refresh=0")); err != nil {
		t.Fatal(err)
	}
	if text := pageText(ctx, t); !strings.Contains(text, "/ready?token=REDACTED") {
		t.Errorf("shop/vault's page misses its redacted target:\n%s", text)
	}
	assertRedactedAndEscaped(ctx, t, false)
}

// assertRedactedAndEscaped: the page's text holds neither shop/vault's
// secrets nor a raw control character, and the index lists the rejected
// file's name escaped as `probed status` prints it.
func assertRedactedAndEscaped(ctx context.Context, t *testing.T, index bool) {
	t.Helper()
	text := pageText(ctx, t)
	for _, secret := range browserSecrets {
		if strings.Contains(text, secret) {
			t.Errorf("the page shows %s", secret)
		}
	}
	if i := strings.IndexFunc(text, func(r rune) bool { return r < 0x20 && r != '\n' }); i >= 0 {
		t.Errorf("raw control %q in the page's text: %q", text[i], text[max(0, i-40):min(len(text), i+40)])
	}
	if index && !strings.Contains(text, `bad\x1b[2J.yaml`) {
		t.Errorf("the rejected manifest is not listed escaped:\n%s", text)
	}
}

// assertNoScriptRan: no hostile script or handler set the flag, and the
// hostile markup made no element (no img, no b, only the page's script).
func assertNoScriptRan(ctx context.Context, t *testing.T) {
	t.Helper()
	type pageState struct {
		Pwned   string `json:"pwned"`
		Scripts int    `json:"scripts"`
		Images  int    `json:"images"`
		Bolds   int    `json:"bolds"`
	}
	state, err := chromedp.Run(ctx, chromedp.Evaluate[pageState](`({pwned: String(window.__pwned), scripts: document.scripts.length, images: document.images.length, bolds: document.getElementsByTagName("b").length})`))
	if err != nil {
		t.Fatal(err)
	}
	if state.Pwned != "undefined" || state.Scripts != 1 || state.Images != 0 || state.Bolds != 0 {
		t.Errorf("hostile markup was live: %+v", state)
	}
}

// TestBrowser_WorksWithJavaScriptDisabled: with script execution disabled,
// the index shows the rows, the filters (query parameters, applied on the
// server) work, and a pod's link opens its page with the history.
func TestBrowser_WorksWithJavaScriptDisabled(t *testing.T) {
	ctx := browser(t)
	base, _ := startAgent(t)
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	web := selectorFor("shop/web", "app/readiness")
	waitFor(t, 10*time.Second, "shop/web readiness shown as success after reloads", func() bool {
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
			t.Fatal(err)
		}
		return attribute(ctx, t, web, "data-result") == "success"
	})
	if got := attribute(ctx, t, "html", "data-refresh-script"); got != "" {
		t.Fatalf("the refresh script ran with JavaScript disabled (data-refresh-script=%q)", got)
	}
	// Submit the filter form without script: failing only.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`input[name="failing"]`)), chromedp.Query(chromedp.CSS(`input[name="failing"]:checked`))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`form.filters button[type="submit"]`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "failing-only shows shop/hostile alone", func() bool {
		// AtLeast(0) and a bound: the filtered index may list no pod yet
		// (shop/hostile not failing yet), and Nodes would wait for one
		// forever, past waitFor's bound.
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		nodes, err := chromedp.Run(qctx, chromedp.Nodes(chromedp.CSS(`tbody[data-pod]`), chromedp.AtLeast(0)))
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) == 1 && nodes[0].AttributeValue("data-pod") == "shop/hostile" {
			return true
		}
		if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
			t.Fatal(err)
		}
		return false
	})
	if got := attribute(ctx, t, "form.filters", "action"); got != "/" {
		t.Errorf("form action %q", got)
	}
	// Follow the pod link without script.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/?namespace=shop&q=web")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`tbody[data-pod="shop/web"] th.pod-name a`))); err != nil {
		t.Fatal(err)
	}
	if got := attribute(ctx, t, "#pod", "data-pod"); got != "shop/web" {
		t.Fatalf("pod page for %q", got)
	}
	nodes, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSS(`section[data-probe="app/readiness"] tr.run`), chromedp.AtLeast(1)))
	if err != nil || len(nodes) == 0 {
		t.Fatalf("pod page history rows: %d %v", len(nodes), err)
	}
}

// screenshot writes a full-page PNG of url to $PROBED_SCREENSHOT_DIR/name
// when that variable is set: PROBED_SCREENSHOT_DIR=$PWD/docs go test -run
// TestBrowser_BundledDemo ./agent/statuspage/ renews docs/status-page*.png
// (the README's and docs/operations.md's) from the bundled demo.
func screenshot(ctx context.Context, t *testing.T, url, name string) {
	t.Helper()
	dir := os.Getenv("PROBED_SCREENSHOT_DIR")
	if dir == "" {
		return
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 600), chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", filepath.Join(dir, name), len(png))
}
