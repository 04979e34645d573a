package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/probed/probed/bench/internal/lateness"
	"github.com/probed/probed/bench/internal/sysstat"
	"github.com/probed/probed/bench/internal/targets"
)

// targetStats is the target server's answer to "stats".
type targetStats struct {
	lateness.Stats
	targets.Counters
	// CPUSeconds is the target server's own CPU (user + system) in the
	// window: the other end of every probe connection.
	CPUSeconds float64 `json:"cpu_seconds"`
	Burstiness float64 `json:"burstiness"`
	BurstPeak  int     `json:"burst_peak"`
	Profile    []int   `json:"profile"`
}

// targetsMain is the "targets" role: the target server child process. It
// prints "PORTS <readiness> <liveness>" and then answers commands on stdin:
//
//	burst                      start the burst histogram
//	window <perWorker>         start recording calls
//	stopwindow                 stop recording calls
//	stats <period_ms> <span_ms> <expected/s>   print a targetStats JSON line
//	quit
func targetsMain(args []string) error {
	fs := flag.NewFlagSet("targets", flag.ExitOnError)
	mode := fs.String("mode", modeTCP, "tcp, http, hung or node")
	pods := fs.Int("pods", 1000, "pods")
	hungEvery := fs.Int("hung-every", 0, "pod i hangs when i%n == n-1")
	oneAddr := fs.String("one-addr", "", "bind to this one address")
	horizon := fs.Duration("burst-horizon", 10*time.Second, "burst histogram span")
	_ = fs.Parse(args)

	rec := lateness.New(*pods*2, *horizon)
	srv, err := targets.Listen(targets.Config{
		HTTP:        *mode != modeTCP,
		TCPLiveness: *mode == modeNode,
		Pods:        *pods,
		HungEvery:   *hungEvery,
		OneAddr:     *oneAddr,
		Rec:         rec,
	})
	if err != nil {
		return err
	}
	go func() {
		if err := srv.Serve(); err != nil {
			fmt.Fprintln(os.Stderr, "targets:", err)
			os.Exit(1)
		}
	}()
	r, l := srv.Ports()
	fmt.Printf("PORTS %d %d\n", r, l)
	keep := func(w int) bool {
		pod := w / 2
		return *hungEvery <= 0 || pod%*hungEvery != *hungEvery-1
	}
	var c0, c1 targets.Counters
	var cpu0, cpu1 time.Duration
	stopped := false
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "burst":
			rec.StartBurst()
			fmt.Println("OK")
		case "window":
			n, _ := strconv.Atoi(f[1])
			rec.StartWindow(n)
			c0 = srv.Counters()
			u, sy := sysstat.CPU()
			cpu0 = u + sy
			fmt.Println("OK")
		case "stopwindow":
			rec.StopWindow()
			c1, stopped = srv.Counters(), true
			u, sy := sysstat.CPU()
			cpu1 = u + sy
			fmt.Println("OK")
		case "stats":
			periodMs, _ := strconv.Atoi(f[1])
			spanMs, _ := strconv.Atoi(f[2])
			exp, _ := strconv.ParseFloat(f[3], 64)
			var ts targetStats
			ts.Stats = rec.Stats(time.Duration(periodMs)*time.Millisecond, keep)
			if !stopped {
				c1 = srv.Counters()
			}
			ts.Counters = targets.Counters{
				Accepted:   c1.Accepted - c0.Accepted,
				Hung:       c1.Hung - c0.Hung,
				Answered:   c1.Answered - c0.Answered,
				AcceptErrs: c1.AcceptErrs - c0.AcceptErrs,
			}
			if stopped {
				ts.CPUSeconds = (cpu1 - cpu0).Seconds()
			}
			ts.Burstiness, ts.BurstPeak = rec.Burstiness(time.Duration(spanMs)*time.Millisecond, exp)
			ts.Profile = rec.Profile(min(spanMs/100, 40))
			b, _ := json.Marshal(ts)
			fmt.Println(string(b))
		case "quit":
			srv.Stop()
			return nil
		}
	}
	srv.Stop()
	return in.Err()
}

// targetProc is the run's handle on its target server child.
type targetProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	rport  int
	lport  int
	closed bool
}

func startTargets(mode string, pods, hungEvery int, oneAddr string, horizon time.Duration) (*targetProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "targets", "-mode", mode, "-pods", strconv.Itoa(pods),
		"-hung-every", strconv.Itoa(hungEvery), "-one-addr", oneAddr, "-burst-horizon", horizon.String())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	tp := &targetProc{cmd: cmd, in: in, out: bufio.NewScanner(outPipe)}
	tp.out.Buffer(make([]byte, 1<<16), 1<<22)
	line, err := tp.readLine()
	if err != nil {
		tp.Close()
		return nil, err
	}
	if _, err := fmt.Sscanf(line, "PORTS %d %d", &tp.rport, &tp.lport); err != nil {
		tp.Close()
		return nil, fmt.Errorf("targets: unexpected %q", line)
	}
	return tp, nil
}

func (tp *targetProc) readLine() (string, error) {
	if !tp.out.Scan() {
		if err := tp.out.Err(); err != nil {
			return "", err
		}
		return "", errors.New("targets: server exited")
	}
	return tp.out.Text(), nil
}

func (tp *targetProc) cmdLine(format string, args ...any) (string, error) {
	if _, err := fmt.Fprintf(tp.in, format+"\n", args...); err != nil {
		return "", err
	}
	return tp.readLine()
}

func (tp *targetProc) stats(period, span time.Duration, expected float64) (targetStats, error) {
	var ts targetStats
	line, err := tp.cmdLine("stats %d %d %g", period.Milliseconds(), span.Milliseconds(), expected)
	if err != nil {
		return ts, err
	}
	err = json.Unmarshal([]byte(line), &ts)
	return ts, err
}

func (tp *targetProc) Close() {
	if tp.closed {
		return
	}
	tp.closed = true
	_, _ = fmt.Fprintln(tp.in, "quit")
	_ = tp.in.Close()
	done := make(chan struct{})
	go func() { _ = tp.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = tp.cmd.Process.Kill()
		<-done
	}
}
