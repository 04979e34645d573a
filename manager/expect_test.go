package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/internal/nettest"
	"github.com/probed/probed/internal/testevents"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// Checks on the response, end to end through the manager's
// default runtime and the built-in handlers: real sockets, real TLS
// certificates made here, the fake clock for the latency and the days
// left.

// realEnv is a test env whose manager has the default runtime (the
// built-in handlers) on the fake clock, its runs seen by the returned
// observer and its events by rec (nil: none).
func realEnv(t *testing.T, rec runtime.Recorder) (*testEnv, *recordObserver) {
	t.Helper()
	obs := &recordObserver{}
	return newTestEnv(t, func(o *Options) { o.Runtime, o.Observer, o.Recorder = nil, obs, rec }), obs
}

// realRun runs the annotation probe element (JSON fields after container)
// once through realEnv and returns the run's record: Cached is the verdict
// (failureThreshold 1), Message what the run said.
func realRun(t *testing.T, element string, rec runtime.Recorder) RunRecord {
	t.Helper()
	e, obs := realEnv(t, rec)
	e.runOnce(annotated(e, "real", element))
	return lastRecord(t, obs)
}

// annotated adds a pod with one annotation probe element (JSON fields
// after container) and a running container, and returns its worker.
func annotated(e *testEnv, uid types.UID, element string) *worker {
	e.t.Helper()
	p := testPod(v1.Container{Name: testContainerName})
	p.UID = uid
	p.Annotations = map[string]string{customprobe.Annotation: `[{"container":"` + testContainerName + `",` + element + `}]`}
	e.status.set(uid, runningStatus(fakeNow, true))
	e.m.AddPod(context.Background(), p)
	w, ok := e.m.getWorker(uid, testContainerName, runtimeTypeOf(element))
	if !ok {
		e.t.Fatalf("no worker for %s", element)
	}
	return w
}

func runtimeTypeOf(element string) runtime.ProbeType {
	for _, pt := range []runtime.ProbeType{runtime.Liveness, runtime.Readiness, runtime.Startup} {
		if strings.Contains(element, `"type":"`+pt.Lower()+`"`) {
			return pt
		}
	}
	return runtime.Readiness
}

// certExpiring makes a self-signed certificate that expires at notAfter.
func certExpiring(t *testing.T, notAfter time.Time) tls.Certificate {
	return nettest.Certificate(t, "probe-target.test", notAfter)
}

func portOf(addr net.Addr) int { return addr.(*net.TCPAddr).Port }

// lastMessage is the observer's last run message.
func lastRecord(t *testing.T, obs *recordObserver) RunRecord {
	t.Helper()
	recs := obs.get()
	if len(recs) == 0 {
		t.Fatal("no run recorded")
	}
	return recs[len(recs)-1]
}

// CertificateExpiresAfterDays on an HTTPS target, with the
// certificate the test made: 10 days left on the manager's clock fail a
// 30-day expectation, naming the days left; a 5-day one holds.
func TestExpect_HTTPSCertificateDaysLeft(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{certExpiring(t, fakeNow.Add(10*24*time.Hour+time.Hour))}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	port := portOf(srv.Listener.Addr())
	for _, tc := range []struct {
		days int
		want results.Result
		msg  string
	}{
		{30, results.Failure, "certificate check failed: the certificate expires in 10 days (2026-01-11T01:00:00Z), under expect.certificateExpiresAfterDays (30)"},
		{5, results.Success, ""},
	} {
		t.Run(fmt.Sprint(tc.days), func(t *testing.T) {
			rec := realRun(t, fmt.Sprintf(`"type":"readiness","failureThreshold":1,"httpGet":{"port":%d,"scheme":"HTTPS","expect":{"certificateExpiresAfterDays":%d}}`, port, tc.days), nil)
			if rec.Cached != tc.want || rec.Message != tc.msg {
				t.Fatalf("%v %q, want %v %q", rec.Cached, rec.Message, tc.want, tc.msg)
			}
		})
	}
}

// TcpSocket.expect.certificateExpiresAfterDays makes a TLS
// handshake with a TLS port (a real tls listener) and checks the
// certificate it presents; a plain TCP port fails the handshake.
func TestExpect_TCPTLSCertificate(t *testing.T) {
	cert := certExpiring(t, fakeNow.Add(3*24*time.Hour))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	plain, _ := listenTCP(t)
	for _, tc := range []struct {
		name       string
		port, days int
		want       results.Result
		msg        string
	}{
		{"2 days asked, 3 left", portOf(ln.Addr()), 2, results.Success, ""},
		{"7 days asked, 3 left", portOf(ln.Addr()), 7, results.Failure, "the certificate expires in 3 days"},
		{"a plain port", plain, 1, results.Failure, "TLS handshake with 127.0.0.1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := realRun(t, fmt.Sprintf(`"type":"readiness","failureThreshold":1,"tcpSocket":{"port":%d,"expect":{"certificateExpiresAfterDays":%d}}`, tc.port, tc.days), nil)
			if rec.Cached != tc.want || !strings.Contains(rec.Message, tc.msg) || (tc.msg == "" && rec.Message != "") {
				t.Fatalf("%v %q, want %v %q", rec.Cached, rec.Message, tc.want, tc.msg)
			}
		})
	}
}

// MaxLatencyMilliseconds is measured on the runtime's clock
// (the manager's): a real server that answers after the fake clock moved
// 300 ms fails a 100 ms bound with the measured latency, and holds a
// 500 ms one.
func TestExpect_LatencyOnTheManagersClock(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		arrived <- struct{}{}
		<-release
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	port := portOf(srv.Listener.Addr())
	for _, tc := range []struct {
		max  int
		want results.Result
		msg  string
	}{
		{100, results.Failure, "probe too slow: the attempt took 300ms, over expect.maxLatencyMilliseconds (100ms)"},
		{500, results.Success, ""},
	} {
		t.Run(fmt.Sprint(tc.max), func(t *testing.T) {
			e, obs := realEnv(t, nil)
			w := annotated(e, "slow", fmt.Sprintf(`"type":"readiness","failureThreshold":1,"httpGet":{"port":%d,"expect":{"maxLatencyMilliseconds":%d}}`, port, tc.max))
			e.idle()
			e.m.sched.Trigger(w.id)
			<-arrived
			e.clk.Step(300 * time.Millisecond)
			release <- struct{}{}
			e.idle()
			e.expectCached(runtime.Readiness, tc.want)
			if got := lastRecord(t, obs).Message; got != tc.msg {
				t.Fatalf("message %q, want %q", got, tc.msg)
			}
		})
	}
}

// Status codes and ranges, the body's regular expression and
// JSONPath value, on a real server; a failed check names the check and the
// status, and the body — here holding a secret — reaches neither the run
// record (history, logs) nor an event (BR-22).
func TestExpect_StatusAndBody(t *testing.T) {
	const secret = "s3cr3t-in-the-body"
	status := 200
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		code := status
		mu.Unlock()
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"status":"degraded","token":%q}`, secret)
	}))
	t.Cleanup(srv.Close)
	port := portOf(srv.Listener.Addr())
	cases := []struct {
		name, expect string
		code         int
		want         results.Result
		msg          string
	}{
		{"503 listed", `"status":[503]`, 503, results.Success, ""},
		{"200 not listed", `"status":["500-599"]`, 200, results.Failure, "HTTP probe failed with statuscode: 200 (expect.status: 500-599)"},
		{"404 outside the default", `"bodyRegex":"degraded"`, 404, results.Failure, "HTTP probe failed with statuscode: 404 (expect.status: 200-399)"},
		{"regex matches", `"bodyRegex":"\"status\":\"degraded\""`, 200, results.Success, ""},
		{"regex fails", `"bodyRegex":"^ok$"`, 200, results.Failure, "HTTP probe failed: the body does not match expect.bodyRegex"},
		{"jsonPath value", `"jsonPath":{"path":"{.status}","value":"degraded"}`, 200, results.Success, ""},
		{"jsonPath differs", `"jsonPath":{"path":".status","value":"up"}`, 200, results.Failure, `HTTP probe failed: expect.jsonPath {.status} is not "up"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			status = tc.code
			mu.Unlock()
			log := &testevents.Log{}
			rec := realRun(t, fmt.Sprintf(`"type":"readiness","failureThreshold":1,"httpGet":{"port":%d,"expect":{%s}}`, port, tc.expect), log)
			if rec.Cached != tc.want || rec.Message != tc.msg {
				t.Fatalf("%v %q, want %v %q", rec.Cached, rec.Message, tc.want, tc.msg)
			}
			for _, l := range log.Lines() {
				if strings.Contains(l, secret) || strings.Contains(l, "degraded\"") {
					t.Fatalf("an event shows the body: %q", l)
				}
			}
			if tc.want == results.Failure && len(log.Lines()) == 0 {
				t.Fatal("no event for a failed check")
			}
		})
	}
}
