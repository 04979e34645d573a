// Command logflood measures what hostile pods cost the agent's log and API:
// it runs the real probed binary in manifest mode with -pods
// pods (default one) whose annotation readiness probe has a -path-bytes
// long httpGet path, every -period, against a closed port (every run fails,
// and Go's error quotes the URL), for -for; then it prints one JSON line:
// the bytes and lines the agent logged (stdout and stderr together) and the
// sizes of GET /pods/{namespace}/{name}/probes of the first pod, /events,
// /pods, the status page and the first pod's page, read one second before
// the end (five seconds for a run of 30 s or more).
//
//	cd bench && go run ./cmd/logflood -probed ../probed [-for 30s] [-pods 1] [-path-bytes 250000] [-period 100ms] [-- extra probed flags]
//
// docs/benchmarks.md ("Log and history bounds") has the figures.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

type result struct {
	PodCount    int    `json:"pods"`
	Path        int    `json:"pathBytes"`
	Period      string `json:"period"`
	For         string `json:"for"`
	LogBytes    int64  `json:"logBytes"`
	LogLines    int64  `json:"logLines"`
	LogPerSec   int64  `json:"logBytesPerSecond"`
	Probes      int    `json:"probesBytes"`
	Events      int    `json:"eventsBytes"`
	Pods        int    `json:"podsBytes"`
	Page        int    `json:"pageBytes"`
	PodPage     int    `json:"podPageBytes"`
	ExitCode    int    `json:"exitCode"`
	ProbedFlags string `json:"probedFlags,omitempty"`
}

// counter counts the bytes and lines written to it.
type counter struct {
	mu           sync.Mutex
	bytes, lines int64
}

func (c *counter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.bytes += int64(len(p))
	c.lines += int64(bytes.Count(p, []byte{'\n'}))
	c.mu.Unlock()
	return len(p), nil
}

func main() {
	probed := flag.String("probed", "", "the probed binary (required)")
	dur := flag.Duration("for", 30*time.Second, "how long the agent runs")
	pathBytes := flag.Int("path-bytes", 250_000, "bytes of the probe's httpGet path")
	period := flag.Duration("period", 100*time.Millisecond, "the probe's period (100ms to 1s)")
	pods := flag.Int("pods", 1, "pods, each with that probe")
	flag.Parse()
	if *probed == "" || *period < 100*time.Millisecond || *period > time.Second {
		fmt.Fprintln(os.Stderr, "usage: logflood -probed BINARY [-for D] [-path-bytes N] [-period 100ms..1s] [-- probed flags]")
		os.Exit(2)
	}
	if err := run(*probed, *dur, *pods, *pathBytes, *period, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "logflood:", err)
		os.Exit(1)
	}
}

// readBefore is how long before the end the API is read: 5 s (a node of
// thousands of pods serves /pods in a while), less for short runs.
func readBefore(dur time.Duration) time.Duration {
	return min(5*time.Second, dur/6)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func run(probed string, dur time.Duration, pods, pathBytes int, period time.Duration, extra []string) error {
	dir, err := os.MkdirTemp("", "logflood-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	closed, err := freePort()
	if err != nil {
		return err
	}
	api, err := freePort()
	if err != nil {
		return err
	}
	path := "/" + strings.Repeat("a", pathBytes-1)
	ms := int(period/time.Millisecond) - 1000 // periodSeconds 1 plus periodMilliseconds
	probes := fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":1,"periodMilliseconds":%d,"httpGet":{"path":%q,"port":%d}}]`, ms, path, closed)
	ann, _ := json.Marshal(probes)
	var manifest strings.Builder
	for i := range pods {
		name := "web"
		if i > 0 {
			name = fmt.Sprintf("web-%d", i)
		}
		fmt.Fprintf(&manifest, "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: flood\n  annotations:\n    probed.io/probes: %s\nspec:\n  containers:\n  - name: app\n    image: app\n", name, ann)
	}
	if err := os.WriteFile(filepath.Join(dir, "flood.yaml"), []byte(manifest.String()), 0o600); err != nil {
		return err
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", api)
	args := append([]string{"run", "--manifests", dir, "--listen", fmt.Sprintf("127.0.0.1:%d", api), "--for", dur.String()}, extra...)
	cmd := exec.Command(probed, args...)
	var logs counter
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return err
	}
	res := result{PodCount: pods, Path: pathBytes, Period: period.String(), For: dur.String(), ProbedFlags: strings.Join(extra, " ")}
	time.Sleep(dur - readBefore(dur))
	client := &http.Client{Timeout: 20 * time.Second}
	for p, into := range map[string]*int{"/pods/flood/web/probes": &res.Probes, "/events": &res.Events, "/pods": &res.Pods, "/": &res.Page, "/pod/flood/web": &res.PodPage} {
		resp, err := client.Get(base + p)
		if err != nil {
			return fmt.Errorf("GET %s: %w", p, err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		*into = int(n)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		res.ExitCode = ee.ExitCode()
	} else if err != nil {
		return err
	}
	logs.mu.Lock()
	res.LogBytes, res.LogLines = logs.bytes, logs.lines
	logs.mu.Unlock()
	res.LogPerSec = res.LogBytes * int64(time.Second) / int64(dur)
	return json.NewEncoder(os.Stdout).Encode(res)
}
