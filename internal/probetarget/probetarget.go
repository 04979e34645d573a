// Package probetarget is the probe target of the real node's tests and
// density benchmark (test/node): an HTTP and TCP server whose probe
// endpoints answer what the test sets and which records when each probe
// arrived, so that the kubelet's probes and probed's are seen from the same
// place, and the client the tests and the benchmark read it with. The
// server runs as the container of the node's pods (test/node/target, built
// static into the node's image); it uses the standard library only.
//
// HTTP (Handler):
//
//	GET  /probe/NAME           200, or the status set for NAME; recorded in stream "http NAME"
//	POST /control/NAME?status=CODE
//	                           sets the status /probe/NAME answers in this instance
//	POST /ready-file?present=0|1
//	                           removes or writes Options.ReadyFile (for exec probes that read it)
//	GET  /stats[?reset=1]      the streams as JSON (Stats); reset empties them after reading
//
// TCP (ServeTCP): every connection is accepted, recorded in stream "tcp"
// and closed.
//
// With a state directory (a hostPath the test shares with every instance of
// the container), the file DIR/NAME.status holding a status code sets
// /probe/NAME's answer for every instance, restarted ones included, and
// Stop appends a line to DIR/instances (Instance as JSON): how many failing
// answers of each name the instance served before it was stopped.
package probetarget

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxTimes bounds each stream's recorded arrival times; a stream beyond it
// counts its hits and drops their times (Stream.Dropped).
const MaxTimes = 200_000

// StreamTCP is the stream of TCP connections.
const StreamTCP = "tcp"

// StreamHTTP is the stream of GET /probe/name.
func StreamHTTP(name string) string { return "http " + name }

// Stream is what one probe endpoint saw.
type Stream struct {
	Hits     int64            `json:"hits"`
	Failures int64            `json:"failures"`          // answers other than 200
	Agents   map[string]int64 `json:"agents,omitempty"`  // hits by User-Agent (HTTP)
	Times    []int64          `json:"times"`             // arrival times, Unix microseconds
	Dropped  int64            `json:"dropped,omitempty"` // hits beyond MaxTimes
}

// Stats is the answer of GET /stats.
type Stats struct {
	Since   int64              `json:"since"` // Unix microseconds of the start or the last reset
	Streams map[string]*Stream `json:"streams"`
}

// Instance is the line an instance appends to DIR/instances when stopped.
type Instance struct {
	PID      int              `json:"pid"`
	Started  time.Time        `json:"started"`
	Stopped  time.Time        `json:"stopped"`
	Failures map[string]int64 `json:"failures"` // failing answers served, by probe name
}

// Options configure a Server.
type Options struct {
	State     string // the shared state directory, or ""
	ReadyFile string // written by New, removed and written through /ready-file; "" for none
}

// Server is one instance of the target.
type Server struct {
	opts    Options
	started time.Time

	mu       sync.Mutex
	since    time.Time
	streams  map[string]*Stream
	status   map[string]int   // set through /control
	failures map[string]int64 // failing answers by name, for Instance
}

// New returns a server; it writes opts.ReadyFile when set.
func New(opts Options) (*Server, error) {
	now := time.Now()
	s := &Server{opts: opts, started: now, since: now,
		streams: map[string]*Stream{}, status: map[string]int{}, failures: map[string]int64{}}
	if opts.ReadyFile != "" {
		if err := os.WriteFile(opts.ReadyFile, []byte("ok\n"), 0o644); err != nil {
			return nil, fmt.Errorf("ready file: %w", err)
		}
	}
	return s, nil
}

// Handler serves the HTTP endpoints of the package doc.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /probe/{name}", s.probe)
	mux.HandleFunc("POST /control/{name}", s.control)
	mux.HandleFunc("POST /ready-file", s.setReadyFile)
	mux.HandleFunc("GET /stats", s.stats)
	return mux
}

// ServeTCP accepts, records and closes connections of l until l is closed.
func (s *Server) ServeTCP(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		s.record(StreamTCP, "", false)
		c.Close()
	}
}

// record notes a hit of stream now.
func (s *Server) record(stream, agent string, failed bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[stream]
	if st == nil {
		st = &Stream{}
		s.streams[stream] = st
	}
	st.Hits++
	if failed {
		st.Failures++
	}
	if agent != "" {
		if st.Agents == nil {
			st.Agents = map[string]int64{}
		}
		st.Agents[agent]++
	}
	if len(st.Times) < MaxTimes {
		st.Times = append(st.Times, now.UnixMicro())
	} else {
		st.Dropped++
	}
}

func (s *Server) probe(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	code := s.statusOf(name)
	failed := code != http.StatusOK
	if failed {
		s.mu.Lock()
		s.failures[name]++
		s.mu.Unlock()
	}
	s.record(StreamHTTP(name), r.UserAgent(), failed)
	w.WriteHeader(code)
}

// statusOf is the answer of /probe/name: the state file's, else the one set
// through /control, else 200.
func (s *Server) statusOf(name string) int {
	if s.opts.State != "" && !strings.ContainsAny(name, "/.") {
		if b, err := os.ReadFile(filepath.Join(s.opts.State, name+".status")); err == nil {
			if code, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && code >= 100 && code <= 599 {
				return code
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if code, ok := s.status[name]; ok {
		return code
	}
	return http.StatusOK
}

func (s *Server) control(w http.ResponseWriter, r *http.Request) {
	code, err := strconv.Atoi(r.URL.Query().Get("status"))
	if err != nil || code < 100 || code > 599 {
		http.Error(w, "status: want an HTTP status code", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.status[r.PathValue("name")] = code
	s.mu.Unlock()
}

func (s *Server) setReadyFile(w http.ResponseWriter, r *http.Request) {
	if s.opts.ReadyFile == "" {
		http.Error(w, "no ready file", http.StatusBadRequest)
		return
	}
	var err error
	switch r.URL.Query().Get("present") {
	case "1":
		err = os.WriteFile(s.opts.ReadyFile, []byte("ok\n"), 0o644)
	case "0":
		if err = os.Remove(s.opts.ReadyFile); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	default:
		err = errors.New("present: want 0 or 1")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	out := Stats{Since: s.since.UnixMicro(), Streams: s.streams}
	if r.URL.Query().Get("reset") == "1" {
		s.streams, s.since = map[string]*Stream{}, time.Now()
	} else {
		// A copy: the streams go on growing while the answer is written.
		out.Streams = map[string]*Stream{}
		for k, v := range s.streams {
			c := *v
			c.Times = append([]int64(nil), v.Times...)
			out.Streams[k] = &c
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// Stop appends this instance's line to the state directory's instances
// file (nothing without a state directory).
func (s *Server) Stop() error {
	if s.opts.State == "" {
		return nil
	}
	s.mu.Lock()
	line, err := json.Marshal(Instance{PID: os.Getpid(), Started: s.started, Stopped: time.Now(), Failures: s.failures})
	s.mu.Unlock()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(s.opts.State, "instances"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	return errors.Join(err, f.Close())
}

// Instances reads the instances file of the state directory dir (none yet:
// an empty list).
func Instances(dir string) ([]Instance, error) {
	b, err := os.ReadFile(filepath.Join(dir, "instances"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Instance
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var in Instance
		if err := json.Unmarshal(line, &in); err != nil {
			return nil, fmt.Errorf("%s/instances: %w", dir, err)
		}
		out = append(out, in)
	}
	return out, nil
}

// client is the HTTP client of the helpers below (bounded: a target that
// does not answer is an error, not a hang).
var client = &http.Client{Timeout: 10 * time.Second}

// GetStats reads GET base/stats (base: http://HOST:PORT), emptying the
// target's streams when reset.
func GetStats(base string, reset bool) (Stats, error) {
	u := base + "/stats"
	if reset {
		u += "?reset=1"
	}
	var out Stats
	err := call(http.MethodGet, u, &out)
	return out, err
}

// SetStatus makes the instance at base answer code on /probe/name.
func SetStatus(base, name string, code int) error {
	return call(http.MethodPost, base+"/control/"+url.PathEscape(name)+"?status="+strconv.Itoa(code), nil)
}

// SetReadyFile writes (present) or removes the instance's ready file.
func SetReadyFile(base string, present bool) error {
	v := "0"
	if present {
		v = "1"
	}
	return call(http.MethodPost, base+"/ready-file?present="+v, nil)
}

func call(method, u string, into any) error {
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, bytes.TrimSpace(b))
	}
	if into == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(into)
}
