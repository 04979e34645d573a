//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probed/probed/internal/proctest"
)

// uniqueSleep returns "sleep N" for an N (≥ 3600 s) unlikely to be used by
// anything else, so its command line identifies this test's processes.
func uniqueSleep() string { return "sleep " + strconv.Itoa(3600+rand.IntN(50000)) }

// liveWithCmd returns the live processes whose command line is cmd.
func liveWithCmd(cmd string) []proctest.Proc {
	var out []proctest.Proc
	for _, p := range proctest.List() {
		if p.State != 'Z' && p.Cmd == cmd {
			out = append(out, p)
		}
	}
	return out
}

func killWithCmd(cmd string) {
	for _, p := range liveWithCmd(cmd) {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
}

// TestSIGHUPDrainsAndWritesState: SIGHUP stops probed as
// SIGTERM does: exit status 0 (not 129, the default death by SIGHUP), the
// shutdown log line, and the state file written at shutdown (--state-interval
// 1h, so only the shutdown can have written it) with the Ready container.
func TestSIGHUPDrainsAndWritesState(t *testing.T) {
	web := newWebTarget(t)
	dir, stateDir := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dir, "hup.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: hup, namespace: e2e}
spec:
  containers:
  - name: web
    image: web
    readinessProbe:
      httpGet: {path: /ready, port: %d}
      periodSeconds: 1
`, web.port))
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen,
		"--state-dir", stateDir, "--state-interval", "1h", "--log-format", "json")
	base := "http://" + listen
	waitAPI(t, p, base, true)
	eventually(t, p, 15*time.Second, "the container Ready", func() (bool, string) {
		list, err := getPods(base)
		if err != nil {
			return false, err.Error()
		}
		pod := findPod(list, "e2e", "hup")
		if pod == nil {
			return false, "no pod"
		}
		cs := containerStatus(pod, "web")
		return cs != nil && cs.Ready, fmt.Sprint(summary(list))
	})
	if code := p.stop(syscall.SIGHUP, 15*time.Second); code != 0 {
		t.Fatalf("probed exited with %d after SIGHUP, want 0 (handled like SIGTERM); stderr:\n%s", code, tail(p.stderr.String(), 20))
	}
	if !hasLog(p, "probed shutting down") {
		t.Errorf("no shutdown log line after SIGHUP; stderr:\n%s", tail(p.stderr.String(), 20))
	}
	data, err := os.ReadFile(filepath.Join(stateDir, "probed-state.json"))
	if err != nil {
		t.Fatalf("no state file after SIGHUP: %v", err)
	}
	var state struct {
		Pods []struct {
			Name   string `json:"name"`
			Status struct {
				ContainerStatuses []struct {
					Name  string `json:"name"`
					Ready bool   `json:"ready"`
				} `json:"containerStatuses"`
			} `json:"status"`
		} `json:"pods"`
	}
	if err := json.Unmarshal(data, &state); err != nil {
		t.Fatalf("state file: %v", err)
	}
	if len(state.Pods) != 1 || len(state.Pods[0].Status.ContainerStatuses) != 1 || !state.Pods[0].Status.ContainerStatuses[0].Ready {
		t.Fatalf("state file after SIGHUP = %s, want the pod with its Ready container", data)
	}
}

// TestKill9KillsExecChildren: kill -9 of probed while an exec
// probe's command runs (a long sleep, timeoutSeconds 60) kills the command
// too (Pdeathsig): it is gone from /proc within 2 s, instead of running on
// as an orphan. (Period 2 s: the first run comes within 2 s; a run lasts
// until killed, and the next waits for it, BR-10.)
func TestKill9KillsExecChildren(t *testing.T) {
	sleepPath, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep on PATH")
	}
	marker := uniqueSleep()
	t.Cleanup(func() { killWithCmd(marker) })
	secs := strings.TrimPrefix(marker, "sleep ")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "sleepy.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: sleepy, namespace: e2e}
spec:
  containers:
  - name: c
    image: c
    readinessProbe:
      exec:
        command: [%q, %q]
      periodSeconds: 2
      timeoutSeconds: 60
`, sleepPath, secs))
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--allow-host-exec", "--log-format", "json")
	waitAPI(t, p, "http://"+listen, true)
	pid := p.cmd.Process.Pid
	// The full path as argv[0]: the command line reads "<path> N".
	cmdline := sleepPath + " " + secs
	eventually(t, p, 20*time.Second, "the exec probe's sleep running as probed's child", func() (bool, string) {
		for _, c := range liveWithCmd(cmdline) {
			if c.PPID == pid {
				return true, ""
			}
		}
		return false, fmt.Sprint(liveWithCmd(cmdline))
	})
	t.Cleanup(func() { killWithCmd(cmdline) })
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	deadline := time.Now().Add(2 * time.Second)
	for left := liveWithCmd(cmdline); len(left) > 0; left = liveWithCmd(cmdline) {
		if time.Now().After(deadline) {
			t.Fatalf("the exec command outlived probed's kill -9: %+v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// treeKillMode returns the mode of probed's start log line about exec
// tree kill ("cgroup" or "process-group"; "" before the line is written).
func treeKillMode(p *proc) string {
	for _, l := range p.logs() {
		if strings.HasPrefix(l.str("msg"), "exec probes:") {
			return l.str("treeKill")
		}
	}
	return ""
}

// TestKill9LeftoversKilledAtNextStart (cgroup mode): Pdeathsig
// reaches the exec command only; what it started (a child in its process
// group, a setsid child) outlives a kill -9 of probed in the command's
// cgroup leaf. The next probed started in the same cgroup kills them and
// removes the leaf, and says so in its start log line.
func TestKill9LeftoversKilledAtNextStart(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid on PATH")
	}
	child, escaped := uniqueSleep(), uniqueSleep()
	t.Cleanup(func() { killWithCmd(child); killWithCmd(escaped) })
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "tree.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: tree, namespace: e2e}
spec:
  containers:
  - name: c
    image: c
    readinessProbe:
      exec:
        command: [%q, "-c", "setsid %s & %s"]
      periodSeconds: 2
      timeoutSeconds: 60
`, sh, escaped, child))
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--allow-host-exec", "--log-format", "json")
	waitAPI(t, p, "http://"+listen, true)
	switch mode := treeKillMode(p); {
	case mode == "cgroup":
	case os.Getenv("PROBED_REQUIRE_CGROUP") == "1":
		t.Fatalf("tree kill mode %q, want cgroup (PROBED_REQUIRE_CGROUP=1); stderr:\n%s", mode, tail(p.stderr.String(), 10))
	default:
		t.Skipf("tree kill mode %q here: no cgroup leaves to clean up", mode)
	}
	eventually(t, p, 20*time.Second, "the command's two sleeps running", func() (bool, string) {
		return len(liveWithCmd(child)) == 1 && len(liveWithCmd(escaped)) == 1, ""
	})
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	time.Sleep(200 * time.Millisecond) // Pdeathsig has killed sh by now
	if len(liveWithCmd(child)) != 1 || len(liveWithCmd(escaped)) != 1 {
		t.Fatalf("the sleeps did not outlive kill -9 (child %v, escaped %v): the test would prove nothing", liveWithCmd(child), liveWithCmd(escaped))
	}

	listen2 := "127.0.0.1:" + strconv.Itoa(freePort(t))
	q := startProbed(t, nil, "run", "--manifests", t.TempDir(), "--listen", listen2, "--allow-host-exec", "--log-format", "json")
	waitAPI(t, q, "http://"+listen2, true)
	var killed float64
	for _, l := range q.logs() {
		if strings.HasPrefix(l.str("msg"), "exec probes:") {
			killed, _ = l["leftoversKilled"].(float64)
		}
	}
	if killed < 1 {
		t.Errorf("start log line reports %v leftover leaves killed, want ≥ 1; stderr:\n%s", killed, tail(q.stderr.String(), 10))
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(liveWithCmd(child))+len(liveWithCmd(escaped)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("leftovers of the killed probed still run after the next start: %v %v", liveWithCmd(child), liveWithCmd(escaped))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := q.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Errorf("second probed exited with %d", code)
	}
}
