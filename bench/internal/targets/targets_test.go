//go:build linux

package targets

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/probed/probed/bench/internal/lateness"
)

// A kept-alive HTTP probe makes several requests on one
// connection: each is answered and recorded as one call; a request that
// asks to close gets "Connection: close" and the connection ends. With
// TCPLiveness the liveness port only accepts (a TCP probe).
func TestKeptAliveRequestsAreEachACall(t *testing.T) {
	rec := lateness.New(2, time.Minute)
	rec.StartWindow(10)
	s, err := Listen(Config{HTTP: true, TCPLiveness: true, Pods: 1, OneAddr: "127.0.0.1", Rec: rec})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() { s.Stop(); <-done })
	r, l := s.Ports()

	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", r))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, closing := range []bool{false, false, true} {
		req := "GET /healthz HTTP/1.1\r\nHost: x\r\n"
		if closing {
			req += "Connection: close\r\n"
		}
		if _, err := c.Write([]byte(req + "\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "ok" {
			t.Fatalf("request %d: body %q", i, body)
		}
		if resp.StatusCode != 200 || resp.Close != closing {
			t.Fatalf("request %d: %d, close %v; want 200, close %v", i, resp.StatusCode, resp.Close, closing)
		}
	}
	if b, err := br.ReadByte(); err == nil {
		rest, _ := br.Peek(br.Buffered())
		t.Fatalf("the connection stayed open after a request that asked to close: read %q%q", b, rest)
	}
	tc, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", l))
	if err != nil {
		t.Fatal(err)
	}
	tc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.Counters().Accepted < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := s.Counters(); got.Accepted != 2 || got.Answered != 3 {
		t.Fatalf("counters %+v, want 2 accepted (one HTTP, one TCP) and 3 answered", got)
	}
	if n := rec.Calls(); n != 4 {
		t.Fatalf("%d calls recorded, want 4 (three requests on one connection, one TCP connection)", n)
	}
}
