package kubetest

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// ErrOutage is the error every request fails with while a Requests is down:
// a refused dial (ECONNREFUSED), as a client sees an API server that is not
// there; client-go's reflector retries its watch on it rather than relisting
// (utilnet.IsConnectionRefused).
var ErrOutage error = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

// Request is one request made through a config a Requests wrapped.
type Request struct {
	// At is when the request was sent (or refused).
	At time.Time
	// Method, Path and Query are the HTTP method, URL path
	// (/api/v1/namespaces/NS/pods/NAME/status) and raw query.
	Method, Path, Query string
	// Code is the HTTP status code of the answer; 0 when there was none
	// (refused, transport error).
	Code int
	// Err is the transport error, ErrOutage while down.
	Err error
}

// Requests records every request made through the rest.Configs it wraps and
// can take the API server away from them (SetDown): the one place tests
// count a component's requests or stage an outage it alone sees, while the
// test's own client (another Config) keeps working. The zero value is ready.
type Requests struct {
	mu       sync.Mutex
	reqs     []Request
	down     bool
	inflight map[*flight]struct{}
}

// flight is one request in flight: SetDown cuts it.
type flight struct {
	cancel context.CancelFunc
	cut    atomic.Bool
}

// Wrap returns a copy of cfg whose requests go through r (after any
// WrapTransport cfg already has).
func (r *Requests) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	inner := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if inner != nil {
			rt = inner(rt)
		}
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) { return r.roundTrip(rt, req) })
	}
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (r *Requests) roundTrip(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	rec := Request{At: time.Now(), Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery}
	r.mu.Lock()
	if r.down {
		rec.Err = ErrOutage
		r.reqs = append(r.reqs, rec)
		r.mu.Unlock()
		return nil, ErrOutage
	}
	ctx, cancel := context.WithCancel(req.Context())
	f := &flight{cancel: cancel}
	if r.inflight == nil {
		r.inflight = map[*flight]struct{}{}
	}
	r.inflight[f] = struct{}{}
	r.mu.Unlock()
	done := func() {
		cancel()
		r.mu.Lock()
		delete(r.inflight, f)
		r.mu.Unlock()
	}

	resp, err := rt.RoundTrip(req.WithContext(ctx))
	if err != nil && f.cut.Load() {
		err = ErrOutage
	}
	rec.Err = err
	if resp != nil {
		rec.Code = resp.StatusCode
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, rec)
	r.mu.Unlock()
	if err != nil || resp == nil {
		done()
		return resp, err
	}
	resp.Body = &flightBody{ReadCloser: resp.Body, flight: f, done: done}
	return resp, nil
}

// flightBody ends the request's context once its body is closed; a body cut
// by SetDown ends with io.ErrUnexpectedEOF, as a dropped connection does (a
// watch then ends quietly and the reflector resumes it from its last
// resourceVersion).
type flightBody struct {
	io.ReadCloser
	flight *flight
	once   sync.Once
	done   func()
}

func (b *flightBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.flight.cut.Load() {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *flightBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// SetDown takes the API server away (down true): every request in flight
// (watches included) is cut as by a dropped connection and every new one
// fails with ErrOutage, recorded with Code 0. SetDown(false) lets requests through again.
func (r *Requests) SetDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
	if down {
		for f := range r.inflight {
			f.cut.Store(true)
			f.cancel()
		}
	}
}

// All returns the recorded requests, oldest first.
func (r *Requests) All() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.reqs...)
}

// Count is the number of recorded requests whose "METHOD path" contains
// every one of parts ("POST", "/evictions").
func (r *Requests) Count(parts ...string) int {
	n := 0
next:
	for _, req := range r.All() {
		s := req.Method + " " + req.Path
		for _, p := range parts {
			if !strings.Contains(s, p) {
				continue next
			}
		}
		n++
	}
	return n
}
