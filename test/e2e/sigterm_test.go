//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"github.com/probed/probed/internal/proctest"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sigtermPod has an exec readiness probe of 2 s (timeout 5 s) and an HTTP
// readiness probe against an endpoint the test holds (timeout 10 s).
const sigtermPod = `apiVersion: v1
kind: Pod
metadata:
  name: sigterm
  namespace: e2e
spec:
  containers:
  - name: worker
    image: worker
    readinessProbe:
      exec:
        command: [%[1]q, "-c", "sleep 2; exit 0"]
      periodSeconds: 5
      timeoutSeconds: 5
  - name: web
    image: web
    readinessProbe:
      httpGet: {path: /slow, port: %[2]d}
      periodSeconds: 5
      timeoutSeconds: 10
`

// heldEndpoint is the slow HTTP endpoint: a request waits until release
// (at most 15 s), then gets 200. It records whether the prober gave up on
// a request before it was answered.
type heldEndpoint struct {
	srv     *http.Server
	port    int
	release chan struct{}
	once    sync.Once

	mu        sync.Mutex
	arrived   []time.Time
	answered  []time.Time
	abandoned int // requests whose client went away before the answer
}

func newHeldEndpoint(t *testing.T) *heldEndpoint {
	h := &heldEndpoint{release: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.port = ln.Addr().(*net.TCPAddr).Port
	h.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.arrived = append(h.arrived, time.Now())
		h.mu.Unlock()
		select {
		case <-h.release:
		case <-r.Context().Done():
			h.mu.Lock()
			h.abandoned++
			h.mu.Unlock()
			return
		case <-time.After(15 * time.Second):
		}
		_, err := w.Write([]byte("ok"))
		h.mu.Lock()
		if err == nil {
			h.answered = append(h.answered, time.Now())
		}
		h.mu.Unlock()
	}), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		h.open()
		_ = h.srv.Close()
		<-done
	})
	return h
}

func (h *heldEndpoint) open() { h.once.Do(func() { close(h.release) }) }

// waiting reports whether a request is being held.
func (h *heldEndpoint) waiting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.release:
		return false
	default:
	}
	return len(h.arrived) > h.abandoned
}

// sigProc is one process as /proc/PID/stat shows it.
type sigProc struct {
	pid, ppid, pgid int
	state           byte
	start           uint64 // clock ticks since boot: with pid, the identity
	cmd             string
}

func (p sigProc) String() string {
	return fmt.Sprintf("pid %d ppid %d pgid %d state %c %q", p.pid, p.ppid, p.pgid, p.state, p.cmd)
}

func scanProcs() []sigProc {
	list := proctest.List()
	out := make([]sigProc, len(list))
	for i, p := range list {
		out[i] = sigProc{pid: p.PID, ppid: p.PPID, pgid: p.PGID, state: p.State, start: p.Start, cmd: p.Cmd}
	}
	return out
}

type sigKey struct {
	pid   int
	start uint64
}

// sigGroup is what the watcher saw of one process group probed started.
type sigGroup struct {
	before      time.Time // the last sample before the group was seen: it started after this
	first, last time.Time // first and last sample that saw it alive
	cmd         string    // its leader's command line
}

// childWatcher samples, every 10 ms, the children of probed and the
// process groups they lead (the exec runner starts each command as a
// child in a group of its own).
type childWatcher struct {
	parent int

	mu       sync.Mutex
	prev     time.Time
	groups   map[int]*sigGroup
	children map[sigKey]sigProc // every process ever seen as probed's child or in one of its groups
	stop     chan struct{}
	done     chan struct{}
}

func watchChildren(t *testing.T, parent int) *childWatcher {
	w := &childWatcher{parent: parent, groups: map[int]*sigGroup{}, children: map[sigKey]sigProc{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		w.close()
		// Should anything outlive a failed test, do not leave it running.
		w.mu.Lock()
		defer w.mu.Unlock()
		for pg := range w.groups {
			_ = syscall.Kill(-pg, syscall.SIGKILL)
		}
	})
	return w
}

func (w *childWatcher) sample() {
	now := time.Now() // before the scan: nothing seen is younger
	ps := scanProcs()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range ps {
		if p.ppid == w.parent {
			w.children[sigKey{p.pid, p.start}] = p
			if p.pgid == p.pid && w.groups[p.pid] == nil {
				w.groups[p.pid] = &sigGroup{before: w.prev, first: now, cmd: p.cmd}
			}
		}
	}
	for _, p := range ps {
		if g := w.groups[p.pgid]; g != nil && p.state != 'Z' {
			w.children[sigKey{p.pid, p.start}] = p
			g.last = now
		}
	}
	w.prev = now
}

func (w *childWatcher) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// snapshot returns the groups seen so far.
func (w *childWatcher) snapshot() map[int]sigGroup {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[int]sigGroup{}
	for pg, g := range w.groups {
		out[pg] = *g
	}
	return out
}

// alive returns the live processes (zombies waiting for PID 1 are dead)
// that were ever probed's children or in a group it started.
func (w *childWatcher) alive() []sigProc {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []sigProc
	for _, p := range scanProcs() {
		_, known := w.children[sigKey{p.pid, p.start}]
		if p.state != 'Z' && (known || w.groups[p.pgid] != nil) {
			out = append(out, p)
		}
	}
	return out
}

// TestSIGTERMLetsInFlightProbesFinish runs `probed run --allow-host-exec
// --state-dir` with a pod whose exec readiness probe takes 2 s (`sh -c
// 'sleep 2; exit 0'`, timeoutSeconds 5) and whose HTTP readiness probe
// waits on an endpoint the test holds. It sends SIGTERM while both probes
// are in flight (the HTTP one on its first run, so the container is not
// Ready yet) and releases the endpoint 1 s later. probed must:
//
//   - exit with status 0 once both runs have ended: not before the exec
//     command's 2 s are up or the endpoint has answered, and not much after
//     (they are not cancelled, and shutdown does not wait for a timeout);
//   - let the exec command run to its end (it is not killed) and leave no
//     process behind: nothing of the command's process group, no child of
//     probed;
//   - start no probe run after SIGTERM;
//   - write the state file at shutdown, after the drained runs applied their
//     results: the HTTP container, Ready only through the run in flight at
//     SIGTERM, is Ready in it.
func TestSIGTERMLetsInFlightProbesFinish(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH for the exec probe")
	}
	const (
		execTime  = 2 * time.Second         // the command's sleep
		holdAfter = 1 * time.Second         // the endpoint answers this long after SIGTERM
		lateSlack = 1500 * time.Millisecond // shutdown after the last run: API, store, state file
	)
	ep := newHeldEndpoint(t)
	dir := t.TempDir()
	stateDir := t.TempDir()
	writeFile(t, filepath.Join(dir, "sigterm.yaml"), fmt.Sprintf(sigtermPod, sh, ep.port))

	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	// --state-interval 1h: the state file is written at shutdown only.
	p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--allow-host-exec",
		"--state-dir", stateDir, "--state-interval", "1h", "--log-format", "json")
	w := watchChildren(t, p.cmd.Process.Pid)
	waitAPI(t, p, "http://"+listen, false)

	// Wait until the HTTP probe's first request is held and an exec run
	// has just started (so that most of its 2 s are still to come). Both
	// probes' first runs fall within their first period (5 s).
	var (
		execGroup int
		execSeen  sigGroup
	)
	eventually(t, p, 20*time.Second, "both probes in flight", func() (bool, string) {
		held := ep.waiting()
		var fresh []string
		now := time.Now()
		for pg, g := range w.snapshot() {
			if strings.Contains(g.cmd, "sleep 2; exit 0") && now.Sub(g.first) < 300*time.Millisecond && now.Sub(g.last) < 50*time.Millisecond {
				execGroup, execSeen = pg, g
				fresh = append(fresh, strconv.Itoa(pg))
			}
		}
		return held && len(fresh) > 0, fmt.Sprintf("HTTP request held: %v; exec runs started in the last 300 ms: %v", held, fresh)
	})
	if _, err := os.Stat(filepath.Join(stateDir, "probed-state.json")); err == nil {
		t.Fatalf("the state file exists before SIGTERM (--state-interval 1h)")
	}

	sigAt := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	releaseTimer := time.AfterFunc(holdAfter, ep.open)
	defer releaseTimer.Stop()
	var code int
	select {
	case <-p.done:
		code = exitCode(p.err)
	case <-time.After(30 * time.Second):
		t.Fatalf("probed did not exit within 30 s of SIGTERM; stderr:\n%s", tail(p.stderr.String(), 40))
	}
	exitAt := time.Now()
	w.sample()
	w.close()

	if code != 0 {
		t.Fatalf("probed exited with %d after SIGTERM, want 0; stderr:\n%s", code, tail(p.stderr.String(), 40))
	}
	groups := w.snapshot()
	g := groups[execGroup]

	// The exec run in flight ran to its end: it started after g.before and
	// lasted 2 s, so it ended after g.before + 2 s; it was seen alive until
	// about then.
	execEndMin := g.before.Add(execTime)
	execEndMax := execSeen.first.Add(execTime)
	if lived := g.last.Sub(g.first); lived < execTime-200*time.Millisecond {
		t.Errorf("the exec run in flight at SIGTERM was seen alive for %v only, want its full %v (was it killed?)", lived.Round(time.Millisecond), execTime)
	}
	ep.mu.Lock()
	answered, abandoned, arrived := append([]time.Time(nil), ep.answered...), ep.abandoned, len(ep.arrived)
	ep.mu.Unlock()
	if abandoned > 0 || len(answered) != 1 || arrived != 1 {
		t.Errorf("HTTP endpoint: %d requests, %d answered, %d abandoned by the prober; want the one held request answered", arrived, len(answered), abandoned)
	}
	httpEnd := sigAt.Add(holdAfter)
	if len(answered) > 0 {
		httpEnd = answered[0]
	}
	lastEnd := execEndMax
	if httpEnd.After(lastEnd) {
		lastEnd = httpEnd
	}
	t.Logf("SIGTERM at +0; exec run started in [%v, %v], ended ≈ %v (seen until %v); HTTP answered at %v; probed exited at %v",
		g.before.Sub(sigAt).Round(time.Millisecond), execSeen.first.Sub(sigAt).Round(time.Millisecond),
		execEndMax.Sub(sigAt).Round(time.Millisecond), g.last.Sub(sigAt).Round(time.Millisecond),
		httpEnd.Sub(sigAt).Round(time.Millisecond), exitAt.Sub(sigAt).Round(time.Millisecond))
	if exitAt.Before(execEndMin) || exitAt.Before(httpEnd) {
		t.Errorf("probed exited %v after SIGTERM, before its in-flight probes ended (exec ≥ %v, HTTP %v)",
			exitAt.Sub(sigAt).Round(time.Millisecond), execEndMin.Sub(sigAt).Round(time.Millisecond), httpEnd.Sub(sigAt).Round(time.Millisecond))
	}
	if late := exitAt.Sub(lastEnd); late > lateSlack {
		t.Errorf("probed exited %v after its last in-flight probe ended, want within %v", late.Round(time.Millisecond), lateSlack)
	}

	// No run started after SIGTERM, and nothing is left.
	for pg, g := range groups {
		if g.first.After(sigAt.Add(100 * time.Millisecond)) {
			t.Errorf("process group %d (%q) started %v after SIGTERM", pg, g.cmd, g.first.Sub(sigAt).Round(time.Millisecond))
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for left := w.alive(); len(left) > 0; left = w.alive() {
		if time.Now().After(deadline) {
			t.Errorf("left behind by probed: %v", left)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The state file: written at shutdown, with the drained runs' results.
	data, err := os.ReadFile(filepath.Join(stateDir, "probed-state.json"))
	if err != nil {
		t.Fatalf("no state file after shutdown: %v", err)
	}
	var state struct {
		Kind    string    `json:"kind"`
		SavedAt time.Time `json:"savedAt"`
		Pods    []struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
			Status    struct {
				ContainerStatuses []struct {
					Name  string `json:"name"`
					Ready bool   `json:"ready"`
				} `json:"containerStatuses"`
			} `json:"status"`
		} `json:"pods"`
	}
	if err := json.Unmarshal(data, &state); err != nil {
		t.Fatalf("state file: %v\n%s", err, data)
	}
	if state.Kind != "ProbedState" {
		t.Errorf("state file kind %q, want ProbedState", state.Kind)
	}
	if state.SavedAt.Before(sigAt.Add(-time.Second)) || state.SavedAt.After(exitAt.Add(time.Second)) {
		t.Errorf("state file saved at %v, want between SIGTERM (%v) and exit (%v)", state.SavedAt, sigAt, exitAt)
	}
	ready := map[string]bool{}
	for _, pod := range state.Pods {
		if pod.Namespace == "e2e" && pod.Name == "sigterm" {
			for _, cs := range pod.Status.ContainerStatuses {
				ready[cs.Name] = cs.Ready
			}
		}
	}
	if !ready["web"] || !ready["worker"] {
		t.Errorf("state file: Ready %v, want worker and web Ready (web became Ready only through the run drained at shutdown)\n%s", ready, data)
	}
}
