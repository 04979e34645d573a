package api_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probed/probed/agent/api"
)

// logBuffer collects a logger's records.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serve runs the API server (api.NewServer on api.Listen) with cfg on
// addr until the test ends and returns the listener's address.
func serve(t *testing.T, addr string, cfg api.ServerConfig, log *slog.Logger) string {
	t.Helper()
	ln, err := api.Listen(addr, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// request sends a keep-alive GET on c and reads the response within d.
func request(c net.Conn, br *bufio.Reader, d time.Duration) (*http.Response, error) {
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: probed\r\n\r\n"); err != nil {
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// closedWithin reports whether the server closes c (a read ends in EOF or a
// reset) within d.
func closedWithin(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestServerCapsConnections (issue 9 §1): with MaxConnections 4, ten
// keep-alive clients get four connections served; the other six wait in the
// kernel's accept queue (probed holds no descriptor for them) until served
// ones close, and then they are served.
func TestServerCapsConnections(t *testing.T) {
	addr := serve(t, "127.0.0.1:0", api.ServerConfig{MaxConnections: 4}, quiet())
	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	var clients []client
	for i := 0; i < 10; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, client{c, bufio.NewReader(c)})
	}
	// Connections are accepted in the order they arrived: the first four.
	for i, cl := range clients[:4] {
		if resp, err := request(cl.c, cl.br, 10*time.Second); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("client %d (within the cap): %v", i, err)
		}
	}
	var wg sync.WaitGroup
	served := make(chan int, 6)
	for i, cl := range clients[4:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := request(cl.c, cl.br, 300*time.Millisecond); err == nil {
				served <- i + 4
			}
		}()
	}
	wg.Wait()
	close(served)
	for i := range served {
		t.Errorf("client %d was served while 4 connections held the cap of 4", i)
	}
	// Free the cap: the waiting clients' requests (already sent) are
	// served as served ones close.
	for _, cl := range clients[:4] {
		cl.c.Close()
	}
	for i, cl := range clients[4:] {
		_ = cl.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(cl.br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("client %d after the cap freed: %v", i+4, err)
		}
		resp.Body.Close()
		cl.c.Close()
	}
}

// TestServerTimeouts: a connection that never completes its request
// headers, and a keep-alive connection left idle, are closed by the server
// (ReadHeaderTimeout, IdleTimeout) and hold no slot of the cap afterwards.
func TestServerTimeouts(t *testing.T) {
	addr := serve(t, "127.0.0.1:0", api.ServerConfig{MaxConnections: 2, ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 200 * time.Millisecond}, quiet())

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := io.WriteString(slow, "GET /healthz HTTP/1.1\r\nHost: pro"); err != nil {
		t.Fatal(err)
	}
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idleBR := bufio.NewReader(idle)
	if resp, err := request(idle, idleBR, 10*time.Second); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("idle client's request: %v", err)
	}
	if !closedWithin(slow, bufio.NewReader(slow), 10*time.Second) {
		t.Error("a connection with unfinished request headers was not closed (ReadHeaderTimeout)")
	}
	if !closedWithin(idle, idleBR, 10*time.Second) {
		t.Error("an idle keep-alive connection was not closed (IdleTimeout)")
	}
	// Both slots are free again.
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if resp, err := request(c, bufio.NewReader(c), 10*time.Second); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("new client %d after the timeouts: %v", i, err)
		}
	}
}

// TestServerHeaderCap: request headers beyond MaxHeaderBytes get 431.
func TestServerHeaderCap(t *testing.T) {
	addr := serve(t, "127.0.0.1:0", api.ServerConfig{}, quiet())
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Big", strings.Repeat("a", 2*api.DefaultMaxHeaderBytes))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("status %d for %d header bytes, want 431", resp.StatusCode, 2*api.DefaultMaxHeaderBytes)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestNewServerDefaults: zero ServerConfig fields take the documented
// defaults.
func TestNewServerDefaults(t *testing.T) {
	srv := api.NewServer(http.NotFoundHandler(), api.ServerConfig{})
	if srv.ReadHeaderTimeout != api.DefaultReadHeaderTimeout || srv.ReadTimeout != api.DefaultReadTimeout ||
		srv.WriteTimeout != api.DefaultWriteTimeout || srv.IdleTimeout != api.DefaultIdleTimeout ||
		srv.MaxHeaderBytes != api.DefaultMaxHeaderBytes {
		t.Errorf("NewServer defaults: %+v", srv)
	}
	for limit, want := range map[uint64]int{0: 256, 1 << 20: 256, 1024: 256, 1000: 250, 160: 40, 8: 4} {
		if got := api.MaxConnectionsFor(limit); got != want {
			t.Errorf("MaxConnectionsFor(%d) = %d, want %d", limit, got, want)
		}
	}
}

// TestListenWarnsBeyondLoopback: an API on every interface logs that it
// has no authentication; one on loopback does not.
func TestListenWarnsBeyondLoopback(t *testing.T) {
	for addr, warn := range map[string]bool{"127.0.0.1:0": false, "localhost:0": false, "0.0.0.0:0": true} {
		var logs logBuffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		ln, err := api.Listen(addr, api.ServerConfig{}, log)
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		got := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "no authentication")
		if got != warn {
			t.Errorf("Listen(%q): warning logged %v, want %v; logs: %s", addr, got, warn, logs.String())
		}
	}
}
