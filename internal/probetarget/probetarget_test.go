package probetarget

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs s's HTTP handler and TCP listener for the test; it returns the
// HTTP base URL and the TCP address.
func serve(t *testing.T, s *Server) (string, string) {
	t.Helper()
	h := httptest.NewServer(s.Handler())
	t.Cleanup(h.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.ServeTCP(l) }()
	t.Cleanup(func() { l.Close(); <-done })
	return h.URL, l.Addr().String()
}

func get(t *testing.T, url, agent string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("User-Agent", agent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The probe endpoints answer what /control set, each arrival is recorded
// by stream with its User-Agent and failures counted, TCP connections are
// recorded, and reset empties the streams.
func TestProbeControlAndStats(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	base, tcp := serve(t, s)
	if code := get(t, base+"/probe/ready", "kube-probe/1.37"); code != 200 {
		t.Fatalf("/probe/ready = %d, want 200", code)
	}
	if err := SetStatus(base, "ready", 503); err != nil {
		t.Fatal(err)
	}
	if code := get(t, base+"/probe/ready", "kube-probe/1.37"); code != 503 {
		t.Fatalf("/probe/ready after control = %d, want 503", code)
	}
	if err := SetStatus(base, "ready", 42); err == nil {
		t.Fatal("status 42 accepted")
	}
	for range 2 {
		c, err := net.Dial("tcp", tcp)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Read(make([]byte, 1)) // the target closes it
		c.Close()
	}
	st, err := GetStats(base, true)
	if err != nil {
		t.Fatal(err)
	}
	ready := st.Streams[StreamHTTP("ready")]
	if ready == nil || ready.Hits != 2 || ready.Failures != 1 || ready.Agents["kube-probe/1.37"] != 2 || len(ready.Times) != 2 {
		t.Fatalf("stream ready %+v, want 2 hits, 1 failure, 2 times", ready)
	}
	if tcpStream := st.Streams[StreamTCP]; tcpStream == nil || tcpStream.Hits != 2 {
		t.Fatalf("stream tcp %+v, want 2 hits", tcpStream)
	}
	if st, err = GetStats(base, false); err != nil || len(st.Streams) != 0 {
		t.Fatalf("after reset: %+v, %v; want no stream", st.Streams, err)
	}
}

// The state directory's NAME.status wins over /control and outlives the
// instance; Stop records the failing answers the instance served.
func TestStateDirectory(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Options{State: dir})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := serve(t, s)
	if err := os.WriteFile(filepath.Join(dir, "live.status"), []byte("500\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if code := get(t, base+"/probe/live", "x"); code != 500 {
			t.Fatalf("/probe/live = %d, want the state file's 500", code)
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	in, err := Instances(dir)
	if err != nil || len(in) != 1 || in[0].Failures["live"] != 3 || in[0].PID != os.Getpid() {
		t.Fatalf("instances %+v, %v; want one with 3 failing live answers", in, err)
	}
}

// The ready file is written at start, removed and written again through
// /ready-file.
func TestReadyFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ready")
	s, err := New(Options{ReadyFile: file})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := serve(t, s)
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("ready file not written at start: %v", err)
	}
	if err := SetReadyFile(base, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("ready file still there: %v", err)
	}
	if err := SetReadyFile(base, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("ready file not written again: %v", err)
	}
}
