package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The stand-ins are the smallest local targets that make a real manifest's
// probes pass (SOURCES.md), each bound to one loopback address and port.
// They check every probe request as the kubelet would send it and count
// what they see, so a check that does not really probe fails the test.

// standIn is one target.
type standIn interface {
	// start binds ip:port and serves; an error means the port cannot be
	// bound here (the probes aimed at it are skipped).
	start(t *testing.T, ip string) error
	port() int
	// verify reports, after the check ended, requests that were wrong,
	// unexpected or missing.
	verify(t *testing.T)
	describe() string
}

// userAgent is the kubelet's probe user agent at v1.37.
const userAgent = "kube-probe/1.37"

// ---------------------------------------------------------------------------
// HTTP and HTTPS.

// httpReq is a request an HTTP stand-in expects: the request-URI (path and
// query, exactly as sent), the probe's own headers, and how many times.
type httpReq struct {
	uri     string
	headers map[string]string
	times   int
}

// httpStandIn answers 200 to the expected requests and 404 to anything
// else; every request must carry the kubelet's headers (User-Agent
// kube-probe/1.37, Accept */*, no Accept-Encoding, Connection: close; over
// TLS, HTTP/2) and the Host ip:port. A zero-request stand-in checks that
// nothing probes a port (lifecycle hooks are not probes).
type httpStandIn struct {
	portNum int
	tls     bool
	reqs    []httpReq
	// grpcClients: gRPC probes are aimed here too (a port two pods use
	// with different protocols); they must at least try to connect.
	grpcClients bool

	addr     string
	srv      *http.Server
	mu       sync.Mutex
	got      []int
	preludes int // HTTP/2 prior-knowledge prefaces ("PRI *"), i.e. gRPC clients
	problems []string
}

func httpAt(port int, reqs ...httpReq) *httpStandIn { return &httpStandIn{portNum: port, reqs: reqs} }

func httpsAt(port int, reqs ...httpReq) *httpStandIn {
	return &httpStandIn{portNum: port, tls: true, reqs: reqs}
}

// get is an expected GET of uri, times times, with the probe's headers
// given as "Name", "value" pairs.
func get(uri string, times int, headers ...string) httpReq {
	r := httpReq{uri: uri, times: times, headers: map[string]string{}}
	for i := 0; i+1 < len(headers); i += 2 {
		r.headers[headers[i]] = headers[i+1]
	}
	return r
}

func (h *httpStandIn) port() int { return h.portNum }

func (h *httpStandIn) describe() string {
	scheme := "HTTP"
	if h.tls {
		scheme = "HTTPS"
	}
	return fmt.Sprintf("%s stand-in on %s", scheme, h.addr)
}

func (h *httpStandIn) start(t *testing.T, ip string) error {
	h.addr = net.JoinHostPort(ip, strconv.Itoa(h.portNum))
	h.got = make([]int, len(h.reqs))
	l, err := net.Listen("tcp", h.addr)
	if err != nil {
		return err
	}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 10 * time.Second}
	if h.tls {
		h.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if h.tls {
			_ = h.srv.ServeTLS(l, "", "")
		} else {
			_ = h.srv.Serve(l)
		}
	}()
	t.Cleanup(func() { _ = h.srv.Close(); <-done })
	return nil
}

func (h *httpStandIn) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Method == "PRI" && r.RequestURI == "*" {
		// A gRPC client's HTTP/2 preface, on a cleartext HTTP/1 server.
		h.preludes++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var bad []string
	check := func(what, got, want string) {
		if got != want {
			bad = append(bad, fmt.Sprintf("%s %q, want %q", what, got, want))
		}
	}
	check("method", r.Method, http.MethodGet)
	check("User-Agent", strings.Join(r.Header.Values("User-Agent"), ","), userAgent)
	check("Accept", strings.Join(r.Header.Values("Accept"), ","), "*/*")
	check("Accept-Encoding", strings.Join(r.Header.Values("Accept-Encoding"), ","), "")
	check("Host", r.Host, h.addr)
	if h.tls {
		if r.TLS == nil || r.ProtoMajor != 2 {
			bad = append(bad, fmt.Sprintf("protocol %s (TLS %v), want HTTP/2 negotiated over TLS", r.Proto, r.TLS != nil))
		}
	} else {
		check("protocol", r.Proto, "HTTP/1.1")
		if !r.Close {
			bad = append(bad, "no Connection: close (a probe must not keep its connection)")
		}
	}
	match := -1
	for i, want := range h.reqs {
		if r.RequestURI != want.uri {
			continue
		}
		ok := true
		for k, v := range want.headers {
			ok = ok && strings.Join(r.Header.Values(k), ",") == v
		}
		if ok {
			match = i
			break
		}
	}
	if match < 0 {
		bad = append(bad, "not expected here")
	}
	if len(bad) > 0 {
		h.problems = append(h.problems, fmt.Sprintf("%s %s %v: %s", r.Method, r.RequestURI, r.Header, strings.Join(bad, "; ")))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.got[match]++
	_, _ = w.Write([]byte("ok"))
}

func (h *httpStandIn) verify(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.problems {
		t.Errorf("%s: bad request: %s", h.describe(), p)
	}
	switch {
	case h.grpcClients && h.preludes == 0:
		t.Errorf("%s: no gRPC client connected, want the gRPC probes aimed at this port", h.describe())
	case !h.grpcClients && h.preludes > 0:
		t.Errorf("%s: %d HTTP/2 prior-knowledge (gRPC) connections, want none", h.describe(), h.preludes)
	}
	for i, want := range h.reqs {
		if h.got[i] != want.times {
			t.Errorf("%s: GET %s %v: %d requests, want %d", h.describe(), want.uri, want.headers, h.got[i], want.times)
		}
	}
}

var (
	certOnce sync.Once
	cert     tls.Certificate
	certErr  error
)

// selfSigned is a self-signed certificate for the loopback addresses (the
// kubelet does not verify it).
func selfSigned(t *testing.T) tls.Certificate {
	certOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			certErr = err
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1),
			Subject:      pkix.Name{CommonName: "probed e2e stand-in"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			certErr = err
			return
		}
		cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	})
	if certErr != nil {
		t.Fatal(certErr)
	}
	return cert
}

// ---------------------------------------------------------------------------
// TCP.

// tcpStandIn accepts connections and counts them.
type tcpStandIn struct {
	portNum, times int

	addr string
	mu   sync.Mutex
	got  int
}

func tcpAt(port, times int) *tcpStandIn { return &tcpStandIn{portNum: port, times: times} }

func (s *tcpStandIn) port() int        { return s.portNum }
func (s *tcpStandIn) describe() string { return "TCP stand-in on " + s.addr }

func (s *tcpStandIn) start(t *testing.T, ip string) error {
	s.addr = net.JoinHostPort(ip, strconv.Itoa(s.portNum))
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.got++
			s.mu.Unlock()
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close(); <-done })
	return nil
}

func (s *tcpStandIn) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

func (s *tcpStandIn) verify(t *testing.T) {
	t.Helper()
	// The check has ended, so every handshake is done; the accept loop
	// may still be draining the backlog.
	deadline := time.Now().Add(5 * time.Second)
	for s.count() < s.times && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.count(); n != s.times {
		t.Errorf("%s: %d connections, want %d", s.describe(), n, s.times)
	}
}

// ---------------------------------------------------------------------------
// gRPC health.

// grpcStandIn is a plaintext grpc.health.v1 server, faithful to a real
// one: SERVING for its service name, NOT_FOUND for any other. It checks the
// user agent and counts the checks.
type grpcStandIn struct {
	healthpb.UnimplementedHealthServer
	portNum int
	service string
	times   int

	addr     string
	mu       sync.Mutex
	got      int
	problems []string
}

func grpcAt(port int, service string, times int) *grpcStandIn {
	return &grpcStandIn{portNum: port, service: service, times: times}
}

func (g *grpcStandIn) port() int { return g.portNum }
func (g *grpcStandIn) describe() string {
	return fmt.Sprintf("gRPC health stand-in (service %q) on %s", g.service, g.addr)
}

func (g *grpcStandIn) start(t *testing.T, ip string) error {
	g.addr = net.JoinHostPort(ip, strconv.Itoa(g.portNum))
	l, err := net.Listen("tcp", g.addr)
	if err != nil {
		return err
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, g)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return nil
}

func (g *grpcStandIn) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	md, _ := metadata.FromIncomingContext(ctx)
	if ua := strings.Join(md.Get("user-agent"), ","); !strings.HasPrefix(ua, userAgent+" ") {
		g.problems = append(g.problems, fmt.Sprintf("user-agent %q, want %q (plus grpc-go's)", ua, userAgent))
	}
	if req.GetService() != g.service {
		g.problems = append(g.problems, fmt.Sprintf("service %q, want %q", req.GetService(), g.service))
		return nil, status.Errorf(codes.NotFound, "unknown service %q", req.GetService())
	}
	g.got++
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (g *grpcStandIn) verify(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.problems {
		t.Errorf("%s: bad check: %s", g.describe(), p)
	}
	if g.got != g.times {
		t.Errorf("%s: %d checks, want %d", g.describe(), g.got, g.times)
	}
}

// ---------------------------------------------------------------------------
// Exec.

// execStubs are commands that real manifests' exec probes (and lifecycle
// hooks) find on $PATH, installed in a directory put first on the PATH of
// probed: each logs its name and arguments to $E2E_STUB_LOG. Absolute paths
// (/bin/grpc_health_probe, /ready-probe.sh) cannot be stubbed without
// writing to the host's root, so those probes meet the host as it is.
//
//   - cat: the real cat, with absolute paths moved under $E2E_STUB_ROOT, a
//     private root: `cat /tmp/healthy` reads $E2E_STUB_ROOT/tmp/healthy,
//     as the container's own /tmp would be (SOURCES.md #24).
//   - nodetool: exits 0, as Cassandra's would on a healthy node (#25).
//   - pilot-agent: exits 0; istio's preStop hook calls it (#22, #23), and
//     it must never be called by a check.
func installExecStubs(t *testing.T) string {
	t.Helper()
	realCat, err := exec.LookPath("cat")
	if err != nil {
		t.Skipf("no cat on PATH: %v", err)
	}
	dir := t.TempDir()
	stubs := map[string]string{
		"cat": `#!/bin/sh
echo "cat $*" >> "$E2E_STUB_LOG"
for a do
  shift
  case $a in /*) a="$E2E_STUB_ROOT$a" ;; esac
  set -- "$@" "$a"
done
exec ` + realCat + ` "$@"
`,
		"nodetool":    "#!/bin/sh\necho \"nodetool $*\" >> \"$E2E_STUB_LOG\"\nexit 0\n",
		"pilot-agent": "#!/bin/sh\necho \"pilot-agent $*\" >> \"$E2E_STUB_LOG\"\nexit 0\n",
	}
	for name, body := range stubs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// execEnv is the environment of one probed check with the stubs: its own
// log and private root (holding files, "path": "content").
func execEnv(t *testing.T, stubDir string, files map[string]string) (env []string, logPath string) {
	t.Helper()
	root := t.TempDir()
	for path, content := range files {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logPath = filepath.Join(t.TempDir(), "stub.log")
	return []string{
		"PATH=" + stubDir + string(os.PathListSeparator) + os.Getenv("PATH"),
		"E2E_STUB_LOG=" + logPath,
		"E2E_STUB_ROOT=" + root,
	}, logPath
}

// stubCalls returns the stub log's lines, sorted.
func stubCalls(path string) []string {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	sort.Strings(lines)
	return lines
}
