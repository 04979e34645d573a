package resident

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	_ "embed"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/tenant"
)

// The helper's side of the protocol is helper.sh (its header describes
// it); this file is probed's side: what goes to the helper's stdin, and
// the reading of its stdout and stderr.

//go:embed helper.sh
var script string

// Name is the helper's $0: what `ps` in the container shows after sh -c.
const Name = "probed-exec-helper"

// boot is the helper's command line, sh -c boot Name: it reads the script
// from stdin up to a line "." and runs it (so the script itself never
// shows in the container's process list).
const boot = `s=; while IFS= read -r l && [ "$l" != . ]; do s="$s$l
"; done; eval "$s"`

// Command is the helper's argv, as the streaming exec starts it.
var Command = []string{"sh", "-c", boot, Name}

// mark starts every record the helper writes (ASCII record separator).
const mark = '\x1e'

// Bounds of what probed keeps of the helper's streams (a helper is a
// process of the tenant's container: it may write anything).
const (
	// maxEnv bounds each environment dump at start
	// (tenant.HelperEnvironmentBytes); a container whose helper reports
	// more runs its exec probes through ExecSync (errEnvTooLarge).
	maxEnv = tenant.HelperEnvironmentBytes
	// maxRunOutput is the most a run may print, stdout and stderr
	// together (tenant.ExecOutputBytes): past it the run is killed and
	// is a Failure (exec.OutputLimitError).
	maxRunOutput = tenant.ExecOutputBytes
	// maxAfterKill bounds what a run may still print once it passed
	// maxRunOutput and was told to stop: a helper that goes on breaks its
	// protocol and is replaced. An honest one stops it within its reap's
	// time (a shell walking /proc: `yes` printed 0.7–2.7 MiB more
	// meanwhile here).
	maxAfterKill = 16 << 20
	// maxLine bounds a record's line (status, ready, unsupported).
	maxLine = 256
	// maxStartupNoise bounds what the helper's stderr may say before it
	// is ready (shells warn about a missing tty, say).
	maxStartupNoise = 64 << 10
)

// errProtocol marks what the helper wrote out of turn: the helper is
// replaced (the run under way, if any, is errored).
var errProtocol = errors.New("the exec helper broke its protocol")

// errEnvTooLarge: the helper reported an environment over maxEnv. The
// container cannot host a helper (its exec probes run through ExecSync).
var errEnvTooLarge = fmt.Errorf("its environment is over %d KiB", maxEnv>>10)

// quote makes s one single-quoted sh word: ' becomes '\” and a newline
// '"$nl"' (the helper's $nl holds one), so that a request stays one line
// and eval gives back s exactly. s must not hold a NUL (no argv can).
func quote(s string) string {
	return "'" + quoter.Replace(s) + "'"
}

var quoter = strings.NewReplacer("'", `'\''`, "\n", `'"$nl"'`)

// request is the line that runs cmd under token tok.
func request(tok string, cmd []string) (string, error) {
	var b strings.Builder
	b.WriteString(tok)
	for i, a := range cmd {
		if strings.IndexByte(a, 0) >= 0 {
			return "", fmt.Errorf("exec: argument %d of the command holds a NUL byte", i)
		}
		b.WriteByte(' ')
		b.WriteString(quote(a))
	}
	b.WriteByte('\n')
	return b.String(), nil
}

// newToken is a run's token: 96 random bits in hex, which a command cannot
// guess (it could only forge its own run's end, which its exit status
// decides anyway).
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// shellName is what a shell accepts as a variable's name.
var shellName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// fixLine is the line the helper evals once it has dumped its
// environments: xpath, the exec's PATH (runc finds a command there), and
// fix, the code each run evals before its exec so that the command's
// environment is the exec's own, env0 (what ExecSync would give it), not
// env1, what the shell exports to its children (dash and busybox ash add
// PWD, busybox SHLVL, bash SHLVL and _). Names a shell cannot hold are left
// as the shell has them.
func fixLine(env0, env1 []byte) string {
	e0, e1 := parseEnv(env0), parseEnv(env1)
	var fix []string
	for _, k := range sortedKeys(e1) {
		if _, ok := e0[k]; !ok && shellName.MatchString(k) {
			fix = append(fix, "unset "+k)
		}
	}
	for _, k := range sortedKeys(e0) {
		if v, ok := e1[k]; (!ok || v != e0[k]) && shellName.MatchString(k) {
			fix = append(fix, "export "+k+"="+quote(e0[k]))
		}
	}
	return "xpath=" + quote(e0["PATH"]) + "; fix=" + quote(strings.Join(fix, "; ")) + "\n"
}

// parseEnv reads /proc/PID/environ: NUL-separated NAME=value entries (the
// first of a name counts, as getenv finds it).
func parseEnv(b []byte) map[string]string {
	out := map[string]string{}
	for _, e := range bytes.Split(b, []byte{0}) {
		k, v, ok := bytes.Cut(e, []byte{'='})
		if !ok || len(k) == 0 {
			continue
		}
		if _, dup := out[string(k)]; !dup {
			out[string(k)] = string(v)
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// frame is what one run wrote to one stream: its first
// runtime.MaxOutputBytes bytes and, on stdout, the status (an exit code;
// k: killed; n: not found; p: not executable).
type frame struct {
	data   []byte
	status string
}

// stream reads one of the helper's output streams (an io.Writer the
// session copies it into; one writer at a time). Outside a run nothing may
// arrive but the startup records, in order; anything else is a protocol
// error, and the helper is replaced.
type stream struct {
	stdout bool // stdout carries the startup records and each run's status

	mu     sync.Mutex
	state  int
	rec    []byte        // startup and status: the record being read
	out    []byte        // a run: the output kept
	tail   []byte        // a run: the last bytes, which may begin the end mark
	end    []byte        // a run: the end mark ("\x1eTOKEN " on stdout, "\x1eTOKEN\n" on stderr)
	budget *runBudget    // a run: what it printed on both streams
	noise  int           // stderr before ready: bytes seen
	env    [2][]byte     // the environment dumps, until the helper takes them (takeEnv)
	event  chan any      // startupDone, readyRecord, unsupportedRecord, *frame
	err    error         // the first protocol error; every later write fails with it
	broke  chan struct{} // closed with err
}

// States of a stream.
const (
	stEnv0   = iota // stdout: the exec's environment, up to "\x1ee0\n"
	stEnv1          // stdout: a child's environment, up to "\x1ee1\n"
	stReady         // stdout: the ready record; stderr: noise until the first run
	stIdle          // between runs: nothing may arrive
	stData          // a run's output, up to its end mark
	stStatus        // stdout: the status after the end mark, up to "\n"
)

func newStream(stdout bool) *stream {
	s := &stream{stdout: stdout, event: make(chan any, 4), broke: make(chan struct{})}
	if !stdout {
		s.state = stReady
	}
	return s
}

// Events of a stream at start.
type (
	startupDone       struct{} // both environments dumped (stdout)
	readyRecord       string   // "PID STARTTIME" of the helper's shell
	unsupportedRecord string   // why the container cannot host a helper
)

// runBudget counts what one run printed on both streams: past
// maxRunOutput, over is closed (the run is killed); past maxRunOutput +
// maxAfterKill the stream that sees it breaks the protocol.
type runBudget struct {
	n    atomic.Int64
	over chan struct{}
	once sync.Once
}

func newRunBudget() *runBudget { return &runBudget{over: make(chan struct{})} }

// add counts n more bytes and reports whether the run went past what it
// may print even after its kill.
func (b *runBudget) add(n int) bool {
	total := b.n.Add(int64(n))
	if total > maxRunOutput {
		b.once.Do(func() { close(b.over) })
	}
	return total > maxRunOutput+maxAfterKill
}

// expect arms the stream for the run of tok: what arrives from now on is
// that run's, up to its end mark, counted in budget.
func (s *stream) expect(tok string, budget *runBudget) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = stData
	s.budget = budget
	s.out, s.tail, s.rec = nil, s.tail[:0], s.rec[:0]
	s.end = append(append([]byte{mark}, tok...), ' ')
	if !s.stdout {
		s.end[len(s.end)-1] = '\n'
	}
}

// idle marks stderr ready for runs, once the helper is ready (what it said
// before is dropped).
func (s *stream) idle() {
	s.mu.Lock()
	if s.state == stReady {
		s.state = stIdle
	}
	s.mu.Unlock()
}

// takeEnv hands over the environment dumps once, and lets go of every
// buffer of the start: a helper holds only what a run needs for its life.
func (s *stream) takeEnv() [2][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	env := s.env
	s.env, s.rec = [2][]byte{}, nil
	return env
}

// failed returns the stream's protocol error, if any.
func (s *stream) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Write implements io.Writer. It never blocks: an event finds room in its
// channel (at most one per state change, read by the helper before it
// arms the next). A protocol error fails this write and every later one.
func (s *stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for len(p) > 0 && s.err == nil {
		p = s.step(p)
	}
	if s.err != nil {
		return 0, s.err
	}
	return n, nil
}

// ReadFrom implements io.ReaderFrom: the session's copy of the helper's
// output into the stream (io.Copy) reads through this 4 KiB buffer
// instead of allocating 32 KiB per stream and helper for its life.
func (s *stream) ReadFrom(r io.Reader) (int64, error) {
	var buf [4096]byte
	var total int64
	for {
		n, err := r.Read(buf[:])
		if n > 0 {
			if _, werr := s.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// fail records a protocol error (the first one).
func (s *stream) fail(format string, args ...any) {
	s.failWith(fmt.Errorf("%w: "+format, append([]any{errProtocol}, args...)...))
}

// failWith records err as the stream's error (the first one): every later
// write fails with it, which ends the session's copy of the stream.
func (s *stream) failWith(err error) {
	if s.err == nil {
		s.err = err
		close(s.broke)
	}
}

// send hands an event to the helper without blocking; a full channel means
// the helper wrote records nobody asked for.
func (s *stream) send(e any) {
	select {
	case s.event <- e:
	default:
		s.fail("records out of turn")
	}
}

// step consumes a prefix of p and returns the rest.
func (s *stream) step(p []byte) []byte {
	switch s.state {
	case stEnv0, stEnv1:
		s.rec = append(s.rec, p...)
		if u := []byte("\x1eunsupported "); s.state == stEnv0 && bytes.HasPrefix(s.rec, u) {
			// The helper cannot run here (no cat, no /proc): one record.
			if i := bytes.IndexByte(s.rec, '\n'); i >= 0 {
				s.state = stIdle
				s.send(unsupportedRecord(s.rec[len(u):i]))
			} else if len(s.rec) > maxLine {
				s.fail("a record of over %d bytes: %q", maxLine, cut(s.rec))
			}
			return nil
		}
		want := []byte{mark, 'e', '0' + byte(s.state), '\n'}
		i := bytes.Index(s.rec, want)
		if i < 0 {
			if len(s.rec) > maxEnv+len(want) {
				s.rec = nil
				s.failWith(errEnvTooLarge)
			}
			return nil
		}
		s.env[s.state] = bytes.Clone(s.rec[:i])
		rest := bytes.Clone(s.rec[i+len(want):])
		s.rec = nil // the start's largest buffer: let it go
		if s.state++; s.state == stReady {
			s.send(startupDone{})
		}
		return rest
	case stReady:
		if !s.stdout {
			if s.noise += len(p); s.noise > maxStartupNoise {
				s.fail("%d bytes on stderr before it was ready", s.noise)
			}
			return nil
		}
		return s.line(p)
	case stData:
		return s.data(p)
	case stStatus:
		return s.line(p)
	}
	s.fail("%q written outside a run", cut(p))
	return nil
}

// line collects a record (the mark, fields, "\n") and handles it.
func (s *stream) line(p []byte) []byte {
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		if s.rec = append(s.rec, p...); len(s.rec) > maxLine {
			s.fail("a record of over %d bytes: %q", maxLine, cut(s.rec))
		}
		return nil
	}
	rec := string(append(s.rec, p[:i]...))
	s.rec = s.rec[:0]
	switch {
	case s.state == stStatus:
		s.state = stIdle
		s.send(&frame{data: s.out, status: rec})
		s.out = nil
	case strings.HasPrefix(rec, "\x1eready "):
		s.state = stIdle
		s.send(readyRecord(strings.TrimPrefix(rec, "\x1eready ")))
	default:
		s.fail("unexpected record %q", cut([]byte(rec)))
	}
	return p[i+1:]
}

// data takes a run's output up to its end mark: the first
// runtime.MaxOutputBytes bytes are kept, the rest is read and dropped (the
// command is never blocked on its output, as by E2's limit writer).
func (s *stream) data(p []byte) []byte {
	if s.budget != nil && s.budget.add(len(p)) {
		s.fail("a run printed over %d KiB and went on after it was killed", (maxRunOutput+maxAfterKill)>>10)
		return nil
	}
	in := p
	if len(s.tail) > 0 {
		in = append(s.tail, p...)
	}
	if i := bytes.Index(in, s.end); i >= 0 {
		s.keep(in[:i])
		rest := bytes.Clone(in[i+len(s.end):])
		s.tail = s.tail[:0]
		if s.stdout {
			s.state = stStatus
			return rest
		}
		s.state = stIdle
		s.send(&frame{data: s.out})
		s.out = nil
		return rest
	}
	// The last len(end)-1 bytes may begin the mark: kept for the next write.
	at := max(0, len(in)-(len(s.end)-1))
	s.keep(in[:at])
	s.tail = append(make([]byte, 0, len(s.end)), in[at:]...)
	return nil
}

// keep appends to the run's output what fits under the limit.
func (s *stream) keep(b []byte) {
	if room := runtime.MaxOutputBytes - len(s.out); room > 0 {
		s.out = append(s.out, b[:min(len(b), room)]...)
	}
}

// cut bounds a record quoted in an error or a log line (bound.Cut).
func cut(b []byte) string { return bound.Cut(string(b), 64) }
