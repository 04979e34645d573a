package agent_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/agent/kube/gate"
	"github.com/probed/probed/internal/kubetest"
)

// apiServerOutage is how long the API server stays down ("the
// API server stopped for 30 s and restarted loses nothing").
const apiServerOutage = 30 * time.Second

// convergeAfterRestart bounds the time from the restarted API server being
// ready to every gate condition equalling its verdict: a write that failed
// during the outage is retried after at most gate.DefaultRetryMaxDelay
// (per-pod exponential backoff), plus a margin for the write itself.
const convergeAfterRestart = gate.DefaultRetryMaxDelay + 15*time.Second

// reflectorResume bounds the time for the informer's watch to resume after
// the server is back: client-go's reflector retries a refused watch with a
// backoff capped at 30 s and jittered up to twice that
// (tools/cache/reflector.go defaultBackoffMax, defaultBackoffJitter 1.0).
const reflectorResume = 2*30*time.Second + 10*time.Second

// podListCounter counts the agent's pod lists: plain LISTs (GET
// /api/v1/pods without watch=true) and WatchList streams (watch=true with
// sendInitialEvents=true, what client-go's reflector uses instead of a LIST
// since the WatchListClient gate went on by default in 1.35). Both are a
// full read of the node's pods; a plain watch resumed from a resource
// version is not counted.
type podListCounter struct {
	mu    sync.Mutex
	lists []string
}

func (c *podListCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		if req.Method == http.MethodGet && req.URL.Path == "/api/v1/pods" &&
			(q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true") {
			c.mu.Lock()
			c.lists = append(c.lists, req.URL.RawQuery)
			c.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (c *podListCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lists)
}

func (c *podListCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lists, "\n  ")
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// The API server stopped for 30 s and restarted loses
// nothing. A private kube-apiserver (etcd keeps running, so every object
// survives; the shared server of the other packages is never touched) is
// stopped while an agent in cluster mode, as its RBAC identity, gates four
// pods. While it is down the agent keeps probing the pods it knows (its
// probe history keeps growing, with failures for the targets closed
// meanwhile) and /healthz stays healthy (the informer had synced). Once the
// server is back, every gate condition converges to the current verdict
// (False for the closed targets, True for the others): the writes that
// failed during the outage were kept and retried. The reflector resumes its
// watch: at most one list of the node's pods after the restart (client-go
// retries a watch refused by a server that is down from the same resource
// version; only an error it does not retry on the resumed watch — a 410
// Gone, the restarted server's watch cache starting at etcd's current
// revision and not reaching back to the agent's, or a 403 while the new
// server's RBAC cache fills — makes it list again, once, from its last
// resource version).
func TestClusterAPIServerOutageLosesNothing(t *testing.T) {
	kubetest.PrivateServer(t)
	admin := kubetest.Client(t)
	cfg := kubetest.AgentConfig(t)
	lists := &podListCounter{}
	wrap := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if wrap != nil {
			rt = wrap(rt)
		}
		return lists.wrap(rt)
	}
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)

	names := []string{"closed-0", "closed-1", "open-0", "open-1"}
	targets := map[string]*switchableTarget{}
	for _, name := range names {
		targets[name] = newSwitchableTarget(t)
		gatedPod(t, admin, ns, name, node, targets[name].port, true)
	}
	r := startClusterAgent(t, cfg, node, nil)
	for _, name := range names {
		waitGate(t, admin, ns, name, v1.ConditionTrue)
	}
	listsBefore := lists.count()
	if listsBefore < 1 {
		t.Fatalf("no list of pods counted before the outage: the counter misses the informer's requests")
	}

	kubetest.StopAPIServer(t)
	stopped := time.Now()
	for _, name := range names {
		if strings.HasPrefix(name, "closed") {
			targets[name].close()
		}
	}
	// Records seen during the outage, per pod and result (the history is a
	// ring of 10: collect by record time across polls).
	seen := map[string]map[string]map[time.Time]bool{}
	for _, name := range names {
		seen[name] = map[string]map[time.Time]bool{}
	}
	for time.Since(stopped) < apiServerOutage {
		time.Sleep(time.Second)
		if code := healthz(t, r); code != http.StatusOK {
			t.Fatalf("/healthz = %d %.0fs into the API server's outage, want 200 (the informer had synced)", code, time.Since(stopped).Seconds())
		}
		for _, name := range names {
			var hist agent.PodHistory
			r.get("/pods/"+ns+"/"+name+"/probes", &hist)
			for _, p := range hist.Probes {
				for _, rec := range p.Results {
					if rec.Time.After(stopped) {
						if seen[name][rec.Result] == nil {
							seen[name][rec.Result] = map[time.Time]bool{}
						}
						seen[name][rec.Result][rec.Time] = true
					}
				}
			}
		}
	}
	// Period 1 s for 30 s: at least half the runs must be seen (the first
	// second after the stop may still be a success for a closed target).
	minRuns := int(apiServerOutage/time.Second) / 2
	for _, name := range names {
		want := "success"
		if strings.HasPrefix(name, "closed") {
			want = "failure"
		}
		if got := len(seen[name][want]); got < minRuns {
			t.Errorf("pod %s: %d %s results during the %v outage, want >= %d (results: %v)", name, got, want, apiServerOutage, minRuns, resultCounts(seen[name]))
		}
	}

	// The status page tells the outage: the pods had synced,
	// the condition writes of the closed targets fail and wait.
	if page := r.getPage("/"); !strings.Contains(page, "pods of "+node+" synced; condition writes failing, retried with backoff") {
		t.Errorf("the status page does not show the failing condition writes during the outage")
	}

	kubetest.StartAPIServer(t)
	restarted := time.Now()
	for _, name := range names {
		want := v1.ConditionTrue
		if strings.HasPrefix(name, "closed") {
			want = v1.ConditionFalse
		}
		waitGateWithin(t, admin, ns, name, want, restarted.Add(convergeAfterRestart))
	}
	t.Logf("all gates converged %.1fs after the API server was back", time.Since(restarted).Seconds())
	if page := r.getPage("/"); !strings.Contains(page, "pods of "+node+" synced; condition writes succeeding") {
		t.Errorf("the status page does not show the condition writes succeeding again")
	}
	if code := healthz(t, r); code != http.StatusOK {
		t.Errorf("/healthz = %d after the restart, want 200", code)
	}

	// The watch resumed: a pod created after the restart reaches the agent
	// (its gate turns True) within the reflector's longest retry delay.
	late := newSwitchableTarget(t)
	gatedPod(t, admin, ns, "after-restart", node, late.port, true)
	waitGateWithin(t, admin, ns, "after-restart", v1.ConditionTrue, time.Now().Add(reflectorResume))
	if after := lists.count() - listsBefore; after > 1 {
		t.Errorf("%d lists of pods after the restart, want at most 1 (the watch resumes):\n  %s", after, lists)
	}
	t.Logf("pod lists: %d before the outage, %d after the restart:\n  %s", listsBefore, lists.count()-listsBefore, lists)
}

func healthz(t *testing.T, r *running) int {
	t.Helper()
	resp, err := r.client.Get(r.base + "/healthz")
	if err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func resultCounts(m map[string]map[time.Time]bool) string {
	var parts []string
	for result, times := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", result, len(times)))
	}
	return strings.Join(parts, " ")
}

// waitGateWithin polls until the pod's gate condition has status want, or
// fails at deadline.
func waitGateWithin(t *testing.T, c kubernetes.Interface, ns, name string, want v1.ConditionStatus, deadline time.Time) {
	t.Helper()
	for {
		cond, ok := gateCondition(t, c, ns, name)
		if ok && cond.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s: gate condition %+v (present %v), want status %s", ns, name, cond, ok, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
