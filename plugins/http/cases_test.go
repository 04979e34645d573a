package http

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/runtime"
)

// BR-04: an HTTP probe follows a same-hostname redirect to https without
// verifying the certificate (a); https against a plaintext port fails (b).
func TestBR04_SameHostHTTPToHTTPS(t *testing.T) {
	tlsSrv := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if r.TLS == nil || r.URL.Path != "/health" {
			w.WriteHeader(nethttp.StatusBadRequest)
			return
		}
		io.WriteString(w, "secure")
	}))
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{selfSignedCert(t, "svc.example.test")}}
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)

	var plainPort int
	plain := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		to := r.URL.Query().Get("to")
		if to == "self" {
			to = "https://127.0.0.1:" + itoa(plainPort) + "/health"
		}
		w.Header().Set("Location", to)
		w.WriteHeader(nethttp.StatusMovedPermanently)
	})
	plainPort = portOf(t, plain)

	t.Run("a same hostname https self-signed", func(t *testing.T) {
		got, err := run(t, get(plainPort, "/health?to=https://127.0.0.1:"+itoa(portOf(t, tlsSrv))+"/health"))
		wantOutcome(t, got, err, runtime.Success, "secure")
	})
	t.Run("b https to the plaintext port", func(t *testing.T) {
		start := time.Now()
		got, err := run(t, get(plainPort, "/health?to=self"))
		if err != nil || got.Result != runtime.Failure || !strings.Contains(got.Output, "https://127.0.0.1:"+itoa(plainPort)) {
			t.Fatalf("outcome = (%v, %q, %v), want a TLS Failure", got.Result, got.Output, err)
		}
		if d := time.Since(start); d > 900*time.Millisecond {
			t.Fatalf("attempt took %v, want fast", d)
		}
	})
}

// BR-05: a Host header is the virtual host only; the connection still goes
// to the pod IP. httpGet.host instead changes where the probe connects.
func TestBR05_HostHeader(t *testing.T) {
	const vhost = "app.example.test"
	var seen atomic.Value
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		seen.Store(r.Host + " " + r.RemoteAddr)
		if r.Host != vhost {
			w.WriteHeader(nethttp.StatusMisdirectedRequest)
			return
		}
		io.WriteString(w, "ok")
	})
	port := portOf(t, s)

	t.Run("Host header", func(t *testing.T) {
		g := get(port, "/status")
		g.HTTPHeaders = []v1.HTTPHeader{{Name: "Host", Value: vhost}}
		got, err := run(t, g)
		wantOutcome(t, got, err, runtime.Success, "ok")
		if v := seen.Load().(string); !strings.HasPrefix(v, vhost+" 127.0.0.1:") {
			t.Fatalf("server saw %q, want Host %s from 127.0.0.1", v, vhost)
		}
	})
	t.Run("host field changes the dial target and Host", func(t *testing.T) {
		g := get(port, "/status")
		g.Host = "localhost"
		got, err := run(t, g)
		wantOutcome(t, got, err, runtime.Failure, "HTTP probe failed with statuscode: 421")
		if v := seen.Load().(string); !strings.HasPrefix(v, "localhost:"+itoa(port)+" ") {
			t.Fatalf("server saw %q, want Host localhost:%d", v, port)
		}
	})
	t.Run("host field that does not resolve", func(t *testing.T) {
		skipIfResolves(t, vhost)
		g := get(port, "/status")
		g.Host = vhost
		start := time.Now()
		got, err := run(t, g)
		if err != nil || got.Result != runtime.Failure || !strings.Contains(got.Output, "lookup "+vhost) {
			t.Fatalf("outcome = (%v, %q, %v), want a name-resolution Failure", got.Result, got.Output, err)
		}
		if d := time.Since(start); d > 900*time.Millisecond {
			t.Fatalf("attempt took %v", d)
		}
	})
}

// rawServer accepts connections on 127.0.0.1 and answers each with one
// response after recording the request head exactly as received.
func rawServer(t *testing.T, status string) (port int, heads func() []string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got []string
		wg  sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			var head bytes.Buffer
			buf := make([]byte, 4096)
			c.SetDeadline(time.Now().Add(2 * time.Second))
			for !bytes.Contains(head.Bytes(), []byte("\r\n\r\n")) {
				n, err := c.Read(buf)
				head.Write(buf[:n])
				if err != nil {
					break
				}
			}
			mu.Lock()
			got = append(got, head.String())
			mu.Unlock()
			io.WriteString(c, "HTTP/1.1 "+status+"\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			c.Close()
		}
	})
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return l.Addr().(*net.TCPAddr).Port, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// BR-06: default request headers and overrides, checked on the wire.
func TestBR06_DefaultHeaders(t *testing.T) {
	t.Run("a defaults", func(t *testing.T) {
		port, heads := rawServer(t, "200 OK")
		got, err := run(t, get(port, "/h"))
		wantOutcome(t, got, err, runtime.Success, "ok")
		h := heads()
		if len(h) != 1 {
			t.Fatalf("server saw %d requests", len(h))
		}
		want := "GET /h HTTP/1.1\r\n" +
			"Host: 127.0.0.1:" + itoa(port) + "\r\n" +
			"User-Agent: " + runtime.KubeProbeUserAgent + "\r\n" +
			"Accept: */*\r\n" +
			"Connection: close\r\n\r\n"
		if h[0] != want {
			t.Fatalf("request head\n%q\nwant\n%q", h[0], want)
		}
	})

	// A content-negotiating server: 406 without Accept.
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if r.Header["Accept"] == nil {
			w.WriteHeader(nethttp.StatusNotAcceptable)
			return
		}
		io.WriteString(w, r.UserAgent()+"|"+r.Header.Get("Accept")+"|"+strings.Join(r.Header["X-Probe"], ","))
	})
	port := portOf(t, s)
	cases := []struct {
		name    string
		headers []v1.HTTPHeader
		result  runtime.Result
		output  string
	}{
		{"a negotiating server", nil, runtime.Success, runtime.KubeProbeUserAgent + "|*/*|"},
		{"b empty Accept", []v1.HTTPHeader{{Name: "Accept", Value: ""}}, runtime.Failure, "HTTP probe failed with statuscode: 406"},
		{"c User-Agent override", []v1.HTTPHeader{{Name: "User-Agent", Value: "probe-test/1"}}, runtime.Success, "probe-test/1|*/*|"},
		{"d duplicates", []v1.HTTPHeader{{Name: "X-Probe", Value: "a"}, {Name: "X-Probe", Value: "b"}}, runtime.Success, runtime.KubeProbeUserAgent + "|*/*|a,b"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := get(port, "/h")
			g.HTTPHeaders = c.headers
			got, err := run(t, g)
			wantOutcome(t, got, err, c.result, c.output)
		})
	}
}

// BR-07: keep-alive is off: every attempt opens a new connection and says
// Connection: close, even against a keep-alive server.
func TestBR07_NewConnectionPerProbe(t *testing.T) {
	var conns, closeReqs atomic.Int32
	s := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if r.Close {
			closeReqs.Add(1)
		}
		io.WriteString(w, "ok")
	}))
	s.Config.IdleTimeout = time.Second
	s.Config.ConnState = func(_ net.Conn, st nethttp.ConnState) {
		if st == nethttp.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)

	p := prepare(t, New(), httpSpec(get(portOf(t, s), "/")))
	const n = 5
	for i := 0; i < n; i++ {
		got, err := probeWithin(p, podIP, time.Second)
		wantOutcome(t, got, err, runtime.Success, "ok")
	}
	if conns.Load() != n || closeReqs.Load() != n {
		t.Fatalf("%d probes: %d connections, %d requests with Connection: close; want %d each", n, conns.Load(), closeReqs.Load(), n)
	}
}

// BR-08: an oversized or never-ending body. The prober reads 10 KiB and
// stops (a, b); a body that trickles past the deadline is a read error,
// i.e. errored (c, H6).
func TestBR08_OversizedBody(t *testing.T) {
	chunk := bytes.Repeat([]byte("z"), 1024)
	want := strings.Repeat("z", runtime.MaxOutputBytes)
	cases := map[string]nethttp.HandlerFunc{
		"a 64 KiB then hang": func(w nethttp.ResponseWriter, r *nethttp.Request) {
			for range 64 {
				w.Write(chunk)
			}
			nethttp.NewResponseController(w).Flush()
			<-r.Context().Done()
		},
		"b 1 MiB at full speed": func(w nethttp.ResponseWriter, r *nethttp.Request) {
			for range 1024 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			p := prepare(t, New(), httpSpec(get(portOf(t, serve(t, f)), "/big")))
			start := time.Now()
			got, err := probeWithin(p, podIP, time.Second)
			wantOutcome(t, got, err, runtime.Success, want)
			if d := time.Since(start); d > 900*time.Millisecond {
				t.Fatalf("attempt took %v, want well under the timeout", d)
			}
		})
	}
	t.Run("b memory stays bounded", func(t *testing.T) {
		p := prepare(t, New(), httpSpec(get(portOf(t, serve(t, cases["b 1 MiB at full speed"])), "/big")))
		probeWithin(p, podIP, time.Second) // warm the transport and buffer pool
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		got, err := probeWithin(p, podIP, time.Second)
		goruntime.ReadMemStats(&after)
		wantOutcome(t, got, err, runtime.Success, want)
		// Client and server together; buffering the 1 MiB body would show.
		if n := after.TotalAlloc - before.TotalAlloc; n > 256<<10 {
			t.Fatalf("one attempt allocated %d bytes, want ~10 KiB of body plus overhead", n)
		}
	})
	t.Run("c trickle past the timeout", func(t *testing.T) {
		s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
			rc := nethttp.NewResponseController(w)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				w.Write(chunk[:100])
				rc.Flush()
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
				}
			}
		})
		p := prepare(t, New(), httpSpec(get(portOf(t, s), "/big")))
		got, err := probeWithin(p, podIP, 200*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "(Client.Timeout or context cancellation while reading body)") {
			t.Fatalf("error = %v, want the body-read timeout (errored)", err)
		}
		if got.Output != "" || got.StatusCode != 200 {
			t.Fatalf("outcome = %+v", got)
		}
	})
}

// BR-20: a named port resolves to its containerPort, never its hostPort;
// an unknown name errors every attempt with `port "metrcis" not found`.
func TestBR20_NamedPort(t *testing.T) {
	s := serve(t, bodyOf("ready"))
	ports := []v1.ContainerPort{{Name: "http-alt", ContainerPort: int32(portOf(t, s)), HostPort: int32(closedPort(t))}}
	g := get(0, "/ready")
	g.Port = intstr.FromString("http-alt")
	got, err := probeWithin(prepare(t, New(), httpSpec(g, ports...)), podIP, time.Second)
	wantOutcome(t, got, err, runtime.Success, "ready")

	g.Port = intstr.FromString("metrcis")
	p, err := New().Prepare(httpSpec(g, ports...))
	if err != nil {
		t.Fatalf("Prepare: %v, want the error at every attempt instead", err)
	}
	for i := 0; i < 3; i++ {
		got, err := probeWithin(p, podIP, time.Second)
		if err == nil || !strings.Contains(err.Error(), `port "metrcis" not found`) || got.Result != runtime.Unknown {
			t.Fatalf("attempt %d: (%v, %v), want errored with port \"metrcis\" not found", i, got.Result, err)
		}
	}
}

// BR-22: a failing response's body never reaches the output.
func TestBR22_BodyNotInFailure(t *testing.T) {
	const secret = "token=EXAMPLE-SECRET-123"
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(nethttp.StatusInternalServerError)
		}
		io.WriteString(w, secret)
	})
	got, err := run(t, get(portOf(t, s), "/healthz"))
	wantOutcome(t, got, err, runtime.Failure, "HTTP probe failed with statuscode: 500")
	if strings.Contains(got.Output, "EXAMPLE-SECRET-123") {
		t.Fatal("secret leaked")
	}
	// The 200 variant: upstream's output is the body (not an event).
	got, err = run(t, get(portOf(t, s), "/ok"))
	wantOutcome(t, got, err, runtime.Success, secret)
}

// BR-23: an IPv6 pod IP is bracketed in the URL and the Host header; an
// IPv4-only app fails on it, with no fallback.
func TestBR23_IPv6PodIP(t *testing.T) {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	var host string
	s := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		host = r.Host
		io.WriteString(w, "v6")
	}))
	s.Listener.Close()
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	port := portOf(t, s)

	p := prepare(t, New(), httpSpec(get(port, "/healthz")))
	t.Run("a server on ::1", func(t *testing.T) {
		got, err := probeWithin(p, "::1", time.Second)
		wantOutcome(t, got, err, runtime.Success, "v6")
		if want := "[::1]:" + itoa(port); host != want {
			t.Fatalf("Host = %q, want %q", host, want)
		}
		u, _ := p.(*prober).url("::1")
		if want := "http://[::1]:" + itoa(port) + "/healthz"; u.String() != want {
			t.Fatalf("URL = %s, want %s", u, want)
		}
	})
	t.Run("b server only on 127.0.0.1", func(t *testing.T) {
		v4 := serve(t, bodyOf("v4"))
		p := prepare(t, New(), httpSpec(get(portOf(t, v4), "/healthz")))
		got, err := probeWithin(p, "::1", time.Second)
		if err != nil || got.Result != runtime.Failure || !strings.Contains(got.Output, "connection refused") {
			t.Fatalf("outcome = (%v, %q, %v), want refused on ::1", got.Result, got.Output, err)
		}
		if !strings.Contains(got.Output, "[::1]:"+itoa(portOf(t, v4))) {
			t.Fatalf("output %q does not name [::1]:port", got.Output)
		}
	})
}

// BR-26: httpGet.protocol HTTP2 speaks cleartext HTTP/2 with prior
// knowledge; the default stays HTTP/1.1; HTTP2 with HTTPS or host is
// rejected.
func TestBR26_H2C(t *testing.T) {
	var protos nethttp.Protocols
	protos.SetUnencryptedHTTP2(true)
	var seen atomic.Value
	s := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		seen.Store(r.Proto + "|" + r.UserAgent() + "|" + r.Header.Get("Accept") + "|" + r.Header.Get("Accept-Encoding"))
		if r.URL.Path == "/redirect" {
			w.Header().Set("Location", "/healthz")
			w.WriteHeader(nethttp.StatusFound)
			return
		}
		io.WriteString(w, "h2c")
	}))
	s.Config.Protocols = &protos
	s.Start()
	t.Cleanup(s.Close)
	port := portOf(t, s)
	h2 := v1.HTTPProtocolHTTP2
	h1 := v1.HTTPProtocolHTTP1

	t.Run("a default HTTP/1.1", func(t *testing.T) {
		got, err := run(t, get(port, "/healthz"))
		if err != nil || got.Result != runtime.Failure {
			t.Fatalf("outcome = (%v, %q, %v), want Failure", got.Result, got.Output, err)
		}
		g := get(port, "/healthz")
		g.Protocol = &h1
		if got, err = run(t, g); err != nil || got.Result != runtime.Failure {
			t.Fatalf("HTTP1: outcome = (%v, %q, %v), want Failure", got.Result, got.Output, err)
		}
	})
	t.Run("b HTTP2", func(t *testing.T) {
		g := get(port, "/redirect")
		g.Protocol = &h2
		got, err := run(t, g)
		wantOutcome(t, got, err, runtime.Success, "h2c")
		if v := seen.Load().(string); v != "HTTP/2.0|"+runtime.KubeProbeUserAgent+"|*/*|" {
			t.Fatalf("server saw %q", v)
		}
	})
	t.Run("c HTTP2 with HTTPS rejected", func(t *testing.T) {
		g := get(port, "/healthz")
		g.Protocol, g.Scheme = &h2, v1.URISchemeHTTPS
		if _, err := New().Prepare(httpSpec(g)); err == nil {
			t.Fatal("Prepare accepted HTTP2 with HTTPS")
		}
	})
	t.Run("d HTTP2 with host rejected", func(t *testing.T) {
		g := get(port, "/healthz")
		g.Protocol, g.Host = &h2, "127.0.0.1"
		if _, err := New().Prepare(httpSpec(g)); err == nil {
			t.Fatal("Prepare accepted HTTP2 with host")
		}
	})
	t.Run("unknown protocol rejected", func(t *testing.T) {
		g := get(port, "/healthz")
		bad := v1.HTTPProtocol("HTTP3")
		g.Protocol = &bad
		if _, err := New().Prepare(httpSpec(g)); err == nil {
			t.Fatal("Prepare accepted HTTP3")
		}
	})
}
