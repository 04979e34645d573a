package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/internal/probedbin"
	"github.com/probed/probed/internal/testlog"
)

// probedBin is the probed binary of the long-running agent tests (built
// with -race when the tests run with -race); checkBin is built without the
// race detector for one-shot `probed check` runs, whose probes have real 1 s
// timeouts that a race-instrumented binary on a loaded 2-core machine can
// miss. `make test` builds both once for every package (internal/probedbin);
// run alone, TestMain builds them.
var probedBin, checkBin string

// TestMain gets the binaries (internal/probedbin) and runs the tests. Under
// -short (`make test-short`, the quick loop) the whole package is skipped:
// every test here starts real agents and waits for real timeouts, and the
// build alone takes minutes; `make test` (CI) runs it.
func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Fprintln(os.Stderr, "e2e: skipped with -short (the end-to-end tests run in make test)")
		return 0
	}
	bins, err := probedbin.Build(raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer bins.Close()
	probedBin, checkBin = bins.Race, bins.NoRace
	return m.Run()
}

// ---------------------------------------------------------------------------
// Child processes.

// proc is a running probed process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout testlog.Buffer
	stderr testlog.Buffer
	done   chan struct{} // closed when the process has been waited for
	err    error         // Wait's error, set before done is closed
}

// startProbed starts the probed binary with args (and env added to the
// test's environment). t.Cleanup kills it if it still runs.
func startProbed(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startBinary(t, probedBin, env, args...)
}

// startBinary is startProbed with another build of probed (checkBin: the
// one without the race detector).
func startBinary(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting probed %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits up to timeout for the process to exit; it
// returns the exit code.
func (p *proc) stop(sig os.Signal, timeout time.Duration) int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !p.exited() {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("probed did not exit within %v after %v; stderr:\n%s", timeout, sig, tail(p.stderr.String(), 40))
	}
	return exitCode(p.err)
}

// gone reports whether no process with p's pid exists any more (it has
// exited and been reaped).
func (p *proc) gone() bool {
	err := syscall.Kill(p.cmd.Process.Pid, 0)
	return errors.Is(err, syscall.ESRCH)
}

// logLine is one line of probed's JSON log.
type logLine map[string]any

func (l logLine) str(key string) string {
	s, _ := l[key].(string)
	return s
}

// logs parses probed's stderr (--log-format json); lines that are not JSON
// (a panic, a race report) are returned with "msg" set to the raw line.
func (p *proc) logs() []logLine {
	var out []logLine
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var l logLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			l = logLine{"msg": line, "raw": true}
		}
		out = append(out, l)
	}
	return out
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return raceReports(s) + strings.Join(lines, "\n")
}

// raceReports returns the race detector's reports in s (each between two
// "==================" lines), so that a failure caused by a race in the
// agent shows the report and not just the last log lines.
func raceReports(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "WARNING: DATA RACE")
		if i < 0 {
			return b.String()
		}
		s = s[i:]
		end := strings.Index(s, "==================")
		if end < 0 {
			end = len(s)
		}
		b.WriteString(s[:end])
		b.WriteString("---\n")
		s = s[end:]
	}
}

// runProbed runs probed to completion (at most 60 s) and returns its
// stdout, stderr and exit code.
func runProbed(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, checkBin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("probed %s did not finish within 60 s; stderr:\n%s", strings.Join(args, " "), errOut.String())
	}
	code = exitCode(err)
	if code < 0 {
		t.Fatalf("probed %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// ---------------------------------------------------------------------------
// The `probed check` table.

// row is one line of the table of `probed check`.
type row struct {
	Pod, Container, Probe, Handler, Result, Duration, Message string
}

func (r row) String() string {
	return fmt.Sprintf("%s %s %s %s %s %q", r.Pod, r.Container, r.Probe, r.Handler, r.Result, r.Message)
}

var tableColumns = []string{"POD", "CONTAINER", "PROBE", "HANDLER", "RESULT", "DURATION", "MESSAGE"}

// parseTable parses the table of `probed check` by the column offsets of
// its header (tabwriter aligns the columns; cells other than MESSAGE have
// no spaces).
func parseTable(t *testing.T, out string) []row {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "POD") {
		t.Fatalf("no table header in stdout:\n%s", out)
	}
	header := lines[0]
	var offs []int
	for _, c := range tableColumns {
		i := strings.Index(header, c)
		if i < 0 || (len(offs) > 0 && i <= offs[len(offs)-1]) {
			t.Fatalf("table header %q lacks column %s", header, c)
		}
		offs = append(offs, i)
	}
	var rows []row
	for _, l := range lines[1:] {
		cell := func(i int) string {
			if offs[i] >= len(l) {
				return ""
			}
			end := len(l)
			if i+1 < len(offs) && offs[i+1] < end {
				end = offs[i+1]
			}
			return strings.TrimSpace(l[offs[i]:end])
		}
		r := row{cell(0), cell(1), cell(2), cell(3), cell(4), cell(5), cell(6)}
		for i, c := range []string{r.Pod, r.Container, r.Probe, r.Handler, r.Result, r.Duration} {
			if c == "" || strings.Contains(c, " ") {
				t.Fatalf("table line %q: column %s is %q", l, tableColumns[i], c)
			}
		}
		if _, err := time.ParseDuration(r.Duration); err != nil {
			t.Fatalf("table line %q: DURATION %q: %v", l, r.Duration, err)
		}
		rows = append(rows, r)
	}
	return rows
}

// ---------------------------------------------------------------------------
// The API of `probed run`.

var apiClient = &http.Client{
	Timeout:   5 * time.Second,
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
}

func apiGet(base, path string) ([]byte, error) {
	resp, err := apiClient.Get(base + path)
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

// getPods reads /pods into a v1.PodList.
func getPods(base string) (*v1.PodList, error) {
	body, err := apiGet(base, "/pods")
	if err != nil {
		return nil, err
	}
	var list v1.PodList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("/pods is not a v1.PodList: %w", err)
	}
	if list.Kind != "PodList" || list.APIVersion != "v1" {
		return nil, fmt.Errorf("/pods: kind %q apiVersion %q, want PodList v1", list.Kind, list.APIVersion)
	}
	return &list, nil
}

func findPod(list *v1.PodList, namespace, name string) *v1.Pod {
	for i := range list.Items {
		if list.Items[i].Namespace == namespace && list.Items[i].Name == name {
			return &list.Items[i]
		}
	}
	return nil
}

// containerStatus returns the status of a container or restartable init
// container of pod.
func containerStatus(pod *v1.Pod, name string) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func podCondition(pod *v1.Pod, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func podNames(list *v1.PodList) []string {
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return names
}

// eventually polls cond every 50 ms until it holds or timeout passes; then
// it fails the test with what and cond's last description. When p is set,
// the test also fails as soon as p exits.
func eventually(t *testing.T, p *proc, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, desc := cond()
		if ok {
			return
		}
		last = desc
		if p != nil && p.exited() {
			t.Fatalf("%s: probed exited (%v) while waiting; last state: %s\nstderr:\n%s", what, p.err, last, tail(p.stderr.String(), 40))
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("%s: not within %v; last state: %s", what, timeout, last)
			if p != nil {
				msg += "\nstderr:\n" + tail(p.stderr.String(), 40)
			}
			t.Fatal(msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAPI waits until probed's API answers /healthz with "ok". When the
// process exits because its --listen address is taken, the test is skipped
// if skipIfTaken, else it fails.
func waitAPI(t *testing.T, p *proc, base string, skipIfTaken bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		body, err := apiGet(base, "/healthz")
		if err == nil {
			if string(body) != "ok" {
				t.Fatalf("/healthz = %q, want ok", body)
			}
			return
		}
		if p.exited() {
			if skipIfTaken && strings.Contains(p.stderr.String(), "address already in use") {
				t.Skipf("the API address was taken before probed bound it:\n%s", tail(p.stderr.String(), 5))
			}
			t.Fatalf("probed exited (%v) before serving its API; stderr:\n%s", p.err, tail(p.stderr.String(), 40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("probed's API did not answer within 30 s: %v; stderr:\n%s", err, tail(p.stderr.String(), 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}

// writeFile writes a manifest atomically (a hidden temporary file, which
// the agent ignores, renamed into place), so the agent never reads half a
// file.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
