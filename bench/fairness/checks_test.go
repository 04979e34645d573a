package fairness

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/probed/probed/bench/internal/nodebench"
)

// The checks on a response as a tenant would abuse them: the
// real agent binary in manifest mode, 20 victim pods (one HTTP readiness
// probe each, period 1 s) beside
//
//   - the pods, which the bounds refuse when they are read: two
//     pods of 8 `{..[0]}` and `{..[0]..[0]}` jsonPath probes on 10 KB of
//     nested arrays (before: 4.7 s of CPU and 100 MiB a run), and one of
//     32 bodyRegex probes of 1,003 instructions (160 ms a run);
//   - what the bounds let through at its costliest, every second, in three
//     more namespaces: 32 bodyRegex probes of 50 instructions on 10 KiB of
//     "a" (every position keeps 47 threads alive), 8 jsonPath probes of
//     `{[*].*}` on 10 KiB of strings (a result per byte), and 8 of 400
//     wildcards on the nested arrays (a Failure: deeper than 100 levels).
//
// Reported per case: the victims' fewest runs in the window, their largest
// gap and p99 lateness (gap − period), and the agent's peak RSS and CPU.
//
//	cd bench && flock /work/.heavylock go test -run '^$' -bench HostileChecks -benchtime 1x -timeout 30m ./fairness
var checksWindow = flag.Duration("fairness.checks-window", 30*time.Second, "how long each case of BenchmarkHostileChecks runs")

func BenchmarkHostileChecks(b *testing.B) {
	bin := nodebench.ProbedBinary(b, filepath.Join("..", ".."))
	for _, c := range []struct {
		name    string
		hostile bool
	}{{"alone", false}, {"with-hostile-checks", true}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r := checksScenario(b, bin, c.hostile)
				b.ReportMetric(float64(r.minRuns), "victim-min-runs")
				b.ReportMetric(float64(r.expected), "victim-expected-runs")
				b.ReportMetric(r.maxGap.Seconds(), "victim-max-gap-s")
				b.ReportMetric(float64(r.p99Late.Milliseconds()), "victim-p99-late-ms")
				b.ReportMetric(float64(r.peakRSS>>20), "agent-peak-rss-MiB")
				b.ReportMetric(r.cpu, "agent-cpu-%")
			}
		})
	}
}

type checksResult struct {
	minRuns, expected int
	maxGap, p99Late   time.Duration
	peakRSS           int64
	cpu               float64 // % of a core over the window
}

func checksScenario(b *testing.B, bin string, hostile bool) checksResult {
	b.StopTimer()
	var mu sync.Mutex
	arrived := map[string][]time.Time{}
	nested := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	flood := strings.Repeat("a", 10<<10)
	flat := "[" + strings.Repeat(`"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",`, 230) + `"a"]`
	port := serve(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/nested":
			_, _ = w.Write([]byte(nested))
		case "/flood":
			_, _ = w.Write([]byte(flood))
		case "/flat":
			_, _ = w.Write([]byte(flat))
		default:
			mu.Lock()
			arrived[r.URL.Path] = append(arrived[r.URL.Path], time.Now())
			mu.Unlock()
		}
	}))
	dir := b.TempDir()
	var m strings.Builder
	for i := 0; i < *victims; i++ {
		fmt.Fprintf(&m, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: web-%d, namespace: victims}\nspec:\n  containers:\n  - name: app\n    image: app\n"+
			"    readinessProbe:\n      httpGet: {path: /v%d, port: %d}\n      periodSeconds: 1\n", i, i, port)
	}
	if hostile {
		for _, h := range []struct {
			ns     string
			n      int
			expect string
			path   string
		}{
			{"hostile-a", 8, `{"jsonPath":{"path":"{..[0]}","value":"[]"}}`, "/nested"},
			{"hostile-b", 8, `{"jsonPath":{"path":"{..[0]..[0]}","value":"[]"}}`, "/nested"},
			{"hostile-c", 32, `{"bodyRegex":"[a-z]{1000}b"}`, "/flood"},
			{"hostile-d", 32, `{"bodyRegex":"[a-z]{47}b"}`, "/flood"},
			{"hostile-e", 8, `{"jsonPath":{"path":"{[*].*}","value":"x"}}`, "/flat"},
			{"hostile-f", 8, `{"jsonPath":{"path":"{` + strings.Repeat(".*", 400) + `}","value":"x"}}`, "/nested"},
		} {
			var probes []string
			fmt.Fprintf(&m, "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: hostile\n  namespace: %s\n  annotations:\n    probed.io/probes: '", h.ns)
			for i := range h.n {
				probes = append(probes, fmt.Sprintf(`{"container":"c%d","type":"readiness","periodSeconds":1,"timeoutSeconds":5,"httpGet":{"path":"%s","port":%d,"expect":%s}}`,
					i, h.path, port, h.expect))
			}
			m.WriteString("[" + strings.Join(probes, ",") + "]'\nspec:\n  containers:\n")
			for i := range h.n {
				fmt.Fprintf(&m, "  - {name: c%d, image: app}\n", i)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "pods.yaml"), []byte(m.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "run", "--manifests", dir, "--listen", listen, "--log-level", "error")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	time.Sleep(3 * time.Second) // every probe's first run
	b.StartTimer()
	start := time.Now()
	cpu0, _ := nodebench.ProcCPU(cmd.Process.Pid)
	var peak int64
	for time.Since(start) < *checksWindow {
		time.Sleep(500 * time.Millisecond)
		peak = max(peak, nodebench.ProcRSS(cmd.Process.Pid))
	}
	end := time.Now()
	cpu1, _ := nodebench.ProcCPU(cmd.Process.Pid)
	cpu := cpu1 - cpu0
	b.StopTimer()
	if cmd.Process.Signal(syscall.Signal(0)) != nil {
		b.Fatalf("probed exited: %s", stderr.String())
	}
	r := checksResult{minRuns: 1 << 30, expected: int(end.Sub(start) / victimPeriod), peakRSS: peak, cpu: 100 * cpu.Seconds() / end.Sub(start).Seconds()}
	var lates []time.Duration
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < *victims; i++ {
		var last time.Time
		n := 0
		for _, at := range arrived[fmt.Sprintf("/v%d", i)] {
			if at.Before(start) || at.After(end) {
				continue
			}
			if !last.IsZero() {
				gap := at.Sub(last)
				r.maxGap = max(r.maxGap, gap)
				lates = append(lates, max(gap-victimPeriod, 0))
			}
			last = at
			n++
		}
		r.minRuns = min(r.minRuns, n)
	}
	sort.Slice(lates, func(i, j int) bool { return lates[i] < lates[j] })
	if len(lates) > 0 {
		r.p99Late = lates[len(lates)*99/100]
	}
	return r
}
