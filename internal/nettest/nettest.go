// Package nettest has the loopback network fixtures tests share.
package nettest

import (
	"net"
	"testing"
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
