package statuspage_test

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/probed/probed/examples"
)

// TestBrowser_BundledDemo: the bundled demo (`probed run
// --allow-host-exec` without --manifests: examples/manifests, its port 8089
// turned into the agent's own port, as the demo probes the agent it runs
// in: 8089 itself when the screenshots are written and it is free) in a
// real browser. While demo/crashy waits in CrashLoopBackOff the
// index says so in its STATUS and beside its container, with the time left
// until the restart, and so does its page; probed-self is ready and worker
// has started. With PROBED_SCREENSHOT_DIR set it writes the screenshots of
// the README and docs/operations.md (docs/status-page.png,
// docs/status-page-pod.png) at that moment, so they show the demo a user
// runs.
func TestBrowser_BundledDemo(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	// The screenshots show the demo as a user sees it, on the default
	// --listen when it is free.
	listen := ""
	if os.Getenv("PROBED_SCREENSHOT_DIR") != "" {
		listen = "127.0.0.1:8089"
	}
	base := runAgent(t, dir, listen, func(addr string) {
		_, port, _ := strings.Cut(addr, ":")
		err := fs.WalkDir(examples.Manifests, "manifests", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := examples.Manifests.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, filepath.Base(path)), []byte(strings.ReplaceAll(string(data), "8089", port)), 0o600)
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(base+"/?refresh=1")); err != nil {
		t.Fatal(err)
	}
	crashy := `tbody[data-pod="demo/crashy"]`
	// crashy's liveness probe (period 2 s, failureThreshold 2) kills it
	// about every 4 s: restarted at once twice, then it backs off 10 s.
	waitFor(t, 40*time.Second, "demo/crashy in CrashLoopBackOff on the index", func() bool {
		return attribute(ctx, t, crashy, "data-status") == "CrashLoopBackOff"
	})
	state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('tbody[data-pod="demo/crashy"] tr[data-probe="app/liveness"] td.container .state') || {}).textContent || ""`))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^waiting: CrashLoopBackOff, restart (in \d+s|due) \(back-off \d+s\)$`).MatchString(state) {
		t.Errorf("crashy's container state on the index: %q", state)
	}
	waitFor(t, 20*time.Second, "probed-self ready and worker started", func() bool {
		ready, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`["demo/probed-self", "demo/worker"].map(p => (document.querySelector('tbody[data-pod="' + p + '"] td.ready') || {}).textContent)`))
		return err == nil && len(ready) == 2 && ready[0] == "1/1" && ready[1] == "1/1"
	})
	if attribute(ctx, t, crashy, "data-status") == "CrashLoopBackOff" {
		screenshot(ctx, t, base+"/?refresh=0", "status-page.png")
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/pod/demo/crashy?refresh=0")); err != nil {
		t.Fatal(err)
	}
	text := pageText(ctx, t)
	if !strings.Contains(text, "restarts") || !regexp.MustCompile(`(CrashLoopBackOff|waiting: CrashLoopBackOff, restart (in \d+s|due))`).MatchString(text) {
		t.Errorf("crashy's page does not show its state:\n%s", text)
	}
	if strings.Contains(text, "waiting: CrashLoopBackOff") {
		screenshot(ctx, t, base+"/pod/demo/crashy?refresh=0", "status-page-pod.png")
	}
}

// lineBreaks is a script that, for every element a CSS selector matches,
// finds where the browser broke its text into lines (from the layout
// rectangles of its characters) and returns, per element, its text, its
// number of lines and the breaks that fall between two letters or digits
// (mid-word).
const lineBreaks = `(sel => Array.from(document.querySelectorAll(sel)).map(el => {
  const chars = [];
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    for (let i = 0; i < n.data.length; i++) {
      const r = document.createRange();
      r.setStart(n, i); r.setEnd(n, i + 1);
      const rects = r.getClientRects();
      if (rects.length > 0 && rects[0].width > 0) chars.push({c: n.data[i], top: rects[0].top});
    }
  }
  let lines = chars.length ? 1 : 0;
  const midWord = [];
  for (let i = 1; i < chars.length; i++) {
    if (chars[i].top > chars[i - 1].top + 2) {
      lines++;
      if (/[A-Za-z0-9]/.test(chars[i - 1].c) && /[A-Za-z0-9]/.test(chars[i].c)) midWord.push(chars[i - 1].c + "|" + chars[i].c + " at " + i);
    }
  }
  return {text: el.textContent, lines: lines, midWord: midWord};
}))`

type wrapping struct {
	Text    string   `json:"text"`
	Lines   int      `json:"lines"`
	MidWord []string `json:"midWord"`
}

// wrapsOf runs lineBreaks for a selector.
func wrapsOf(ctx context.Context, t *testing.T, selector string) []wrapping {
	t.Helper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[]wrapping](fmt.Sprintf("%s(%q)", lineBreaks, selector)))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBrowser_LongValuesWrapBetweenWordsAndStaleIsShown:
// in a real browser at a narrow width, a long target, a long manifest file
// name and a long failure message wrap — only between words or after a
// path or query separator, never between two letters or digits — and
// times never wrap; a pod whose manifest turns invalid is marked stale on
// the index, and its page shows why and the probed.io/ManifestStale
// condition among the pod's conditions.
func TestBrowser_LongValuesWrapBetweenWordsAndStaleIsShown(t *testing.T) {
	ctx := browser(t)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(web.Close)
	_, port, _ := strings.Cut(web.Listener.Addr().String(), ":")
	dir := t.TempDir()
	podYAML := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: payments-backend, namespace: shop}
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      httpGet: {path: "/api/v1/namespaces/shop/services/payments-backend-production/proxy/healthz?verbose=1&deep=true&component=database", port: %s}
      periodSeconds: 1
      timeoutSeconds: 5
`, port)
	long := "payments-backend-production-deployment-in-the-shop-namespace.yaml"
	writeManifests(t, dir, map[string]string{
		long:                       podYAML,
		"rejected-" + long:         "kind: Pod\nmetadata: {name: [\n",
		"another-" + long + ".yml": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: app, image: app, readinessProbe: {tcpSocket: {port: 0}}}]}\n",
	})
	base := runAgent(t, dir, "", nil)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(720, 900), chromedp.Navigate(base+"/?refresh=1")); err != nil {
		t.Fatal(err)
	}
	row := selectorFor("shop/payments-backend", "app/readiness")
	waitFor(t, 15*time.Second, "the readiness probe failed", func() bool { return attribute(ctx, t, row, "data-result") == "failure" })

	check := func(page, selector string, mustWrap bool) {
		t.Helper()
		ws := wrapsOf(ctx, t, selector)
		if len(ws) == 0 {
			t.Fatalf("%s: nothing matches %s", page, selector)
		}
		wrapped := false
		for _, w := range ws {
			if len(w.MidWord) > 0 {
				t.Errorf("%s: %s wraps mid-word %v: %q", page, selector, w.MidWord, w.Text)
			}
			wrapped = wrapped || w.Lines > 1
		}
		if mustWrap && !wrapped {
			t.Errorf("%s: no %s wrapped at this width: the check proves nothing", page, selector)
		}
	}
	checkTimes := func(page string) {
		t.Helper()
		for _, w := range wrapsOf(ctx, t, "time") {
			if w.Lines > 1 {
				t.Errorf("%s: a time wraps over %d lines: %q", page, w.Lines, w.Text)
			}
		}
	}
	check("index", row+" td.target code", true)
	check("index", "#manifests td:first-child code", true)
	check("index", "#manifests td.msg", false)
	check("index", row+" td.failure .msg", false)
	checkTimes("index")
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/pod/shop/payments-backend?refresh=0")); err != nil {
		t.Fatal(err)
	}
	check("pod page", "h3 code", true)
	check("pod page", "table.history td.msg", false)
	checkTimes("pod page")

	// The manifest turns invalid: its pod goes on at its last valid
	// version, marked stale.
	writeManifests(t, dir, map[string]string{long: podYAML + "    readinesProbe: {}\n"})
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/?refresh=1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the pod marked stale on the index", func() bool {
		return attribute(ctx, t, `tbody[data-pod="shop/payments-backend"]`, "data-stale") == "true"
	})
	if text := pageText(ctx, t); !strings.Contains(text, "stale manifest") {
		t.Errorf("the index shows no stale mark")
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/pod/shop/payments-backend?refresh=0")); err != nil {
		t.Fatal(err)
	}
	text := pageText(ctx, t)
	for _, want := range []string{"Stale manifest:", `unknown field "readinesProbe"`, "probed.io/ManifestStale", "ManifestInvalid", "ContainersReady"} {
		if !strings.Contains(text, want) {
			t.Errorf("the stale pod's page misses %q:\n%s", want, text)
		}
	}
}
