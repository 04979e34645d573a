//go:build linux

// Package targets is the probe target server of the benchmark: one epoll
// loop serving every pod's TCP and HTTP probes on loopback, recording when
// each probe's connection arrives.
//
// Pod i has its own loopback address (Addr(i), 127.10.0.0 and up) so that
// the probers' ephemeral ports are spread over many 4-tuples (one address
// at 2,000 dials/s fills the port range with TIME-WAIT within seconds).
// Instead of one listening socket per pod (the fd limit is 20,000 here),
// two wildcard sockets bound to the loopback device (SO_BINDTODEVICE "lo",
// so nothing is reachable from outside) accept for every 127.x.y.z; the
// local address of an accepted connection names the pod and the port names
// the probe type (readiness, liveness). The server runs in its own process
// so that its CPU and memory are not counted against the prober.
package targets

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"

	"github.com/probed/probed/bench/internal/lateness"
)

// Addr returns the loopback address of pod i.
func Addr(i int) string {
	return fmt.Sprintf("127.%d.%d.%d", 10+(i>>16), (i>>8)&255, i&255)
}

// podOf is the inverse of Addr; -1 for other addresses.
func podOf(ip [4]byte) int {
	if ip[0] != 127 || ip[1] < 10 {
		return -1
	}
	return int(ip[1]-10)<<16 | int(ip[2])<<8 | int(ip[3])
}

// Config configures a Server.
type Config struct {
	HTTP bool // answer HTTP GETs; otherwise accept and wait for the prober's close (TCP)
	// TCPLiveness makes the liveness port accept and wait for the close
	// even with HTTP set: an HTTP readiness and a TCP liveness probe per
	// pod, as the real node's benchmark pods have.
	TCPLiveness bool
	Pods        int
	// HungEvery > 0 makes pod i hung when i%HungEvery == HungEvery-1:
	// its connections are accepted and never answered.
	HungEvery int
	// OneAddr, when set, binds both sockets to that address only (the
	// one-address case); calls are then counted but not attributed.
	OneAddr string
	// Backlog of the listening sockets; default 4096.
	Backlog int
	Rec     *lateness.Recorder
}

// Counters of a Server.
type Counters struct {
	Accepted   int64 `json:"accepted"`
	Hung       int64 `json:"hung_accepted"`
	Answered   int64 `json:"answered"`
	AcceptErrs int64 `json:"accept_errors"`
}

// Server is the epoll target server.
type Server struct {
	cfg    Config
	lfd    [2]int
	port   [2]int
	epfd   int
	stop   atomic.Bool
	state  []uint8
	buf    [][]byte
	worker []int32 // the recorder's worker of each connection (-1: none)
	served []bool  // the connection has answered a request (keep-alive)

	accepted, hung, answered, acceptErrs atomic.Int64
}

const (
	stNone uint8 = iota
	stWaitClose
	stReadReq
	stHung
)

var response = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

// keepAliveResponse answers a request that did not ask to close: the
// connection stays open for the prober's next request (an HTTP probe with
// a kept connection), each request recorded as one probe call.
var keepAliveResponse = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")

// Listen opens the two listening sockets and the epoll instance.
func Listen(cfg Config) (*Server, error) {
	if cfg.Backlog <= 0 {
		cfg.Backlog = 4096
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, state: make([]uint8, lim.Cur+1), buf: make([][]byte, lim.Cur+1),
		worker: make([]int32, lim.Cur+1), served: make([]bool, lim.Cur+1)}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	s.epfd = epfd
	for i := range s.lfd {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
		sa := &syscall.SockaddrInet4{}
		if cfg.OneAddr != "" {
			var a, b, c, d int
			if _, err := fmt.Sscanf(cfg.OneAddr, "%d.%d.%d.%d", &a, &b, &c, &d); err != nil || a != 127 {
				return nil, fmt.Errorf("targets: OneAddr %q is not a 127.x.y.z address", cfg.OneAddr)
			}
			sa.Addr = [4]byte{byte(a), byte(b), byte(c), byte(d)}
		} else if err := syscall.SetsockoptString(fd, syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, "lo"); err != nil {
			return nil, fmt.Errorf("targets: SO_BINDTODEVICE lo: %w", err)
		}
		if err := syscall.Bind(fd, sa); err != nil {
			return nil, err
		}
		if err := syscall.Listen(fd, cfg.Backlog); err != nil {
			return nil, err
		}
		got, err := syscall.Getsockname(fd)
		if err != nil {
			return nil, err
		}
		s.lfd[i] = fd
		s.port[i] = got.(*syscall.SockaddrInet4).Port
		if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Ports returns the readiness and liveness ports.
func (s *Server) Ports() (readiness, liveness int) { return s.port[0], s.port[1] }

// Counters returns the server's counters.
func (s *Server) Counters() Counters {
	return Counters{Accepted: s.accepted.Load(), Hung: s.hung.Load(), Answered: s.answered.Load(), AcceptErrs: s.acceptErrs.Load()}
}

// Stop makes Serve return within 100 ms.
func (s *Server) Stop() { s.stop.Store(true) }

// Serve runs the epoll loop on a locked OS thread until Stop.
func (s *Server) Serve() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	events := make([]syscall.EpollEvent, 512)
	for !s.stop.Load() {
		n, err := syscall.EpollWait(s.epfd, events, 100)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return err
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			switch fd {
			case s.lfd[0]:
				s.accept(fd, 0)
			case s.lfd[1]:
				s.accept(fd, 1)
			default:
				s.serveConn(fd)
			}
		}
	}
	return nil
}

func (s *Server) accept(lfd, typ int) {
	for {
		nfd, _, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR) {
				s.acceptErrs.Add(1)
				if !errors.Is(err, syscall.ECONNABORTED) {
					return
				}
				continue
			}
			return
		}
		s.accepted.Add(1)
		worker := -1
		pod := -1
		if s.cfg.OneAddr == "" {
			if sa, err := syscall.Getsockname(nfd); err == nil {
				if in4, ok := sa.(*syscall.SockaddrInet4); ok {
					pod = podOf(in4.Addr)
				}
			}
			if pod >= 0 && pod < s.cfg.Pods {
				worker = pod*2 + typ
			}
		}
		if pod >= 0 && s.cfg.HungEvery > 0 && pod%s.cfg.HungEvery == s.cfg.HungEvery-1 {
			s.hung.Add(1)
			s.register(nfd, stHung)
			continue
		}
		s.cfg.Rec.Start(worker)
		if nfd < len(s.worker) {
			s.worker[nfd], s.served[nfd] = int32(worker), false
		}
		if s.cfg.HTTP && !(typ == 1 && s.cfg.TCPLiveness) {
			s.register(nfd, stReadReq)
			s.serveConn(nfd) // the request is usually there already
		} else {
			s.register(nfd, stWaitClose)
			s.serveConn(nfd)
		}
	}
}

func (s *Server) register(fd int, st uint8) {
	if fd >= len(s.state) {
		syscall.Close(fd)
		return
	}
	s.state[fd] = st
	if err := syscall.EpollCtl(s.epfd, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd)}); err != nil {
		s.close(fd)
	}
}

func (s *Server) close(fd int) {
	s.state[fd] = stNone
	if s.buf[fd] != nil {
		s.buf[fd] = s.buf[fd][:0]
	}
	syscall.Close(fd)
}

// read reads what fd has into buf. ok is false when there is nothing more
// to read for now (EAGAIN) or the connection ended, which closes it.
func (s *Server) read(fd int, buf []byte) (n int, ok bool) {
	n, err := syscall.Read(fd, buf)
	if err != nil {
		if !errors.Is(err, syscall.EAGAIN) {
			s.close(fd)
		}
		return 0, false
	}
	if n == 0 {
		s.close(fd)
		return 0, false
	}
	return n, true
}

func (s *Server) serveConn(fd int) {
	if fd >= len(s.state) || s.state[fd] == stNone {
		return
	}
	var scratch [2048]byte
	switch s.state[fd] {
	case stWaitClose, stHung:
		// Drain what the client sends until it closes.
		for {
			if _, ok := s.read(fd, scratch[:]); !ok {
				return
			}
		}
	case stReadReq:
		for {
			n, ok := s.read(fd, scratch[:])
			if !ok {
				return
			}
			if s.buf[fd] == nil {
				s.buf[fd] = make([]byte, 0, 1024)
			}
			b := append(s.buf[fd], scratch[:n]...)
			if len(b) > 16<<10 {
				s.close(fd)
				return
			}
			s.buf[fd] = b
			for {
				end := bytes.Index(b, []byte("\r\n\r\n"))
				if end < 0 {
					break
				}
				if s.served[fd] {
					// A later request on a kept connection: one more
					// probe call (the first was recorded at accept).
					s.cfg.Rec.Start(int(s.worker[fd]))
				}
				s.answered.Add(1)
				if asksClose(b[:end]) {
					_, _ = syscall.Write(fd, response)
					s.close(fd)
					return
				}
				_, _ = syscall.Write(fd, keepAliveResponse)
				s.served[fd] = true
				b = append(b[:0], b[end+4:]...)
				s.buf[fd] = b
			}
		}
	}
}

// asksClose reports whether the request head asks to close the connection
// after the answer ("Connection: close", which an HTTP/1.1 client without
// keep-alive sends).
func asksClose(head []byte) bool {
	return bytes.Contains(bytes.ToLower(head), []byte("\r\nconnection: close"))
}
