//go:build linux

package faults

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probed/probed/runtime"
)

// ---------------------------------------------------------------------------
// A raw HTTP server that misbehaves on purpose.

// conn is one connection accepted by a faultServer.
type conn struct {
	net.Conn
	br  *bufio.Reader
	srv *faultServer
	rec *connRec
}

// connRec is what the server saw of one connection.
type connRec struct {
	accepted time.Time
	// clientGone is when the server noticed the prober had closed (a read
	// or write failed); zero if it never did before the server closed.
	clientGone time.Time
	requests   int
}

// faultServer is a TCP server on 127.0.0.1 that hands every connection to
// behave. It records when each connection came and when the client went.
type faultServer struct {
	ln     net.Listener
	port   int
	behave func(c *conn)

	mu      sync.Mutex
	recs    []*connRec
	open    map[*conn]struct{}
	closing bool
	wg      sync.WaitGroup
}

func newFaultServer(t *testing.T, behave func(c *conn)) *faultServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &faultServer{ln: ln, port: ln.Addr().(*net.TCPAddr).Port, behave: behave, open: map[*conn]struct{}{}}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.close)
	return s
}

func (s *faultServer) serve() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		c := &conn{Conn: nc, br: bufio.NewReader(nc), srv: s, rec: &connRec{accepted: time.Now()}}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.recs = append(s.recs, c.rec)
		s.open[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.open, c)
				s.mu.Unlock()
				c.Close()
			}()
			s.behave(c)
		}()
	}
}

// close stops the server, closes every connection it holds and waits for
// its goroutines.
func (s *faultServer) close() {
	s.mu.Lock()
	s.closing = true
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}

// records returns a copy of the connection records.
func (s *faultServer) records() []connRec {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]connRec, len(s.recs))
	for i, r := range s.recs {
		out[i] = *r
	}
	return out
}

// readRequest reads one request's head (a GET has no body).
func (c *conn) readRequest() bool {
	req, err := http.ReadRequest(c.br)
	if err != nil {
		c.gone()
		return false
	}
	c.srv.mu.Lock()
	c.rec.requests++
	c.srv.mu.Unlock()
	_ = req.Body.Close()
	return true
}

// gone records that the client has gone, unless the server is closing.
func (c *conn) gone() {
	c.srv.mu.Lock()
	defer c.srv.mu.Unlock()
	if !c.srv.closing && c.rec.clientGone.IsZero() {
		c.rec.clientGone = time.Now()
	}
}

// waitClientGone reads (and drops) until the client closes or resets.
func (c *conn) waitClientGone() {
	_, _ = io.Copy(io.Discard, c.br)
	c.gone()
}

// writeForever writes chunk every interval (back to back when 0) until the
// client has gone: a read sees its close or reset at once, a write fails.
func (c *conn) writeForever(chunk []byte, interval time.Duration) {
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		c.waitClientGone()
	}()
	defer func() { <-readerDone }() // a failed write means the reader fails too
	for {
		if _, err := c.Write(chunk); err != nil {
			c.gone()
			return
		}
		if interval > 0 {
			select {
			case <-readerDone:
				return
			case <-time.After(interval):
			}
		}
	}
}

// awaitGone waits up to d until the server has seen every client go.
func (s *faultServer) awaitGone(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		all := true
		for _, r := range s.records() {
			all = all && !r.clientGone.IsZero()
		}
		if all {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// reset closes the connection with an RST (SO_LINGER {on, 0}).
func (c *conn) reset() {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

const okHead = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"

// ---------------------------------------------------------------------------

// TestHTTPFaults runs httpGet probes (timeoutSeconds 1) against servers that
// misbehave, through the runtime's network lane. The verdicts are the
// kubelet's (H4–H6, BR-08, BR-09):
//
//   - a server that accepts and never answers, and one that sends 1xx
//     informational responses forever, are a Failure at the 1 s client
//     timeout ("awaiting headers"), not retried;
//   - a server that sends the headers and never the body, or trickles the
//     body slower than 10 KiB per timeout, is errored (the client timeout
//     fires while reading the body, BR-08 c): 3 attempts of 1 s each;
//   - an endless body, or 64 KiB and then a stall, is a Success at once:
//     the prober reads 10 KiB and hangs up (BR-08 a, b);
//   - a reset before the response is a Failure at once (a transport
//     error); a body cut off by a reset or a close is errored at once
//     (BR-09 a): 3 fast attempts;
//   - a flood of 1xx responses is a Failure no later than the timeout;
//   - a same-host redirect loop is a Failure after exactly 10 requests
//     (H5).
//
// Every attempt holds one slot of the network lane and no socket of the
// prober's side stays open after the run.
func TestHTTPFaults(t *testing.T) {
	noLeaks(t)
	r := newRig(t)

	body := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	early := []byte("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
	flood := bytes.Repeat(early, 1024)

	type expect struct {
		result  runtime.Result
		errored bool
		// timedOut: every attempt runs into the timeout; otherwise the
		// run ends well before it.
		timedOut bool
		// output or err contains this.
		text string
		// requests is the number of requests the server must see
		// (0: one per attempt).
		requests int
		// anyOf, when set, replaces text: the flood ends either way.
		anyOf []string
	}
	cases := []struct {
		name   string
		behave func(c *conn)
		want   expect
	}{
		{"accepts-never-answers", func(c *conn) {
			c.readRequest()
			c.waitClientGone()
		}, expect{result: runtime.Failure, timedOut: true, text: "Client.Timeout exceeded while awaiting headers"}},

		{"headers-never-body", func(c *conn) {
			if c.readRequest() {
				fmt.Fprintf(c, okHead+"Content-Length: 1000\r\n\r\n")
				c.waitClientGone()
			}
		}, expect{result: runtime.Failure, errored: true, timedOut: true, text: "Client.Timeout or context cancellation while reading body"}},

		{"body-trickles", func(c *conn) {
			if c.readRequest() {
				fmt.Fprintf(c, okHead+"\r\n")
				c.writeForever(body[:100], 100*time.Millisecond) // 1 KiB/s
			}
		}, expect{result: runtime.Failure, errored: true, timedOut: true, text: "Client.Timeout or context cancellation while reading body"}},

		{"endless-body", func(c *conn) {
			if c.readRequest() {
				fmt.Fprintf(c, okHead+"\r\n")
				c.writeForever(body, 0)
			}
		}, expect{result: runtime.Success}},

		{"64KiB-then-stall", func(c *conn) {
			if c.readRequest() {
				fmt.Fprintf(c, okHead+"\r\n")
				_, _ = c.Write(body)
				c.waitClientGone()
			}
		}, expect{result: runtime.Success}},

		{"reset-before-response", func(c *conn) {
			if c.readRequest() {
				c.reset()
			}
		}, expect{result: runtime.Failure, text: "connection reset by peer"}},

		{"reset-mid-body", func(c *conn) {
			if c.readRequest() {
				fmt.Fprintf(c, okHead+"Content-Length: 1000\r\n\r\n0123456789")
				// Let the client read the head before the RST arrives.
				time.Sleep(100 * time.Millisecond)
				c.reset()
			}
		}, expect{result: runtime.Failure, errored: true, text: "connection reset by peer"}},

		{"body-cut-off", func(c *conn) {
			if c.readRequest() {
				fmt.Fprintf(c, okHead+"Content-Length: 1000\r\n\r\n0123456789")
			}
		}, expect{result: runtime.Failure, errored: true, text: "unexpected EOF"}},

		{"1xx-forever", func(c *conn) {
			if c.readRequest() {
				c.writeForever(early, 50*time.Millisecond)
			}
		}, expect{result: runtime.Failure, timedOut: true, text: "Client.Timeout exceeded while awaiting headers"}},

		{"1xx-flood", func(c *conn) {
			if c.readRequest() {
				c.writeForever(flood, 0)
			}
		}, expect{result: runtime.Failure, anyOf: []string{"server response headers exceeded", "Client.Timeout exceeded while awaiting headers"}}},

		{"redirect-loop", func(c *conn) {
			if c.readRequest() {
				fmt.Fprintf(c, "HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}
		}, expect{result: runtime.Failure, text: "stopped after 10 redirects", requests: 10}},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			withTries(t, func(t *testing.T) (timing []*miss) {
				srv := newFaultServer(t, tc.behave)
				o := r.run(t, httpProbe("/loop", srv.port), nil)
				t.Logf("%v", o)
				expectVerdict(t, o, tc.want.result, tc.want.errored)
				expectOneSlot(t, o)

				msg := o.rep.Outcome.Output
				if o.rep.Err != nil {
					msg = o.rep.Err.Error()
				}
				switch {
				case tc.want.anyOf != nil:
					found := false
					for _, s := range tc.want.anyOf {
						found = found || strings.Contains(msg, s)
					}
					if !found {
						t.Errorf("message %q, want one of %q", msg, tc.want.anyOf)
					}
				case tc.want.text != "" && !strings.Contains(msg, tc.want.text):
					t.Errorf("message %q, want %q in it", msg, tc.want.text)
				}
				if tc.want.result == runtime.Success && len(o.rep.Outcome.Output) != runtime.MaxOutputBytes {
					t.Errorf("output of %d bytes, want the first %d of the body", len(o.rep.Outcome.Output), runtime.MaxOutputBytes)
				}

				switch {
				case tc.want.timedOut:
					timing = append(timing, timedOutProblem(o))
				case tc.want.anyOf != nil:
					timing = append(timing, missed(o.wall-timeout-slack, "runtime.Run took %v, want at most the %v timeout + %v", o.wall.Round(time.Millisecond), timeout, slack))
				default:
					timing = append(timing, fastProblem(o, 500*time.Millisecond))
				}

				// What the target saw: one connection per request, each
				// closed by the prober; for timed-out attempts, at the
				// timeout.
				timeWaits, late := expectNoProberSockets(t, srv.port, nil)
				timing = append(timing, late)
				if tc.want.timedOut {
					srv.awaitGone(time.Second)
				}
				srv.close()
				recs := srv.records()
				requests := 0
				for i, rec := range recs {
					requests += rec.requests
					if !tc.want.timedOut {
						continue
					}
					if rec.clientGone.IsZero() {
						t.Errorf("connection %d: the prober never closed it", i+1)
						continue
					}
					d := rec.clientGone.Sub(rec.accepted)
					off := d - timeout
					if off < 0 {
						off = -off
					}
					timing = append(timing, missed(off-slack, "connection %d: the prober hung up after %v, want %v ± %v", i+1, d.Round(time.Millisecond), timeout, slack))
				}
				want := tc.want.requests
				if want == 0 {
					want = o.rep.Attempts
				}
				if requests != want || len(recs) != want {
					t.Errorf("the server saw %d requests on %d connections, want %d on %d", requests, len(recs), want, want)
				}
				if timeWaits > 0 {
					t.Logf("%d prober-side sockets in TIME_WAIT", timeWaits)
				}
				return timing
			})
		})
	}
}
