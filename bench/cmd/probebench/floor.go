package main

import (
	"errors"
	"io"
	"net"
	nethttp "net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/probed/probed/bench/internal/targets"
	"github.com/probed/probed/runtime"
)

// The floors of the saturation runs: what a probe must cost at the least,
// with nothing of a prober manager around it (no scheduler, worker,
// pool, results or metrics).
const (
	implDialLoop = "dialloop" // TCP: dial and close
	implGetLoop  = "getloop"  // HTTP: one GET on a new connection, body read
)

// probeTimeout is the timeout of every probe of a scenario (probe():
// timeoutSeconds 1), which the floors use as theirs.
const probeTimeout = time.Second

// floorLoop is the baseline of a saturation run: conc goroutines doing one
// attempt after another, each against the next of the scenario's probe
// addresses (round robin over every pod's readiness and liveness port), as
// fast as they can. It is the same number of goroutines as probed's network
// pool, so throughput and CPU per probe compare at equal concurrency.
type floorLoop struct {
	conc int
	// newAttempt returns one goroutine's attempt function; attempt(w)
	// probes worker w's address and reports whether it succeeded.
	newAttempt func() func(w int) bool
	n          uint64 // workers (2 per pod)
	stop       atomic.Bool
	wg         sync.WaitGroup
	next       atomic.Uint64
	ok, fail   atomic.Int64
}

func (f *floorLoop) start() {
	for i := 0; i < f.conc; i++ {
		attempt := f.newAttempt()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for !f.stop.Load() {
				if attempt(int(f.next.Add(1) % f.n)) {
					f.ok.Add(1)
				} else {
					f.fail.Add(1)
				}
			}
		}()
	}
}

func (f *floorLoop) stopAndWait() {
	f.stop.Store(true)
	f.wg.Wait()
}

// probeAddrs returns host:port of every worker of sc (workerIndex order:
// readiness 2i, liveness 2i+1), as the probes of the scenario address them.
func probeAddrs(sc *scenario) []string {
	addrs := make([]string, len(sc.pods)*2)
	for w := range addrs {
		ip := targets.Addr(w / 2)
		if sc.oneAddr != "" {
			ip = sc.oneAddr
		}
		port := sc.rport
		if w%2 == 1 {
			port = sc.lport
		}
		addrs[w] = net.JoinHostPort(ip, strconv.Itoa(port))
	}
	return addrs
}

// floorDialer is the socket set-up of probed's network dialer
// (plugins/internal/dialer): the probe timeout bounds the connect, no TCP
// keep-alive (a probe connection lives for one request: keep-alive would
// cost setsockopt calls for nothing) and SO_LINGER {on, 0}, so the
// prober's close sends an RST and leaves no TIME-WAIT socket.
func floorDialer() *net.Dialer {
	return &net.Dialer{Timeout: probeTimeout, KeepAlive: -1, Control: lingerZero}
}

// newDialLoop is the floor of the TCP saturation run: dial the probe's
// address and close the connection (what a tcpSocket probe is, T1).
func newDialLoop(sc *scenario, conc int) *floorLoop {
	addrs := probeAddrs(sc)
	return &floorLoop{conc: conc, n: uint64(len(addrs)), newAttempt: func() func(int) bool {
		dialer := floorDialer()
		return func(w int) bool {
			conn, err := dialer.Dial("tcp", addrs[w])
			if err != nil {
				return false
			}
			_ = conn.Close()
			return true
		}
	}}
}

// newGetLoop is the floor of the HTTP saturation run: the request the
// kubelet's HTTP prober sends (spec H1–H3), on a new connection, and the
// body read as the prober reads it (H6):
//
//   - GET http://<pod IP>:<port>/healthz, HTTP/1.1 with "Connection: close"
//     (keep-alives off: one new connection per probe, as the kubelet's
//     transport), headers User-Agent: kube-probe/<major.minor> and
//     Accept: */*, no Accept-Encoding (compression off), no proxy;
//   - the dialer of probed's handlers (floorDialer) and one shared client
//     whose timeout is the probe's (1 s);
//   - the body read into a buffer of runtime.MaxOutputBytes (10 KiB) until
//     EOF or the buffer is full; a 2xx status is a success.
//
// It leaves out what the kubelet's semantics add around the GET: the
// output string, the verdict mapping, redirects (none happen here), the
// per-attempt deadline context and the error texts.
func newGetLoop(sc *scenario, conc int) *floorLoop {
	addrs := probeAddrs(sc)
	urls := make([]*url.URL, len(addrs))
	for w, a := range addrs {
		urls[w] = &url.URL{Scheme: "http", Host: a, Path: "/healthz"}
	}
	header := nethttp.Header{
		"User-Agent": {runtime.KubeProbeUserAgent},
		"Accept":     {"*/*"},
	}
	client := &nethttp.Client{
		Timeout: probeTimeout,
		Transport: &nethttp.Transport{
			Proxy:                  nil,
			DialContext:            floorDialer().DialContext,
			DisableKeepAlives:      true,
			DisableCompression:     true,
			MaxResponseHeaderBytes: runtime.MaxResponseHeaderBytes,
		},
	}
	return &floorLoop{conc: conc, n: uint64(len(addrs)), newAttempt: func() func(int) bool {
		buf := make([]byte, runtime.MaxOutputBytes)
		return func(w int) bool {
			resp, err := client.Do(&nethttp.Request{Method: nethttp.MethodGet, URL: urls[w], Header: header})
			if err != nil {
				return false
			}
			err = readInto(resp.Body, buf)
			_ = resp.Body.Close()
			return err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300
		}
	}}
}

// readInto reads r until EOF or buf is full (the prober's body limit).
func readInto(r io.Reader, buf []byte) error {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func lingerZero(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
	})
	if err != nil {
		return err
	}
	return serr
}
