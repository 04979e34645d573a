// Package nettest has the loopback network fixtures tests share.
package nettest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ClosedPort returns a port of 127.0.0.1 that nothing listens on (it was
// free a moment ago): probes of it fail with "connection refused", and Go's
// error quotes the URL.
func ClosedPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// Certificate returns a self-signed ECDSA server certificate for dnsName
// that expires at notAfter (valid from a year before, or an hour before
// now when that is earlier): no verifying client accepts it for 127.0.0.1,
// and probes, which never verify (H3), see its expiry.
func Certificate(t testing.TB, dnsName string, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	notBefore := notAfter.Add(-365 * 24 * time.Hour)
	if hourAgo := time.Now().Add(-time.Hour); hourAgo.Before(notBefore) {
		notBefore = hourAgo
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: dnsName},
		DNSNames:     []string{dnsName},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// ConnCount counts the connections an HTTP server accepted and those still
// open (Track): what a test of kept-alive probes reads from the target's
// side.
type ConnCount struct {
	Accepted, Open atomic.Int64
}

// Track installs c's counting as srv's ConnState hook (before the server
// starts).
func (c *ConnCount) Track(srv *http.Server) {
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			c.Accepted.Add(1)
			c.Open.Add(1)
		case http.StateClosed, http.StateHijacked:
			c.Open.Add(-1)
		}
	}
}

// Target is a real HTTP server on loopback whose paths answer with a
// status code the test sets (default 200) and count their requests: the
// target of the tests' HTTP probes.
type Target struct {
	// Port is the port it listens on, at 127.0.0.1.
	Port  int
	mu    sync.Mutex
	codes map[string]int
	hits  map[string]int
}

// NewTarget starts a Target, closed when the test ends.
func NewTarget(t testing.TB) *Target {
	t.Helper()
	tg := &Target{codes: map[string]int{}, hits: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.mu.Lock()
		code, ok := tg.codes[r.URL.Path]
		tg.hits[r.URL.Path]++
		tg.mu.Unlock()
		if !ok {
			code = http.StatusOK
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	tg.Port = srv.Listener.Addr().(*net.TCPAddr).Port
	return tg
}

// Set makes path answer code from now on.
func (tg *Target) Set(path string, code int) {
	tg.mu.Lock()
	tg.codes[path] = code
	tg.mu.Unlock()
}

// Hits returns how many requests path has had.
func (tg *Target) Hits(path string) int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.hits[path]
}

// AcceptAndClose starts a loopback listener that accepts each connection
// and closes it at once (a TCP probe's success), stopped when the test
// ends; it returns its port.
func AcceptAndClose(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().(*net.TCPAddr).Port
}
