package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLogBudget: the real binary with --log-budget 2048 and
// 300 pods whose probes all fail at once writes at most its burst (8 KiB)
// plus 2 KiB a second plus its "log lines dropped" reports, whatever the
// pods do; the drop is counted on /metrics and said in the log.
func TestLogBudget(t *testing.T) {
	dir := t.TempDir()
	var manifest strings.Builder
	for i := range 300 {
		fmt.Fprintf(&manifest, `---
apiVersion: v1
kind: Pod
metadata: {name: web-%d, namespace: flood}
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      tcpSocket: {port: %d}
      periodSeconds: 1
`, i, freePort(t))
	}
	writeFile(t, filepath.Join(dir, "pods.yaml"), manifest.String())
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	start := time.Now()
	p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--log-format", "json", "--log-budget", "2048")
	base := "http://" + listen
	waitAPI(t, p, base, false)
	eventually(t, p, 30*time.Second, "lines dropped and counted", func() (bool, string) {
		body, err := apiGet(base, "/metrics")
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "probed_log_lines_dropped_total ") && line != "probed_log_lines_dropped_total 0" {
				return true, ""
			}
		}
		return false, "no drop counted"
	})
	if code := p.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, tail(p.stderr.String(), 20))
	}
	took := time.Since(start).Seconds()
	logs := p.stderr.String()
	reports := strings.Count(logs, "log lines dropped: the log budget is spent")
	if reports == 0 {
		t.Errorf("no line says lines were dropped:\n%s", tail(logs, 10))
	}
	if budget := 8192 + int(2048*took) + 400*reports; len(logs) > budget {
		t.Errorf("%d bytes logged in %.1f s, more than the budget %d", len(logs), took, budget)
	}
}
