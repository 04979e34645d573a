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
	"github.com/probed/probed/internal/testlog"
)

// serve runs the API server (api.NewServer on api.Listen, served with
// Listener.Serve) with cfg and handler h (nil: one that answers "ok") on
// addr until the test ends and returns the listener's address.
func serve(t *testing.T, addr string, cfg api.ServerConfig, log *slog.Logger, h ...http.Handler) string {
	t.Helper()
	ln, err := api.Listen(addr, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	if len(h) > 0 {
		handler = h[0]
	}
	srv := api.NewServer(handler, cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ln.Serve(srv)
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

// client is one raw keep-alive connection to the API.
type client struct {
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return client{c, bufio.NewReader(c)}
}

// healthzWithin sends GET /healthz on a new connection and reports whether
// it was answered 200 within d.
func healthzWithin(t *testing.T, addr string, d time.Duration) bool {
	t.Helper()
	cl := dial(t, addr)
	resp, err := request(cl.c, cl.br, d)
	return err == nil && resp.StatusCode == http.StatusOK
}

// TestServerCapsConnections: with MaxConnections 4 and four
// requests in flight (a handler that blocks), further clients are not
// served (the cap holds: they wait in the accept queue, holding no
// descriptor of probed's) until requests end; then they are.
func TestServerCapsConnections(t *testing.T) {
	release := make(chan struct{})
	var inFlight sync.WaitGroup
	inFlight.Add(4)
	var once sync.Map
	addr := serve(t, "127.0.0.1:0", api.ServerConfig{MaxConnections: 4}, quiet(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			if _, loaded := once.LoadOrStore(r.RemoteAddr, true); !loaded {
				inFlight.Done()
			}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	var busy []client
	for i := 0; i < 4; i++ {
		cl := dial(t, addr)
		if _, err := io.WriteString(cl.c, "GET /slow HTTP/1.1\r\nHost: probed\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		busy = append(busy, cl)
	}
	inFlight.Wait()
	waiting := make([]client, 3)
	for i := range waiting {
		waiting[i] = dial(t, addr)
		if _, err := io.WriteString(waiting[i].c, "GET /healthz HTTP/1.1\r\nHost: probed\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	for i, cl := range waiting {
		_ = cl.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := http.ReadResponse(cl.br, nil); err == nil {
			t.Fatalf("client %d was served while 4 requests in flight held the cap of 4", i)
		}
	}
	close(release)
	for i, cl := range busy {
		_ = cl.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if resp, err := http.ReadResponse(cl.br, nil); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("busy client %d: %v", i, err)
		}
	}
	// The waiting clients' requests (already sent) are served now.
	for i, cl := range waiting {
		_ = cl.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(cl.br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("client %d after the requests ended: %v", i, err)
		}
		resp.Body.Close()
	}
}

// TestServerIdleConnectionsYieldToHealthz: keep-alive
// connections left idle at the cap do not lock the API: a new client's GET
// /healthz is answered within a second, the connection idle the longest is
// the one closed for it, and the others stay open.
func TestServerIdleConnectionsYieldToHealthz(t *testing.T) {
	addr := serve(t, "127.0.0.1:0", api.ServerConfig{MaxConnections: 4}, quiet())
	var idle []client
	for i := 0; i < 4; i++ {
		cl := dial(t, addr)
		if resp, err := request(cl.c, cl.br, 10*time.Second); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("idle client %d: %v", i, err)
		}
		idle = append(idle, cl)
		time.Sleep(20 * time.Millisecond) // distinct idle times: idle[0] is idle the longest
	}
	for round := 0; round < 3; round++ {
		if !healthzWithin(t, addr, time.Second) {
			t.Fatalf("round %d: GET /healthz not answered within 1 s while idle connections held the cap", round)
		}
	}
	if !closedWithin(idle[0].c, idle[0].br, 5*time.Second) {
		t.Error("the connection idle the longest was not closed for the new one")
	}
	if resp, err := request(idle[3].c, idle[3].br, 5*time.Second); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the connection idle the shortest was closed (%v): only as many as new ones need may be", err)
	}
}

// TestServerSilentConnectionsYieldAfterGrace: connections
// that never send a request hold the cap only for NewConnGrace: a GET
// /healthz is then answered within a second.
func TestServerSilentConnectionsYieldAfterGrace(t *testing.T) {
	grace := 200 * time.Millisecond
	addr := serve(t, "127.0.0.1:0", api.ServerConfig{MaxConnections: 4, NewConnGrace: grace}, quiet())
	for i := 0; i < 4; i++ {
		dial(t, addr)
	}
	if !healthzWithin(t, addr, time.Second) {
		t.Fatal("GET /healthz not answered within 1 s while silent connections held the cap")
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
		var logs testlog.Buffer
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
