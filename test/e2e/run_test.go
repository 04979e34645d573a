package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// webTarget is the HTTP server the pods of TestRunManifestDirectory probe:
// /ready and /live answer the status codes the test sets; /extra always 200.
type webTarget struct {
	srv         *httptest.Server
	port        int
	ready, live atomic.Int32 // status codes of /ready and /live
	readyHits   atomic.Int64
	liveOK      atomic.Int64 // /live requests answered 200
	liveFailed  atomic.Int64 // /live requests answered with an error status
	badRequests atomic.Int64 // requests without the kubelet's headers
}

func newWebTarget(t *testing.T) *webTarget {
	w := &webTarget{}
	w.ready.Store(200)
	w.live.Store(200)
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("User-Agent") != "kube-probe/1.37" || r.Header.Get("Accept") != "*/*" {
			w.badRequests.Add(1)
		}
		switch r.URL.Path {
		case "/ready":
			w.readyHits.Add(1)
			rw.WriteHeader(int(w.ready.Load()))
		case "/live":
			code := int(w.live.Load())
			if code == 200 {
				w.liveOK.Add(1)
			} else {
				w.liveFailed.Add(1)
			}
			rw.WriteHeader(code)
		case "/extra":
		default:
			rw.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(w.srv.Close)
	w.port = w.srv.Listener.Addr().(*net.TCPAddr).Port
	return w
}

// tcpTarget is a TCP listener that counts the connections it accepts.
type tcpTarget struct {
	port    int
	accepts atomic.Int64
}

func newTCPTarget(t *testing.T) *tcpTarget {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tt := &tcpTarget{port: l.Addr().(*net.TCPAddr).Port}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tt.accepts.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	return tt
}

const webPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: e2e
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      httpGet: {path: /ready, port: %[1]d}
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      httpGet: {path: /live, port: %[1]d}
      periodSeconds: 1
      failureThreshold: 2
`

// dbPod has a startup probe (an exec command that logs each run and
// succeeds once the flag file exists) that gates a TCP readiness probe.
const dbPod = `apiVersion: v1
kind: Pod
metadata:
  name: db
  namespace: e2e
spec:
  containers:
  - name: db
    image: db
    startupProbe:
      exec:
        command: [%[1]q, "-c", "echo run >> %[2]s; test -f %[3]s"]
      periodSeconds: 1
      failureThreshold: 600
    readinessProbe:
      tcpSocket: {port: %[4]d}
      periodSeconds: 1
      failureThreshold: 1
`

const extraPod = `apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: e2e
spec:
  containers:
  - name: c
    image: c
    readinessProbe:
      httpGet: {path: /extra, port: %[2]d}
      periodSeconds: 1
`

// TestRunManifestDirectory runs `probed run` on a manifest directory and
// changes the directory while it runs: pods appear and disappear, Ready and
// Started follow the targets, a failing liveness probe restarts its
// container, a broken file is reported (naming the file) without stopping
// the other pods and is picked up once fixed, and SIGTERM ends the agent
// with exit status 0.
func TestRunManifestDirectory(t *testing.T) {
	t.Parallel()
	web := newWebTarget(t)
	dbTCP := newTCPTarget(t)
	closedPort := freePort(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH for the exec startup probe")
	}

	dir := t.TempDir()
	work := t.TempDir()
	flag := filepath.Join(work, "started")
	runLog := filepath.Join(work, "startup-runs")
	webFile := filepath.Join(dir, "web.yaml")
	dbFile := filepath.Join(dir, "db.yaml")
	extraFile := filepath.Join(dir, "extra.yaml")
	brokenFile := filepath.Join(dir, "broken.yaml")
	writeFile(t, webFile, fmt.Sprintf(webPod, web.port))
	writeFile(t, dbFile, fmt.Sprintf(dbPod, sh, runLog, flag, dbTCP.port))

	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	base := "http://" + listen
	p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--rescan-interval", "300ms",
		"--sync-frequency", "2s", "--allow-host-exec", "--log-format", "json")
	waitAPI(t, p, base, false)
	for path, want := range map[string]string{"/metrics": "probed_scheduler_entries", "/debug/scheduler": "{", "/metrics/probes": "prober_probe_total"} {
		eventually(t, p, 10*time.Second, "GET "+path, func() (bool, string) {
			body, err := apiGet(base, path)
			if err != nil {
				return false, err.Error()
			}
			return strings.Contains(string(body), want), fmt.Sprintf("no %q in %.300s", want, body)
		})
	}

	checkDebugSchedulerExposesNoPod(t, base, "web", "db")

	var list *v1.PodList
	pods := func() (*v1.PodList, string) {
		l, err := getPods(base)
		if err != nil {
			return nil, err.Error()
		}
		list = l
		b, _ := json.Marshal(summary(l))
		return l, string(b)
	}
	status := func(ns, name, container string) (*v1.Pod, *v1.ContainerStatus) {
		pod := findPod(list, ns, name)
		if pod == nil {
			return nil, nil
		}
		return pod, containerStatus(pod, container)
	}

	// 1. Both pods appear; web becomes Ready; db is not Started while its
	// startup probe fails, and its readiness probe does not run before.
	t.Log("step 1: initial pods")
	eventually(t, p, 15*time.Second, "web Ready, db listed and its startup probe failing twice", func() (bool, string) {
		l, desc := pods()
		if l == nil {
			return false, desc
		}
		pod, cs := status("e2e", "web", "app")
		if pod == nil || cs == nil || !cs.Ready || podCondition(pod, v1.PodReady) != v1.ConditionTrue {
			return false, desc
		}
		if findPod(l, "e2e", "db") == nil {
			return false, desc
		}
		return countLines(runLog) >= 2, desc + fmt.Sprintf(" startup runs=%d", countLines(runLog))
	})
	_, dbStatus := status("e2e", "db", "db")
	if dbStatus == nil || dbStatus.Started == nil || *dbStatus.Started || dbStatus.Ready {
		t.Fatalf("db before its startup probe succeeds: %+v, want Started=false Ready=false", dbStatus)
	}
	if n := dbTCP.accepts.Load(); n != 0 {
		t.Fatalf("db's readiness probe ran %d times before the container started (startup gating, W5.9)", n)
	}
	webPodV, webStatus := status("e2e", "web", "app")
	if webStatus.Started == nil || !*webStatus.Started || webStatus.State.Running == nil || webStatus.ContainerID == "" {
		t.Fatalf("web/app: %+v, want running and Started", webStatus)
	}
	if webPodV.Status.PodIP != "127.0.0.1" {
		t.Errorf("web podIP = %q, want the default --pod-ip 127.0.0.1", webPodV.Status.PodIP)
	}

	// 2. The startup probe succeeds: db is Started, then Ready.
	t.Log("step 2: startup probe succeeds")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, p, 10*time.Second, "db Started and Ready", func() (bool, string) {
		l, desc := pods()
		if l == nil {
			return false, desc
		}
		pod, cs := status("e2e", "db", "db")
		return cs != nil && cs.Started != nil && *cs.Started && cs.Ready && podCondition(pod, v1.ContainersReady) == v1.ConditionTrue, desc
	})
	if dbTCP.accepts.Load() == 0 {
		t.Fatal("db is Ready but its TCP readiness target saw no connection")
	}

	// 3. Readiness flips with the target: 503 → not Ready, 200 → Ready.
	t.Log("step 3: readiness flips")
	web.ready.Store(503)
	eventually(t, p, 10*time.Second, "web not Ready after /ready answers 503", func() (bool, string) {
		l, desc := pods()
		if l == nil {
			return false, desc
		}
		pod, cs := status("e2e", "web", "app")
		return cs != nil && !cs.Ready && podCondition(pod, v1.PodReady) == v1.ConditionFalse, desc
	})
	_, cs := status("e2e", "web", "app")
	if cs.RestartCount != 0 || cs.ContainerID != webStatus.ContainerID {
		t.Fatalf("a readiness failure restarted web/app: %+v", cs)
	}
	web.ready.Store(200)
	eventually(t, p, 10*time.Second, "web Ready again after /ready answers 200", func() (bool, string) {
		l, desc := pods()
		if l == nil {
			return false, desc
		}
		pod, cs := status("e2e", "web", "app")
		return cs != nil && cs.Ready && podCondition(pod, v1.PodReady) == v1.ConditionTrue, desc
	})

	// 4. A failing liveness probe restarts the container, again and again:
	// restartCount grows, each instance has a new container ID, and the
	// last state is the killed instance (exit 137).
	t.Log("step 4: liveness failures restart web/app")
	web.live.Store(500)
	var restarted *v1.ContainerStatus
	eventually(t, p, 20*time.Second, "web/app restarted twice by its liveness probe", func() (bool, string) {
		l, desc := pods()
		if l == nil {
			return false, desc
		}
		_, cs := status("e2e", "web", "app")
		if cs == nil {
			return false, desc
		}
		restarted = cs
		return cs.RestartCount >= 2, desc
	})
	// Each restart is logged with the old and the new container ID: a chain
	// of new IDs from the first instance on.
	var chain []string
	for _, l := range p.logs() {
		if l.str("msg") == "container restarted" && l.str("pod") == "e2e/web" {
			if len(chain) == 0 {
				chain = append(chain, l.str("oldContainerID"))
			}
			if l.str("oldContainerID") != chain[len(chain)-1] {
				t.Errorf("restart log %v does not continue the chain of container IDs %v", l, chain)
			}
			if n, _ := l["restartCount"].(float64); int(n) != len(chain) {
				t.Errorf("restart log %v: restartCount %v, want %d", l, l["restartCount"], len(chain))
			}
			chain = append(chain, l.str("containerID"))
		}
	}
	if len(chain) < 3 || chain[0] != webStatus.ContainerID || !distinct(chain) {
		t.Errorf("container IDs over %d restarts: %v, want a new one per restart from %s", restarted.RestartCount, chain, webStatus.ContainerID)
	}
	if restarted.ContainerID == webStatus.ContainerID {
		t.Errorf("containerID unchanged after %d restarts: %s", restarted.RestartCount, restarted.ContainerID)
	}
	if term := restarted.LastTerminationState.Terminated; term == nil || term.ExitCode != 137 || term.ContainerID == "" || term.ContainerID == restarted.ContainerID {
		t.Errorf("lastState after a liveness restart = %+v, want terminated with exit code 137 and the old container ID", restarted.LastTerminationState)
	}
	if restarted.State.Running == nil {
		t.Errorf("state after a liveness restart = %+v, want running (restartPolicy Always)", restarted.State)
	}
	// Heal; wait until two liveness probes were answered 200 after that, so
	// no failure from before is still in flight, then until Ready.
	web.live.Store(200)
	okBefore := web.liveOK.Load()
	var healed *v1.ContainerStatus
	eventually(t, p, 15*time.Second, "web Ready on a healthy liveness target", func() (bool, string) {
		l, desc := pods()
		if l == nil {
			return false, desc
		}
		_, cs := status("e2e", "web", "app")
		healed = cs
		return cs != nil && cs.Ready && web.liveOK.Load() >= okBefore+2, desc
	})
	assertEvent(t, base, "e2e", "web", "Killing", "Container app failed liveness probe, will be restarted")
	assertMetric(t, base, `prober_probe_total{`, `pod="web"`, `probe_type="Liveness"`, `result="failed"`)

	// 5. Add a pod; files that are not manifests (no .yaml/.yml/.json,
	// editor backups, hidden files) are ignored.
	t.Log("step 5: add a pod")
	writeFile(t, filepath.Join(dir, "notes.txt"), fmt.Sprintf(extraPod, "ignored-txt", web.port))
	writeFile(t, filepath.Join(dir, "extra.yaml~"), fmt.Sprintf(extraPod, "ignored-backup", web.port))
	writeFile(t, extraFile, fmt.Sprintf(extraPod, "extra", web.port))
	eventually(t, p, 10*time.Second, "e2e/extra listed and Ready", func() (bool, string) {
		l, desc := pods()
		if l == nil {
			return false, desc
		}
		_, cs := status("e2e", "extra", "c")
		return cs != nil && cs.Ready, desc
	})
	for _, name := range []string{"ignored-txt", "ignored-backup"} {
		if findPod(list, "e2e", name) != nil {
			t.Errorf("pod e2e/%s from a file that is not a manifest is listed", name)
		}
	}

	// 6. Modify a pod's spec: it is a new pod (new UID, new container), its
	// probes start over, and its readiness now follows the new port.
	t.Log("step 6: modify a pod")
	dbBefore, _ := status("e2e", "db", "db")
	oldUID := dbBefore.UID
	_, dbCS := status("e2e", "db", "db")
	oldID := dbCS.ContainerID
	writeFile(t, dbFile, fmt.Sprintf(dbPod, sh, runLog, flag, closedPort))
	eventually(t, p, 10*time.Second, "the modified db pod: new UID, Started, not Ready", func() (bool, string) {
		l, desc := pods()
		if l == nil {
			return false, desc
		}
		pod, cs := status("e2e", "db", "db")
		if pod == nil || cs == nil || pod.UID == oldUID {
			return false, desc
		}
		return cs.Started != nil && *cs.Started && !cs.Ready && cs.ContainerID != oldID &&
			pod.Spec.Containers[0].ReadinessProbe.TCPSocket.Port.IntValue() == closedPort, desc
	})
	if n := len(list.Items); n != 3 {
		t.Errorf("after modifying db: %d pods %v, want 3 (the old db replaced)", n, podNames(list))
	}

	// 7. Remove a pod.
	t.Log("step 7: remove a pod")
	if err := os.Remove(extraFile); err != nil {
		t.Fatal(err)
	}
	eventually(t, p, 10*time.Second, "e2e/extra gone", func() (bool, string) {
		l, desc := pods()
		return l != nil && findPod(l, "e2e", "extra") == nil && len(l.Items) == 2, desc
	})

	// 8. A broken file is reported, naming the file, and the other pods
	// keep being probed; once fixed it is picked up.
	t.Log("step 8: a broken file, then fixed")
	broken := strings.Replace(fmt.Sprintf(extraPod, "broken", web.port), "httpGet:", "httpget:", 1)
	writeFile(t, brokenFile, broken)
	var rejected []logLine
	eventually(t, p, 10*time.Second, "the broken file logged as rejected", func() (bool, string) {
		rejected = rejectedLines(p, brokenFile)
		return len(rejected) > 0, fmt.Sprintf("%d rejection lines", len(rejected))
	})
	msg := rejected[0].str("err")
	for _, want := range []string{brokenFile, "pod e2e/broken", `container "c"`, "readinessProbe.httpget", `unknown field "httpget"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("rejection %q lacks %q", msg, want)
		}
	}
	if lvl := rejected[0].str("level"); lvl != "ERROR" {
		t.Errorf("rejection logged at level %q, want ERROR", lvl)
	}
	hits := web.readyHits.Load()
	eventually(t, p, 10*time.Second, "web probed and Ready, db listed, while broken.yaml is broken", func() (bool, string) {
		l, desc := pods()
		if l == nil {
			return false, desc
		}
		_, cs := status("e2e", "web", "app")
		return cs != nil && cs.Ready && findPod(l, "e2e", "db") != nil && findPod(l, "e2e", "broken") == nil &&
			web.readyHits.Load() >= hits+2, desc
	})
	if n := len(rejectedLines(p, brokenFile)); n != 1 {
		t.Errorf("broken.yaml reported %d times over several rescans, want once per change", n)
	}
	writeFile(t, brokenFile, fmt.Sprintf(extraPod, "broken", web.port))
	eventually(t, p, 10*time.Second, "the fixed e2e/broken listed and Ready", func() (bool, string) {
		l, desc := pods()
		if l == nil {
			return false, desc
		}
		_, cs := status("e2e", "broken", "c")
		return cs != nil && cs.Ready, desc
	})

	// web stayed healthy since step 4: no restart after it was healed.
	if _, cs := status("e2e", "web", "app"); cs.RestartCount != healed.RestartCount || cs.ContainerID != healed.ContainerID {
		t.Errorf("web/app restarted while its liveness target was healthy: %d → %d restarts", healed.RestartCount, cs.RestartCount)
	}
	if n := web.badRequests.Load(); n != 0 {
		t.Errorf("%d probe requests without User-Agent kube-probe/1.37 and Accept */*", n)
	}

	// 9. SIGTERM: exit status 0, process gone.
	t.Log("step 9: SIGTERM")
	if code := p.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("probed exited with %d after SIGTERM, want 0; stderr:\n%s", code, tail(p.stderr.String(), 40))
	}
	if !p.gone() {
		t.Errorf("process %d still exists after it exited", p.cmd.Process.Pid)
	}
	if !hasLog(p, "probed shutting down") {
		t.Errorf("no log line starting with %q", "probed shutting down")
	}
	for _, l := range p.logs() {
		if l["raw"] == true {
			t.Errorf("stderr line that is not a JSON log line: %s", l.str("msg"))
		}
	}
}

// summary is a compact view of a pod list for failure messages.
func summary(l *v1.PodList) []string {
	var out []string
	for _, p := range l.Items {
		uid := string(p.UID)
		if len(uid) > 8 {
			uid = uid[:8]
		}
		s := p.Namespace + "/" + p.Name + " uid=" + uid + " ready=" + string(podCondition(&p, v1.PodReady))
		for _, cs := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			started := cs.Started != nil && *cs.Started
			s += fmt.Sprintf(" [%s started=%v ready=%v restarts=%d id=%s]", cs.Name, started, cs.Ready, cs.RestartCount, cs.ContainerID)
		}
		out = append(out, s)
	}
	return out
}

func countLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

func distinct(list []string) bool {
	seen := map[string]bool{}
	for _, v := range list {
		if v == "" || seen[v] {
			return false
		}
		seen[v] = true
	}
	return true
}

// rejectedLines are the "manifest rejected" log lines naming file.
func rejectedLines(p *proc, file string) []logLine {
	var out []logLine
	for _, l := range p.logs() {
		if l.str("msg") == "manifest rejected" && strings.Contains(l.str("err"), file) {
			out = append(out, l)
		}
	}
	return out
}

// hasLog reports whether a log message starts with prefix.
func hasLog(p *proc, prefix string) bool {
	for _, l := range p.logs() {
		if strings.HasPrefix(l.str("msg"), prefix) {
			return true
		}
	}
	return false
}

// assertEvent checks that /events lists an event of the pod with reason
// and message.
func assertEvent(t *testing.T, base, ns, pod, reason, message string) {
	t.Helper()
	body, err := apiGet(base, "/events")
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Events []struct {
			Reason, Message, Namespace, Pod string
			Count                           int
		}
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatalf("/events: %v", err)
	}
	for _, e := range ev.Events {
		if e.Namespace == ns && e.Pod == pod && e.Reason == reason && e.Message == message && e.Count >= 1 {
			return
		}
	}
	t.Errorf("/events has no %s event %q for %s/%s:\n%s", reason, message, ns, pod, body)
}

// assertMetric checks that /metrics/probes has a sample line containing
// every part.
func assertMetric(t *testing.T, base string, parts ...string) {
	t.Helper()
	body, err := apiGet(base, "/metrics/probes")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return
		}
	}
	t.Errorf("/metrics/probes has no sample with %v", parts)
}

// TestRunBundledExamples runs `probed run` without --manifests: it runs the
// bundled examples, which probe 127.0.0.1:8089, so the test needs that port
// (it is skipped when the port is taken).
func TestRunBundledExamples(t *testing.T) {
	t.Parallel()
	const listen = "127.0.0.1:8089"
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Skipf("%s is not free (%v); the bundled examples probe port 8089, so they need it", listen, err)
	}
	_ = l.Close()
	base := "http://" + listen
	p := startProbed(t, nil, "run", "--listen", listen, "--log-format", "json")
	waitAPI(t, p, base, true)

	var list *v1.PodList
	eventually(t, p, 30*time.Second, "the bundled examples probed", func() (bool, string) {
		l, err := getPods(base)
		if err != nil {
			return false, err.Error()
		}
		list = l
		b, _ := json.Marshal(summary(l))
		for _, name := range []string{"probed-self", "worker", "crashy"} {
			if findPod(l, "demo", name) == nil {
				return false, string(b)
			}
		}
		self := containerStatus(findPod(l, "demo", "probed-self"), "api")
		worker := containerStatus(findPod(l, "demo", "worker"), "worker")
		crashy := containerStatus(findPod(l, "demo", "crashy"), "app")
		// probed-self probes probed's own API; worker's startup probe
		// (initialDelaySeconds 3) on the API succeeds, while its exec
		// readiness probe is not run without --allow-host-exec; crashy's
		// liveness probe gets a 404 and restarts it.
		return self != nil && self.Ready && worker != nil && worker.Started != nil && *worker.Started &&
			crashy != nil && crashy.RestartCount >= 1, string(b)
	})
	if names := podNames(list); len(names) != 3 || names[0] != "demo/crashy" || names[1] != "demo/probed-self" || names[2] != "demo/worker" {
		t.Errorf("/pods lists %v, want [demo/crashy demo/probed-self demo/worker] (sorted)", names)
	}
	if worker := containerStatus(findPod(list, "demo", "worker"), "worker"); worker.Ready {
		t.Errorf("demo/worker is Ready although its exec readiness probe cannot run without --allow-host-exec")
	}
	assertEvent(t, base, "demo", "crashy", "Killing", "Container app failed liveness probe, will be restarted")
	// Killed every ~4 s, crashy backs off at its third kill
	// (kubelet doBackOff): waiting with reason CrashLoopBackOff in /pods,
	// CrashLoopBackOff in `probed status`, a BackOff event.
	var waiting *v1.ContainerStateWaiting
	var uid string
	eventually(t, p, 40*time.Second, "demo/crashy in CrashLoopBackOff", func() (bool, string) {
		l, err := getPods(base)
		if err != nil {
			return false, err.Error()
		}
		b, _ := json.Marshal(summary(l))
		if pod := findPod(l, "demo", "crashy"); pod != nil {
			uid = string(pod.UID)
			if cs := containerStatus(pod, "app"); cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
				waiting = cs.State.Waiting
				return true, ""
			}
		}
		return false, string(b)
	})
	if want := "back-off 10s restarting failed container=app pod=crashy_demo(" + uid + ")"; waiting.Message != want {
		t.Errorf("waiting message %q, want %q", waiting.Message, want)
	}
	assertEvent(t, base, "demo", "crashy", "BackOff", "Back-off restarting failed container app in pod crashy_demo("+uid+")")
	if stdout, stderr, code := runProbed(t, nil, "status", "--server", base); code != 0 || !regexp.MustCompile(`(?m)^demo\s+crashy\s+\S+\s+\S+\s+2\s+CrashLoopBackOff\s`).MatchString(stdout) {
		t.Errorf("probed status (exit %d) shows no CrashLoopBackOff for demo/crashy:\n%s%s", code, stdout, stderr)
	}

	var examplesDir string
	for _, l := range p.logs() {
		if strings.Contains(l.str("msg"), "bundled examples") {
			examplesDir = l.str("dir")
		}
	}
	if examplesDir == "" {
		t.Error("no log line naming the bundled examples' directory")
	}
	if code := p.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("probed exited with %d after SIGTERM, want 0; stderr:\n%s", code, tail(p.stderr.String(), 40))
	}
	if !p.gone() {
		t.Errorf("process %d still exists after it exited", p.cmd.Process.Pid)
	}
	if examplesDir != "" {
		if _, err := os.Stat(examplesDir); !os.IsNotExist(err) {
			t.Errorf("the examples' temporary directory %s was not removed at exit (stat: %v)", examplesDir, err)
		}
	}
}

// checkDebugSchedulerExposesNoPod holds GET /debug/scheduler to what
// docs/operations.md says it exposes on the API's listener: the scheduler's
// and pools' counters and the plugins' state, and nothing of a pod (no pod
// name, namespace or probe target among its strings).
func checkDebugSchedulerExposesNoPod(t *testing.T, base string, pods ...string) {
	t.Helper()
	body, err := apiGet(base, "/debug/scheduler")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("/debug/scheduler: %v\n%s", err, body)
	}
	keys := func(v any) []string {
		m, _ := v.(map[string]any)
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	if got := strings.Join(keys(doc), " "); got != "plugins scheduler" {
		t.Errorf("/debug/scheduler keys %q, want plugins and scheduler only", got)
	}
	want := "backlog dispatched entries now pools running skippedRuns started triggers wheelAdvanced"
	if got := strings.Join(keys(doc["scheduler"]), " "); got != want {
		t.Errorf("/debug/scheduler scheduler keys %q, want %q (docs/operations.md lists them)", got, want)
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(k)
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			for _, p := range pods {
				if x == p || strings.Contains(x, "/"+p) {
					t.Errorf("/debug/scheduler names pod %s: %q", p, x)
				}
			}
		}
	}
	walk(doc)
}
