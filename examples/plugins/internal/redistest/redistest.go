// Package redistest starts real redis-server processes for the example
// plugins' tests, on a free loopback port with a temporary directory.
package redistest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Server is a running redis-server.
type Server struct {
	// Port is the loopback port it listens on (TLS when started with TLS).
	Port int
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

// Binary returns the path of redis-server, or skips the test with a clear
// message when it is not installed.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not found on PATH: install it to run this test (Debian: apt-get install -y redis-server)")
	}
	return path
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Options configure Start.
type Options struct {
	// Port to listen on; 0: a free one.
	Port int
	// Password sets requirepass.
	Password string
	// TLS serves TLS only, with a self-signed certificate for 127.0.0.1.
	TLS bool
}

// Start starts redis-server on 127.0.0.1, waits until it accepts
// connections and stops it at the end of the test.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := Binary(t)
	if o.Port == 0 {
		o.Port = FreePort(t)
	}
	dir := t.TempDir()
	args := []string{"--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "no", "--logfile", ""}
	if o.Password != "" {
		args = append(args, "--requirepass", o.Password)
	}
	if o.TLS {
		cert, key := selfSigned(t, dir)
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(o.Port),
			"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", cert, "--tls-auth-clients", "no")
	} else {
		args = append(args, "--port", strconv.Itoa(o.Port))
	}
	s := &Server{Port: o.Port, out: &bytes.Buffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port)), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("redis-server exited: %s", s.out)
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			t.Fatalf("redis-server does not accept connections on port %d: %s", o.Port, s.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server and waits for it; it is idempotent.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// into dir.
func selfSigned(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
