package api

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Listener is the API's TCP listener with its connection cap
// (ServerConfig.MaxConnections). Unlike netutil.LimitListener, a cap held
// by connections that do nothing does not lock the API: when a new
// connection arrives at the cap, the listener closes the keep-alive
// connection idle the longest (http.StateIdle: HTTP lets a server close an
// idle connection at any time, and clients retry on a new one), else the
// oldest connection that has sent no complete request for
// ServerConfig.NewConnGrace. Only when every served connection has a
// request in flight, or connected less than the grace ago, does the new one
// wait (accepted, holding one descriptor; further ones wait in the kernel's
// accept queue) until a served one closes. So the kubelet's probe of
// /healthz is answered however many idle clients hold the API;
// a client can still hold the cap with requests in flight, each
// bounded by the server's read and write timeouts.
//
// The listener learns each connection's state from the server's ConnState
// hook: serve with Serve, which installs it. Connections of a server
// without the hook are never closed by the listener (the cap then works as
// netutil.LimitListener's).
type Listener struct {
	net.Listener
	max   int
	grace time.Duration

	mu      sync.Mutex
	conns   map[*limitedConn]struct{}
	changed chan struct{} // closed and replaced when a slot frees or a state changes
	closed  chan struct{}
	once    sync.Once
}

// limitedConn is a connection the cap counts until it is closed.
type limitedConn struct {
	net.Conn
	l *Listener
	// state is the server's last report (ConnState); tracked is false
	// until the first report. since is when the state began. Both are
	// guarded by l.mu.
	state   http.ConnState
	tracked bool
	since   time.Time
	once    sync.Once
}

func newListener(inner net.Listener, max int, grace time.Duration) *Listener {
	return &Listener{Listener: inner, max: max, grace: grace, conns: map[*limitedConn]struct{}{},
		changed: make(chan struct{}), closed: make(chan struct{})}
}

// Serve serves srv on the listener, with the listener's ConnState hook
// installed before any hook srv already has; it returns srv.Serve's error.
func (l *Listener) Serve(srv *http.Server) error {
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		l.connState(c, s)
		if next != nil {
			next(c, s)
		}
	}
	return srv.Serve(l)
}

// Accept accepts the next connection and returns it once it has a slot of
// the cap, closing an idle or silent connection for it when the cap is full
// (the type doc).
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &limitedConn{Conn: c, l: l, since: time.Now()}
	for {
		l.mu.Lock()
		if len(l.conns) < l.max {
			l.conns[lc] = struct{}{}
			l.mu.Unlock()
			return lc, nil
		}
		victim, wait := l.reclaimableLocked(time.Now())
		changed := l.changed
		l.mu.Unlock()
		if victim != nil {
			victim.Close() // frees its slot at once
			continue
		}
		if !l.waitChange(changed, wait) {
			c.Close()
			return nil, net.ErrClosed
		}
	}
}

// waitChange waits until changed is closed or, when wait > 0, wait has
// passed; false when the listener was closed meanwhile.
func (l *Listener) waitChange(changed <-chan struct{}, wait time.Duration) bool {
	var expired <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-changed:
	case <-expired:
	case <-l.closed:
		return false
	}
	return true
}

// reclaimableLocked picks the connection to close for a new one: the one
// idle the longest, else the oldest one silent for the grace. When there
// is none, wait is how long until the oldest silent one reaches the grace
// (0: none is silent; wait for a change).
func (l *Listener) reclaimableLocked(now time.Time) (victim *limitedConn, wait time.Duration) {
	var idle, silent *limitedConn
	for c := range l.conns {
		if !c.tracked {
			continue
		}
		switch c.state {
		case http.StateIdle:
			if idle == nil || c.since.Before(idle.since) {
				idle = c
			}
		case http.StateNew:
			if silent == nil || c.since.Before(silent.since) {
				silent = c
			}
		}
	}
	if idle != nil {
		return idle, 0
	}
	if silent != nil {
		if left := l.grace - now.Sub(silent.since); left > 0 {
			return nil, left
		}
		return silent, 0
	}
	return nil, 0
}

// connState records the server's report of a connection's state.
func (l *Listener) connState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	if s == http.StateClosed {
		l.release(lc)
		return
	}
	l.mu.Lock()
	lc.state, lc.tracked, lc.since = s, true, time.Now()
	l.broadcastLocked()
	l.mu.Unlock()
}

// release frees lc's slot (once: Close and the StateClosed report both
// call it).
func (l *Listener) release(lc *limitedConn) {
	l.mu.Lock()
	if _, ok := l.conns[lc]; ok {
		delete(l.conns, lc)
		l.broadcastLocked()
	}
	l.mu.Unlock()
}

func (l *Listener) broadcastLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Close closes the listener; an Accept waiting for a slot returns.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// Close closes the connection and frees its slot.
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}
