package cases

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/internal/nettest"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// selfSigned returns a TLS certificate for dnsName signed by itself.
func selfSigned(t *testing.T, dnsName string) tls.Certificate {
	return nettest.Certificate(t, dnsName, time.Now().Add(time.Hour))
}

// expectRestartAtFailure checks that the container's liveness runs up to
// the first restart are failures of the first container instance and that
// the restart was decided at the n-th, not before.
func expectRestartAtFailure(t *testing.T, e *env, container string, n int) {
	t.Helper()
	runs := e.runsOf(container, runtime.Liveness)
	rs := e.restartList()
	if len(rs) == 0 {
		t.Fatalf("no restart; liveness runs: %d", len(runs))
	}
	first := rs[0]
	var before []runRec
	for _, r := range runs {
		if !r.Start.After(first.At) && r.ContainerID == first.OldContainerID {
			before = append(before, r)
		}
	}
	if len(before) != n {
		t.Fatalf("restart decided after %d liveness attempts of the first instance, want %d", len(before), n)
	}
	for i, r := range before {
		if r.Err != nil || r.Result != runtime.Failure {
			t.Fatalf("attempt %d: result %v err %v, want Failure", i+1, r.Result, r.Err)
		}
	}
	if !first.At.Equal(before[n-1].Start) {
		t.Fatalf("restart at %v, want at the %d-th failure (%v)", first.At, n, before[n-1].Start)
	}
	if first.Reason != "LivenessProbe" || first.Message != "Container "+container+" failed liveness probe, will be restarted" {
		t.Fatalf("restart reason %q message %q", first.Reason, first.Message)
	}
}

// BR-04 (a): HTTP → HTTPS redirect to another port of the same host is
// followed without verifying the certificate (issued for another name):
// Success on every attempt, no restart.
func TestBR04_RedirectToHTTPSSameHostFollowed(t *testing.T) {
	e := newEnv(t)
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	var tlsHits atomic.Int64
	tlsSrv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateActive {
			tlsHits.Add(1)
		}
	}
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned(t, "svc.example.test")}}
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	tlsPort := tlsSrv.Listener.Addr().(*net.TCPAddr).Port

	plain := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://127.0.0.1:"+itoa(tlsPort)+"/health", http.StatusMovedPermanently)
	})
	pod := e.add(newPod("br04a", v1.Container{Name: "app",
		LivenessProbe: timing(httpProbe("/health", plain.Port), 0, 2, 0, 0, 3)}))
	e.advance(20*time.Second, 100*time.Millisecond)

	runs := e.runsOf("app", runtime.Liveness)
	if len(runs) < 9 {
		t.Fatalf("liveness attempts = %d, want about 10", len(runs))
	}
	for i, r := range runs {
		if r.Err != nil || r.Result != runtime.Success {
			t.Fatalf("attempt %d: result %v err %v message %q, want Success", i+1, r.Result, r.Err, r.Message)
		}
	}
	if got := tlsHits.Load(); got != int64(len(runs)) {
		t.Errorf("the HTTPS server saw %d requests for %d attempts", got, len(runs))
	}
	if rs := e.restartList(); len(rs) != 0 {
		t.Errorf("restarts: %+v, want none", rs)
	}
	cs := e.container(pod.UID, "app")
	if r, ok := e.cached(runtime.Liveness, cs.ContainerID); !ok || r != results.Success {
		t.Errorf("liveness cached %v (found %v), want Success", r, ok)
	}
}

// BR-04 (b): a redirect to https:// on the same plaintext port fails every
// attempt (TLS against a plaintext server); the restart is decided at the
// 3rd consecutive failure.
func TestBR04_RedirectToHTTPSOnPlaintextPortFails(t *testing.T) {
	e := newEnv(t)
	var port int
	plain := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://127.0.0.1:"+itoa(port)+"/health", http.StatusMovedPermanently)
	})
	port = plain.Port
	e.add(newPod("br04b", v1.Container{Name: "app",
		LivenessProbe: timing(httpProbe("/health", port), 0, 2, 0, 0, 3)}))
	e.advance(8*time.Second, 100*time.Millisecond)

	expectRestartAtFailure(t, e, "app", 3)
	for _, r := range e.runsOf("app", runtime.Liveness) {
		if r.Result != runtime.Failure {
			t.Fatalf("attempt at %v: %v, want Failure", since(r.Start, e.start), r.Result)
		}
	}
	if n := len(plain.requests("/health")); n != len(e.runsOf("app", runtime.Liveness)) {
		t.Errorf("plaintext requests %d for %d attempts, want one each", n, len(e.runsOf("app", runtime.Liveness)))
	}
}

// BR-05: the Host header from httpHeaders is sent while the connection
// goes to the pod IP; the virtual-host server answers 200 only for it.
// (The variant with httpGet.host = app.example.test needs a name that fails
// to resolve without DNS traffic; the handlers' switch for that is internal
// to plugins, so it is covered by plugins/http's tests, not here.)
func TestBR05_HostHeaderFromHTTPHeaders(t *testing.T) {
	e := newEnv(t)
	srv := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "app.example.test" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusMisdirectedRequest)
	})
	p := timing(httpProbe("/status", srv.Port), 0, 2, 0, 0, 1)
	p.HTTPGet.HTTPHeaders = []v1.HTTPHeader{{Name: "Host", Value: "app.example.test"}}
	pod := e.add(newPod("br05", v1.Container{Name: "app", LivenessProbe: p}))
	e.advance(10*time.Second, 100*time.Millisecond)

	runs := e.runsOf("app", runtime.Liveness)
	if len(runs) < 4 {
		t.Fatalf("liveness attempts = %d, want about 5", len(runs))
	}
	for i, r := range runs {
		if r.Err != nil || r.Result != runtime.Success {
			t.Fatalf("attempt %d: %v %v %q, want Success", i+1, r.Result, r.Err, r.Message)
		}
	}
	reqs := srv.requests("/status")
	if len(reqs) != len(runs) {
		t.Fatalf("server saw %d requests for %d attempts", len(reqs), len(runs))
	}
	for _, r := range reqs {
		if r.Host != "app.example.test" {
			t.Errorf("Host = %q, want app.example.test", r.Host)
		}
		if !strings.HasPrefix(r.Local, "127.0.0.1:") {
			t.Errorf("connection went to %s, want the pod IP 127.0.0.1", r.Local)
		}
	}
	if rs := e.restartList(); len(rs) != 0 {
		t.Errorf("restarts %+v, want none", rs)
	}
	if cs := e.container(pod.UID, "app"); cs.RestartCount != 0 {
		t.Errorf("restartCount %d", cs.RestartCount)
	}
}

// BR-06: default request headers and their overrides.
func TestBR06_DefaultHeadersAndOverrides(t *testing.T) {
	ua := regexp.MustCompile(`^kube-probe/\d+\.\d+$`)
	type check func(t *testing.T, r reqRec)
	cases := []struct {
		name    string
		headers []v1.HTTPHeader
		ready   bool
		check   check
	}{
		{"a-defaults", nil, true, func(t *testing.T, r reqRec) {
			if r.Method != http.MethodGet || r.Body != 0 {
				t.Errorf("method %s body %d, want GET without body", r.Method, r.Body)
			}
			if got := r.Header.Get("User-Agent"); !ua.MatchString(got) {
				t.Errorf("User-Agent %q, want kube-probe/<major>.<minor>", got)
			}
			if got := r.Header.Values("Accept"); len(got) != 1 || got[0] != "*/*" {
				t.Errorf("Accept %q, want */*", got)
			}
			if !r.Close || r.Header.Get("Connection") != "close" {
				t.Errorf("Connection %q (close=%v), want close", r.Header.Get("Connection"), r.Close)
			}
			if _, ok := r.Header["Accept-Encoding"]; ok {
				t.Errorf("Accept-Encoding %q sent, want none", r.Header.Get("Accept-Encoding"))
			}
		}},
		{"b-empty-accept", []v1.HTTPHeader{{Name: "Accept", Value: ""}}, false, func(t *testing.T, r reqRec) {
			if _, ok := r.Header["Accept"]; ok {
				t.Errorf("Accept %q sent, want none", r.Header.Values("Accept"))
			}
		}},
		{"c-user-agent", []v1.HTTPHeader{{Name: "User-Agent", Value: "probe-test/1"}}, true, func(t *testing.T, r reqRec) {
			if got := r.Header.Values("User-Agent"); len(got) != 1 || got[0] != "probe-test/1" {
				t.Errorf("User-Agent %q, want probe-test/1", got)
			}
			if got := r.Header.Get("Accept"); got != "*/*" {
				t.Errorf("Accept %q, want */*", got)
			}
		}},
		{"d-repeated", []v1.HTTPHeader{{Name: "X-Probe", Value: "a"}, {Name: "X-Probe", Value: "b"}}, true, func(t *testing.T, r reqRec) {
			if got := r.Header.Values("X-Probe"); strings.Join(got, ",") != "a,b" {
				t.Errorf("X-Probe %q, want [a b]", got)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			srv := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
				if len(r.Header.Values("Accept")) == 0 {
					w.WriteHeader(http.StatusNotAcceptable)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			p := timing(httpProbe("/h", srv.Port), 0, 1, 0, 0, 0)
			p.HTTPGet.HTTPHeaders = tc.headers
			pod := e.add(newPod("br06", v1.Container{Name: "app", ReadinessProbe: p}))
			e.advance(4*time.Second, 100*time.Millisecond)

			runs := e.runsOf("app", runtime.Readiness)
			want := runtime.Success
			if !tc.ready {
				want = runtime.Failure
			}
			if len(runs) < 4 {
				t.Fatalf("readiness attempts %d, want at least 4", len(runs))
			}
			for i, r := range runs {
				if r.Err != nil || r.Result != want {
					t.Fatalf("attempt %d: %v %v %q, want %v", i+1, r.Result, r.Err, r.Message, want)
				}
			}
			if cs := e.container(pod.UID, "app"); cs.Ready != tc.ready {
				t.Errorf("Ready = %v, want %v", cs.Ready, tc.ready)
			}
			reqs := srv.requests("/h")
			if len(reqs) != len(runs) {
				t.Fatalf("server saw %d requests for %d attempts", len(reqs), len(runs))
			}
			for _, r := range reqs {
				tc.check(t, r)
			}
		})
	}
}

// BR-07: keep-alive is off: every probe opens one new connection (no reuse
// of a connection the server may have closed), carries Connection: close,
// and a server with a 1 s idle timeout never causes a failure.
func TestBR07_NoKeepAliveReuse(t *testing.T) {
	e := newEnv(t)
	var conns atomic.Int64
	rec := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) },
		func(s *http.Server) {
			s.IdleTimeout = time.Second
			s.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
		})

	pod := e.add(newPod("br07", v1.Container{Name: "app",
		LivenessProbe: timing(httpProbe("/", rec.Port), 0, 2, 1, 0, 1)}))
	e.advance(60*time.Second, 500*time.Millisecond)

	runs := e.runsOf("app", runtime.Liveness)
	if len(runs) < 29 || len(runs) > 31 {
		t.Fatalf("liveness attempts %d over 60 s, want ~30", len(runs))
	}
	for i, r := range runs {
		if r.Err != nil || r.Result != runtime.Success {
			t.Fatalf("attempt %d: %v %v %q, want Success", i+1, r.Result, r.Err, r.Message)
		}
	}
	if rs := e.restartList(); len(rs) != 0 {
		t.Fatalf("restarts %+v, want none", rs)
	}
	reqs := rec.requests("/")
	if len(reqs) != len(runs) {
		t.Fatalf("%d requests for %d attempts", len(reqs), len(runs))
	}
	if got := conns.Load(); got != int64(len(reqs)) {
		t.Errorf("server accepted %d connections for %d requests, want one new connection per probe", got, len(reqs))
	}
	for _, r := range reqs {
		if !r.Close {
			t.Fatalf("request without Connection: close")
		}
	}
	if cs := e.container(pod.UID, "app"); cs.RestartCount != 0 {
		t.Errorf("restartCount %d", cs.RestartCount)
	}
}

// BR-08: 200 with an oversized or never-ending body. (a) 64 KiB then a
// connection held open, (b) 1 MiB at full speed: Success, Ready=true. A
// Success proves the attempt ended before the 1 s timeout: had the prober
// kept reading the body of (a), the timeout would have errored it. (c) a body trickling at 1 KiB/s: the timeout
// fires while reading the body, which is errored (BR-09): no state change,
// nothing counted, a "probe errored" event.
func TestBR08_OversizedBody(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		name string
		body func(w http.ResponseWriter, r *http.Request)
	}{
		{"a-64KiB-then-hang", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(big[:64<<10]))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}},
		{"b-1MiB", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(big))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			srv := startServer(t, e.clk, "127.0.0.1:0", tc.body)
			pod := e.add(newPod("br08", v1.Container{Name: "app",
				ReadinessProbe: timing(httpProbe("/big", srv.Port), 0, 2, 1, 0, 0)}))
			e.advance(6*time.Second, 2*time.Second)
			runs := e.runsOf("app", runtime.Readiness)
			if len(runs) < 4 {
				t.Fatalf("readiness attempts %d, want 4", len(runs))
			}
			for i, r := range runs {
				if r.Err != nil || r.Result != runtime.Success {
					t.Fatalf("attempt %d: %v %v %q, want Success", i+1, r.Result, r.Err, r.Message)
				}
			}
			if cs := e.container(pod.UID, "app"); !cs.Ready {
				t.Errorf("Ready = false, want true")
			}
		})
	}

	// (c) The container is Ready; then the body starts to trickle. The
	// errored attempt changes nothing: Ready stays true (#74732).
	t.Run("c-trickle", func(t *testing.T) {
		e := newEnv(t, withAge(10*time.Second))
		var trickle atomic.Bool
		srv := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			if !trickle.Load() {
				return
			}
			chunk := []byte(big[:1024])
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(time.Second):
				}
			}
		})
		pod := e.add(newPod("br08c", v1.Container{Name: "app",
			ReadinessProbe: timing(httpProbe("/big", srv.Port), 0, 2, 1, 0, 0)}))
		cs := e.container(pod.UID, "app")
		if !cs.Ready {
			t.Fatalf("not Ready before the body trickles")
		}
		before := len(e.runsOf("app", runtime.Readiness))
		succ := e.probeTotal(pod, "app", "Readiness", "successful")
		trickle.Store(true)
		begin := time.Now()
		e.advance(2*time.Second, 2*time.Second)
		took := time.Since(begin)

		runs := e.runsOf("app", runtime.Readiness)[before:]
		if len(runs) != 1 {
			t.Fatalf("readiness attempts while trickling %d, want 1", len(runs))
		}
		r := runs[0]
		if r.Err == nil {
			t.Fatalf("attempt: %v %q, want errored (timeout while reading the body)", r.Result, r.Message)
		}
		if r.Attempts != runtime.MaxAttempts || took < 2500*time.Millisecond {
			t.Errorf("%d tries in %v, want %d tries of ~1 s (P2)", r.Attempts, took, runtime.MaxAttempts)
		}
		cs = e.container(pod.UID, "app")
		if !cs.Ready {
			t.Errorf("Ready = false after an errored probe, want it unchanged (true)")
		}
		if got, ok := e.cached(runtime.Readiness, cs.ContainerID); !ok || got != results.Success {
			t.Errorf("readiness cached %v (found %v), want Success unchanged", got, ok)
		}
		if n := e.probeTotal(pod, "app", "Readiness", "failed"); n != 0 {
			t.Errorf("prober_probe_total{result=failed} = %v, want 0 (errored attempts are not counted)", n)
		}
		if n := e.probeTotal(pod, "app", "Readiness", "successful"); n != succ {
			t.Errorf("prober_probe_total{result=successful} went from %v to %v on an errored attempt", succ, n)
		}
		if evs := e.eventsMatching("Readiness probe errored"); len(evs) != 1 {
			t.Errorf("%d \"probe errored\" events, want 1; events: %+v", len(evs), e.eventList())
		}
	})
}

// cutOffBody answers 200 with Content-Length 1000, writes 10 bytes and
// closes the connection (BR-09 a).
func cutOffBody(w http.ResponseWriter, _ *http.Request) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("no hijacker")
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nContent-Type: text/plain\r\n\r\n0123456789")
	_ = buf.Flush()
}
