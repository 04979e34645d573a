// Package standin serves stand-ins, for the egress tests, of
// what a cluster-mode probe must not reach — the node's loopback
// services, the cloud metadata address — and of targets that send what
// must not reach an Event (an SSH banner). A stand-in records every
// connection it accepts and the request heads it reads, and proves that
// none came (NoConnection) without waiting on a timer: it connects to
// itself and checks that its own connection is the first one accepted
// since the last check, since a refused dial sends no SYN and any earlier
// connection would be accepted before it. It is meant for _test.go files.
package standin

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probed/probed/runtime/egress"
)

// PodContext returns a context with an attempt's deadline d that carries
// the egress policy of a pod whose IP is podIP, with the allowed ranges
// allow (CIDRs): what a probe's context carries in cluster mode. It ends
// with the test.
func PodContext(t testing.TB, d time.Duration, podIP string, allow ...string) context.Context {
	t.Helper()
	var ps []netip.Prefix
	for _, a := range allow {
		ps = append(ps, netip.MustParsePrefix(a))
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return egress.WithPolicy(ctx, egress.NewPolicy([]netip.Addr{netip.MustParseAddr(podIP)}, ps))
}

// Server is one stand-in listener.
type Server struct {
	ln       net.Listener
	reply    func(*Server, net.Conn, *bufio.Reader)
	mu       sync.Mutex
	cond     *sync.Cond
	accepted []string // remote addresses, in accept order
	requests []string // request heads read (HTTP stand-ins)
	mark     int      // accepted[:mark] were checked by NoConnection
	barriers map[string]bool
}

// HTTP listens on addr ("127.0.0.2:0" picks a port; the test is skipped
// when the address cannot be bound) and answers every request with 200 and
// body, until the test ends.
func HTTP(t testing.TB, addr, body string) *Server {
	t.Helper()
	resp := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	return listen(t, addr, func(s *Server, c net.Conn, r *bufio.Reader) {
		var head strings.Builder
		for {
			line, err := r.ReadString('\n')
			head.WriteString(line)
			if err != nil {
				return // not a request (a NoConnection check): no answer
			}
			if line == "\r\n" || line == "\n" {
				break
			}
		}
		s.mu.Lock()
		s.requests = append(s.requests, head.String())
		s.mu.Unlock()
		_, _ = io.WriteString(c, resp)
	})
}

// Banner listens on addr like HTTP and answers every connection with
// banner (a non-HTTP service, such as sshd's "SSH-2.0-OpenSSH_9.2p1\r\n"),
// then closes it. It writes once the client has sent its first bytes (or
// closed its side), so an HTTP client always reads the banner as the answer
// to its request: sent before the request, Go's transport may drop it as
// "unsolicited" and report no answer at all.
func Banner(t testing.TB, addr, banner string) *Server {
	t.Helper()
	return listen(t, addr, func(_ *Server, c net.Conn, r *bufio.Reader) {
		if _, err := r.Peek(1); err != nil && err != io.EOF {
			return
		}
		_, _ = io.WriteString(c, banner)
	})
}

func listen(t testing.TB, addr string, reply func(*Server, net.Conn, *bufio.Reader)) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	s := &Server{ln: ln, reply: reply, barriers: map[string]bool{}}
	s.cond = sync.NewCond(&s.mu)
	done := make(chan struct{})
	go s.serve(done)
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return s
}

// serve accepts until the listener closes, one connection at a time.
func (s *Server) serve(done chan<- struct{}) {
	defer close(done)
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.accepted = append(s.accepted, c.RemoteAddr().String())
		s.cond.Broadcast()
		s.mu.Unlock()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if s.reply != nil {
			s.reply(s, c, bufio.NewReader(c))
		}
		_ = c.Close()
	}
}

// Port is the port the stand-in listens on.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Addr is the stand-in's address, IP:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Connections returns how many connections the stand-in has accepted,
// NoConnection's own not counted.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.accepted) - len(s.barriers)
}

// Requests returns the request heads an HTTP stand-in has read (request
// line and headers).
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// NoConnection fails t unless no connection has reached the stand-in since
// it started or since the last NoConnection: it connects to the stand-in
// itself and checks that its connection is the first one accepted since.
func (s *Server) NoConnection(t testing.TB) {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.Addr(), 5*time.Second)
	if err != nil {
		t.Fatalf("stand-in %s: own connection: %v", s.Addr(), err)
	}
	own := c.LocalAddr().String()
	_ = c.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.barriers[own] = true
	stop := time.AfterFunc(10*time.Second, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(s.accepted[s.mark:], own) {
		if time.Now().After(deadline) {
			t.Fatalf("stand-in %s did not accept its own connection", s.Addr())
		}
		s.cond.Wait()
	}
	i := s.mark + slices.Index(s.accepted[s.mark:], own)
	before := s.accepted[s.mark:i]
	s.mark = i + 1
	if len(before) > 0 {
		t.Fatalf("stand-in %s was reached by %d connection(s) from %v", s.Addr(), len(before), before)
	}
}
