package agent_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/internal/agenttest"
	"github.com/probed/probed/internal/nettest"
	"github.com/probed/probed/internal/testlog"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// running is an agent started in-process on a temp manifest directory.
type running struct {
	t      *testing.T
	a      *agent.Agent
	dir    string
	logs   *testlog.Buffer
	client *http.Client
	base   string
	run    *agenttest.Run
}

// newRunning runs a until the test ends, its log shown when the test fails.
func newRunning(t *testing.T, a *agent.Agent, dir string, logs *testlog.Buffer) *running {
	t.Helper()
	t.Cleanup(func() { // after the agent's stop
		if t.Failed() {
			t.Logf("agent logs:\n%s", logs.String())
		}
	})
	run := agenttest.Of(t, a)
	return &running{t: t, a: a, dir: dir, logs: logs, run: run, base: run.Base,
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}}
}

func startAgent(t *testing.T, dir string, mutate func(*agent.Options)) *running {
	t.Helper()
	logs := &testlog.Buffer{}
	opts := agent.Options{
		ManifestDir:   dir,
		Listen:        "127.0.0.1:0",
		Rescan:        500 * time.Millisecond,
		SyncFrequency: time.Second,
		PoolSize:      32,
		ExecPoolSize:  4,
		Logger:        slog.New(slog.NewJSONHandler(logs, nil)),
	}
	if mutate != nil {
		mutate(&opts)
	}
	a, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return newRunning(t, a, dir, logs)
}

// stop ends the agent's Run and checks that it returned nil.
func (r *running) stop() {
	r.t.Helper()
	r.run.Stop()
}

func (r *running) get(path string, into any) {
	r.t.Helper()
	if err := json.Unmarshal([]byte(r.getPage(path)), into); err != nil {
		r.t.Fatalf("GET %s: %v", path, err)
	}
}

// getPage returns the body of a GET that must answer 200 (the status page,
// or the JSON that get decodes).
func (r *running) getPage(path string) string {
	r.t.Helper()
	resp, err := r.client.Get(r.base + path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		r.t.Fatalf("GET %s = %d %s", path, resp.StatusCode, body)
	}
	// The page's line-break hints (<wbr> after a path's separators) are
	// not text: without them a value, or a secret, is matched whole.
	return strings.ReplaceAll(string(body), "<wbr>", "")
}

func (r *running) pods() map[string]v1.Pod {
	r.t.Helper()
	var list v1.PodList
	r.get("/pods", &list)
	if list.Kind != "PodList" || list.APIVersion != "v1" {
		r.t.Fatalf("/pods kind %q apiVersion %q", list.Kind, list.APIVersion)
	}
	out := map[string]v1.Pod{}
	for _, p := range list.Items {
		out[p.Namespace+"/"+p.Name] = p
	}
	return out
}

func (r *running) events() []events.Event {
	r.t.Helper()
	var out struct {
		Events []events.Event `json:"events"`
	}
	r.get("/events", &out)
	return out.Events
}

// eventually polls cond for up to 5 s.
func (r *running) eventually(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s; pods: %s", what, r.podsSummary())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (r *running) podsSummary() string {
	var b strings.Builder
	for name, p := range r.pods() {
		fmt.Fprintf(&b, "\n  %s uid=%s phase=%s", name, p.UID, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " [%s ready=%v started=%v restarts=%d]", cs.Name, cs.Ready, cs.Started != nil && *cs.Started, cs.RestartCount)
		}
	}
	return b.String()
}

func container(p v1.Pod, name string) (v1.ContainerStatus, bool) {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == name {
			return cs, true
		}
	}
	return v1.ContainerStatus{}, false
}

func podReady(p v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func webYAML(port int, readyPath string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: shop
spec:
  terminationGracePeriodSeconds: 60
  containers:
  - name: app
    image: example/web
    readinessProbe:
      httpGet: {path: %s, port: %d}
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      httpGet: {path: /live, port: %d}
      periodSeconds: 1
      failureThreshold: 1
      terminationGracePeriodSeconds: 5
`, readyPath, port, port)
}

func tcpJSON(port int) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"cache"},
"spec":{"containers":[{"name":"redis","image":"example/redis",
"readinessProbe":{"tcpSocket":{"port":%d},"periodSeconds":1}}]}}`, port)
}

const execYAML = `apiVersion: v1
kind: Pod
metadata:
  name: scripted
spec:
  containers:
  - name: job
    image: example/job
    livenessProbe:
      exec: {command: ["false"]}
      periodSeconds: 1
      failureThreshold: 1
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 1
`

// TestAgent_EndToEnd runs the agent in-process against real loopback
// targets and a real manifest directory:
//   - pods from YAML and JSON files appear in /pods and turn Ready once
//     their readiness probes succeed (HTTP and TCP);
//   - a readiness target that starts failing flips Ready to false (and the
//     pod's Ready condition), and back;
//   - a liveness failure restarts the container (restartCount grows in
//     /pods, a Killing event with the kubelet's message) and runs the
//     --on-restart command with the PROBED_* environment;
//   - without AllowHostExec an exec probe never changes a result (no
//     restart, never Ready) and an Unhealthy "errored" event names why;
//   - a file added while running is picked up, a modified file replaces
//     its pod (new UID), a removed file removes its pod;
//   - cancelling the context makes Run return nil, with no goroutine left
//     (goleak in TestMain).
func TestAgent_EndToEnd(t *testing.T) {
	dir := t.TempDir()
	outDir := t.TempDir()
	tg := nettest.NewTarget(t)
	tcpPort := nettest.AcceptAndClose(t)
	tg.Set("/ready", 500)
	writeFile(t, filepath.Join(dir, "web.yaml"), webYAML(tg.Port, "/ready"))
	writeFile(t, filepath.Join(dir, "cache.json"), tcpJSON(tcpPort))
	writeFile(t, filepath.Join(dir, "scripted.yaml"), execYAML)
	writeFile(t, filepath.Join(dir, "README.md"), "not a manifest")
	onRestart := `env | grep '^PROBED_' | sort > "` + outDir + `/restart-$PROBED_RESTART_COUNT.tmp" && mv "` + outDir + `/restart-$PROBED_RESTART_COUNT.tmp" "` + outDir + `/restart-$PROBED_RESTART_COUNT"`
	r := startAgent(t, dir, func(o *agent.Options) { o.OnRestart = onRestart })

	// Pods appear; TCP readiness succeeds; web waits for /ready.
	r.eventually("pods listed and cache Ready", func() bool {
		pods := r.pods()
		c, ok := container(pods["default/cache"], "redis")
		_, web := pods["shop/web"]
		_, scripted := pods["default/scripted"]
		return ok && c.Ready && podReady(pods["default/cache"]) && web && scripted && len(pods) == 3
	})
	if c, _ := container(r.pods()["shop/web"], "app"); c.Ready {
		t.Fatal("web Ready while /ready fails")
	}
	tg.Set("/ready", 200)
	r.eventually("web Ready", func() bool {
		p := r.pods()["shop/web"]
		c, _ := container(p, "app")
		return c.Ready && podReady(p)
	})

	// Readiness target fails → Ready false.
	tg.Set("/ready", 503)
	r.eventually("web not Ready", func() bool {
		p := r.pods()["shop/web"]
		c, _ := container(p, "app")
		return !c.Ready && !podReady(p)
	})
	tg.Set("/ready", 200)
	r.eventually("web Ready again", func() bool { c, _ := container(r.pods()["shop/web"], "app"); return c.Ready })

	// Liveness failure → restart, on-restart command with PROBED_*.
	web := r.pods()["shop/web"]
	before, _ := container(web, "app")
	tg.Set("/live", 500)
	r.eventually("a restart", func() bool { c, _ := container(r.pods()["shop/web"], "app"); return c.RestartCount >= 1 })
	tg.Set("/live", 200)
	after, _ := container(r.pods()["shop/web"], "app")
	if after.ContainerID == before.ContainerID || after.LastTerminationState.Terminated == nil ||
		after.LastTerminationState.Terminated.ExitCode != 137 || after.LastTerminationState.Terminated.ContainerID != before.ContainerID {
		t.Errorf("after restart: %+v", after)
	}
	var envFile []byte
	r.eventually("the on-restart command's output", func() bool {
		b, err := os.ReadFile(filepath.Join(outDir, "restart-1"))
		envFile = b
		return err == nil
	})
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(envFile)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	for k, want := range map[string]string{
		"PROBED_POD_NAME": "web", "PROBED_POD_NAMESPACE": "shop", "PROBED_POD_UID": string(web.UID),
		"PROBED_CONTAINER_NAME": "app", "PROBED_OLD_CONTAINER_ID": before.ContainerID,
		"PROBED_RESTART_COUNT": "1", "PROBED_REASON": "LivenessProbe", "PROBED_RESTARTED": "true",
		"PROBED_GRACE_PERIOD_SECONDS": "5",
	} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}
	if !strings.HasPrefix(env["PROBED_CONTAINER_ID"], "probed://") || env["PROBED_CONTAINER_ID"] == before.ContainerID {
		t.Errorf("PROBED_CONTAINER_ID = %q", env["PROBED_CONTAINER_ID"])
	}
	var killing, execErrored *events.Event
	r.eventually("Killing and exec errored events", func() bool {
		for _, e := range r.events() {
			switch {
			case e.Reason == "Killing" && e.Pod == "web":
				killing = &e
			case e.Reason == "Unhealthy" && e.Pod == "scripted" && strings.Contains(e.Message, "Liveness probe errored"):
				execErrored = &e
			}
		}
		return killing != nil && execErrored != nil
	})
	if killing.Type != "Normal" || killing.Message != "Container app failed liveness probe, will be restarted" || killing.FieldPath != "spec.containers{app}" {
		t.Errorf("Killing event = %+v", killing)
	}
	if execErrored.Type != "Warning" || !strings.Contains(execErrored.Message, "resulted in unknown state") ||
		!strings.Contains(execErrored.Message, "host exec disabled") {
		t.Errorf("exec event = %+v, want the errored message with the reason", execErrored)
	}
	// The exec pod: never restarted, never Ready.
	if c, _ := container(r.pods()["default/scripted"], "job"); c.RestartCount != 0 || c.Ready {
		t.Errorf("exec pod changed without host exec: %+v", c)
	}

	// A file added while running.
	newPath := filepath.Join(dir, "later.yaml")
	writeFile(t, newPath, strings.NewReplacer("name: web", "name: later", "/ready", "/later").Replace(webYAML(tg.Port, "/ready")))
	r.eventually("the added pod Ready", func() bool {
		c, ok := container(r.pods()["shop/later"], "app")
		return ok && c.Ready
	})
	// A modified file replaces its pod: new UID, new probe.
	oldCache := r.pods()["default/cache"]
	writeFile(t, filepath.Join(dir, "cache.json"), strings.Replace(tcpJSON(tcpPort), `"tcpSocket":{"port":`+strconv.Itoa(tcpPort)+`}`,
		`"httpGet":{"path":"/cache","port":`+strconv.Itoa(tg.Port)+`}`, 1))
	r.eventually("cache replaced and probed over HTTP", func() bool {
		p, ok := r.pods()["default/cache"]
		c, _ := container(p, "redis")
		return ok && p.UID != oldCache.UID && c.Ready && tg.Hits("/cache") > 0
	})
	// A removed file removes its pod.
	if err := os.Remove(newPath); err != nil {
		t.Fatal(err)
	}
	r.eventually("the removed pod gone", func() bool { _, ok := r.pods()["shop/later"]; return !ok })
	laterHits := tg.Hits("/later")
	time.Sleep(1500 * time.Millisecond)
	if n := tg.Hits("/later"); n > laterHits+1 {
		t.Errorf("removed pod still probed: %d → %d requests", laterHits, n)
	}
	if c, _ := container(r.pods()["default/scripted"], "job"); c.RestartCount != 0 {
		t.Errorf("exec pod restarted: %+v", c)
	}
	r.stop()
}

// TestAgent_ModifiedFileWithFixedUIDReplacesThePod: a manifest that sets
// metadata.uid (as `kubectl get pod -o yaml` output does) keeps its UID when
// edited; the edited probes must still replace the old ones: the pod is
// removed and added again under the same UID, with fresh workers.
func TestAgent_ModifiedFileWithFixedUIDReplacesThePod(t *testing.T) {
	dir := t.TempDir()
	tg := nettest.NewTarget(t)
	tg.Set("/old", 500)
	manifest := func(path string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: fixed
  uid: 6f1c1d3e-0000-4000-8000-000000000001
spec:
  containers:
  - name: app
    image: example/app
    readinessProbe:
      httpGet: {path: %s, port: %d}
      periodSeconds: 1
      failureThreshold: 1
`, path, tg.Port)
	}
	path := filepath.Join(dir, "fixed.yaml")
	writeFile(t, path, manifest("/old"))
	r := startAgent(t, dir, nil)
	r.eventually("the pod probed on /old", func() bool {
		_, ok := r.pods()["default/fixed"]
		return ok && tg.Hits("/old") > 0
	})
	writeFile(t, path, manifest("/new"))
	r.eventually("the edited probe used and the pod Ready", func() bool {
		p := r.pods()["default/fixed"]
		c, _ := container(p, "app")
		return p.UID == "6f1c1d3e-0000-4000-8000-000000000001" && c.Ready && tg.Hits("/new") > 0 &&
			p.Spec.Containers[0].ReadinessProbe.HTTPGet.Path == "/new"
	})
	oldHits := tg.Hits("/old")
	time.Sleep(1500 * time.Millisecond)
	if n := tg.Hits("/old"); n > oldHits+1 {
		t.Errorf("the old probe still runs: %d → %d requests", oldHits, n)
	}
	r.stop()
}
