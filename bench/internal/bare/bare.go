// Package bare is the floor of a prober on a node: the least a
// prober with the kubelet's model can do for HTTP and TCP probes. One
// goroutine and one time.Ticker per probe (the kubelet's worker loop without
// its state machine, results, status manager or metrics), a plain GET with
// keep-alives off for an HTTP probe and a plain dial and close for a TCP
// probe, from the standard library's defaults: no probe semantics (no
// thresholds, no redirect policy, no body limit beyond the read, no texts),
// no scheduler, no pool.
//
// probebench runs it in-process (-impl bare) against the harness's targets,
// bench/node as a process of its own (cmd/bareprober) against the real
// node's pods; both count what a probe costs when nothing but the probe is
// paid for.
package bare

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Probe is one probe of the bare prober: an HTTP GET of URL when URL is
// set, else a TCP dial of Addr (host:port).
type Probe struct {
	URL     string        `json:"url,omitempty"`
	Addr    string        `json:"addr,omitempty"`
	Period  time.Duration `json:"period"`
	Timeout time.Duration `json:"timeout"`
}

// Prober runs probes, each on its own goroutine and ticker, until Stop.
type Prober struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	client *http.Client

	mu      sync.Mutex
	running map[int]context.CancelFunc // by the caller's probe id

	ok, failed atomic.Int64
}

// New returns a prober with no probe running.
func New() *Prober {
	ctx, cancel := context.WithCancel(context.Background())
	return &Prober{
		ctx:    ctx,
		cancel: cancel,
		// The kubelet's HTTP prober has keep-alives off (a new connection
		// per probe, "Connection: close"), no proxy and no compression;
		// the rest is the standard library's default.
		client: &http.Client{Transport: &http.Transport{
			Proxy:              nil,
			DisableKeepAlives:  true,
			DisableCompression: true,
		}},
		running: map[int]context.CancelFunc{},
	}
}

// Start runs probe p under the caller's id: its first run comes at a
// random moment within one period (the kubelet's start jitter), then one
// every period. An id already running is left alone.
func (b *Prober) Start(id int, p Probe) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.running[id]; ok || b.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(b.ctx)
	b.running[id] = cancel
	b.wg.Add(1)
	go b.loop(ctx, p)
}

// Remove stops probe id (its run in flight ends at its timeout at the
// latest).
func (b *Prober) Remove(id int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cancel, ok := b.running[id]; ok {
		cancel()
		delete(b.running, id)
	}
}

// Running is the number of probes started and not removed.
func (b *Prober) Running() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.running)
}

// Counts returns the runs so far that succeeded and those that did not.
func (b *Prober) Counts() (ok, failed int64) { return b.ok.Load(), b.failed.Load() }

// Stop ends every probe and waits for their goroutines.
func (b *Prober) Stop() {
	b.cancel()
	b.wg.Wait()
	b.client.CloseIdleConnections()
}

func (b *Prober) loop(ctx context.Context, p Probe) {
	defer b.wg.Done()
	jitter := time.NewTimer(rand.N(p.Period))
	select {
	case <-ctx.Done():
		jitter.Stop()
		return
	case <-jitter.C:
	}
	t := time.NewTicker(p.Period)
	defer t.Stop()
	for {
		if b.run(ctx, p) {
			b.ok.Add(1)
		} else if ctx.Err() == nil {
			b.failed.Add(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// run is one probe run: a GET whose status is 2xx or 3xx, its body read and
// dropped, or a dial that connects, closed at once.
func (b *Prober) run(ctx context.Context, p Probe) bool {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	if p.URL == "" {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", p.Addr)
		if err != nil {
			return false
		}
		return conn.Close() == nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return false
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	resp.Body.Close()
	return err == nil && resp.StatusCode >= 200 && resp.StatusCode < 400
}
