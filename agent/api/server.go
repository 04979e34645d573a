package api

import (
	"log/slog"
	"net"
	"net/http"
	"time"
)

// The API server's limits (20,000 idle keep-alive connections to
// an unbounded API took every descriptor of the agent, and its probes then
// failed). docs/operations.md ("Security") lists them.
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request (the API takes
	// GETs only, so this is the headers plus an empty body).
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds writing a response, from the end of the
	// request's headers.
	DefaultWriteTimeout = 60 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection idle this long.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxHeaderBytes caps a request's header bytes (Go's default is
	// 1 MiB); a larger request gets 431 Request Header Fields Too Large.
	DefaultMaxHeaderBytes = 32 << 10
	// DefaultMaxConnections caps the connections served at once; see
	// ServerConfig.MaxConnections.
	DefaultMaxConnections = 256
	// DefaultNewConnGrace is how long a new connection may stay silent (no
	// complete request) before the listener may close it for another one
	// at the cap; see Listener. Below the 1 s timeout of a kubelet probe,
	// so /healthz is answered within it.
	DefaultNewConnGrace = 500 * time.Millisecond
)

// ServerConfig are the API server's limits. Zero fields take the defaults
// above.
type ServerConfig struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
	// MaxConnections caps the connections the API holds open at once
	// (Listener): at the cap, a new connection replaces an idle or silent
	// one, or waits until a served one closes; connections beyond it wait
	// in the kernel's accept queue, costing probed no descriptor. Zero:
	// DefaultMaxConnections, but never more than a quarter of the
	// process's RLIMIT_NOFILE, so the API can never take the descriptors
	// the probes need.
	MaxConnections int
	// NewConnGrace is how long a connection may stay without a complete
	// request before it may be closed for a new one at the cap; zero:
	// DefaultNewConnGrace.
	NewConnGrace time.Duration
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = MaxConnectionsFor(openFileLimit())
	}
	if c.NewConnGrace <= 0 {
		c.NewConnGrace = DefaultNewConnGrace
	}
	return c
}

// MaxConnectionsFor is the default connection cap for a process whose
// RLIMIT_NOFILE (soft) is limit: DefaultMaxConnections, or a quarter of
// limit when that is less (at least 4). limit 0 means unknown:
// DefaultMaxConnections.
func MaxConnectionsFor(limit uint64) int {
	if limit == 0 || limit/4 >= DefaultMaxConnections {
		return DefaultMaxConnections
	}
	return int(max(limit/4, 4))
}

// NewServer returns the API server for h with cfg's timeouts and header
// cap. Serve it with Listener.Serve on a listener from Listen, which holds
// the connection cap.
func NewServer(h http.Handler, cfg ServerConfig) *http.Server {
	cfg = cfg.withDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
	}
}

// Listen opens the API's TCP listener on addr ("host:port"), holding at
// most cfg.MaxConnections connections at once (Listener). The API has no
// authentication: when the address it bound is not a loopback address
// (":8089", "0.0.0.0:8089", a node IP), Listen logs a warning saying so;
// docs/operations.md says how to put the API behind an authenticating
// proxy. Errors are net.Listen's.
func Listen(addr string, cfg ServerConfig, log *slog.Logger) (*Listener, error) {
	cfg = cfg.withDefaults()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && log != nil {
		log.Warn("the API has no authentication and listens beyond loopback: anyone who can reach it reads pods, events, probe history and metrics; listen on 127.0.0.1 behind an authenticating proxy (docs/operations.md, Security)",
			"listen", ln.Addr().String())
	}
	return newListener(ln, cfg.MaxConnections, cfg.NewConnGrace), nil
}
