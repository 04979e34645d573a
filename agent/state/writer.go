package state

import (
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/store"
)

// Default back-off of a Writer whose writes fail.
const (
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = time.Minute
	// reminderAt is how often a write that keeps failing at the longest
	// back-off is logged again.
	reminderAt = 10 * time.Minute
)

// WriterOptions configure NewWriter. The zero value is ready to use.
type WriterOptions struct {
	// Clock; nil: the real clock.
	Clock clock.PassiveClock
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// MinBackoff is the wait after the first failed write, doubled after
	// each further failure up to MaxBackoff; defaults 1 s and 1 min.
	MinBackoff, MaxBackoff time.Duration
}

// Writer saves the state file of one directory (Save) and backs off while
// writes fail: a read-only or full state directory costs one attempt per
// back-off period, not one per state interval, and a few log lines, not
// one ERROR a second.
//
// After the first failure, no write is attempted for MinBackoff; each
// further failure doubles the wait, up to MaxBackoff. The first failure is
// logged (ERROR), then each failure that makes the wait grow, then at the
// longest wait once every 10 minutes; the first write that succeeds again
// is logged (INFO) with the number of failed attempts and how long writes
// failed. Its methods are safe for concurrent use.
type Writer struct {
	dir  string
	opts WriterOptions

	mu        sync.Mutex
	failures  int           // consecutive failed attempts
	since     time.Time     // first failure of the run
	backoff   time.Duration // wait after the last failure
	retryAt   time.Time     // no attempt before (unless forced)
	loggedAt  time.Time     // last failure logged
	loggedFor time.Duration // backoff when it was logged
}

// NewWriter returns a Writer for the state file of dir.
func NewWriter(dir string, opts WriterOptions) *Writer {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	return &Writer{dir: dir, opts: opts}
}

// Save writes pods to the state file (see Save) and reports whether it did.
// While a failed write's back-off runs it attempts nothing and returns
// false, unless force is set (the final write at shutdown, which is always
// attempted and whose failure is always logged).
func (w *Writer) Save(pods []store.SavedPod, force bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.opts.Clock.Now()
	if w.failures > 0 && !force && now.Before(w.retryAt) {
		return false
	}
	err := Save(w.dir, pods, now)
	log := w.opts.Logger
	if err == nil {
		if w.failures > 0 {
			log.Info("state written again", "dir", w.dir, "failedAttempts", w.failures, "failingFor", now.Sub(w.since).Round(time.Second).String())
		}
		w.failures, w.backoff = 0, 0
		return true
	}
	if w.failures == 0 {
		w.since, w.backoff = now, w.opts.MinBackoff
	} else {
		w.backoff = min(2*w.backoff, w.opts.MaxBackoff)
	}
	w.failures++
	w.retryAt = now.Add(w.backoff)
	if force || w.failures == 1 || w.backoff > w.loggedFor || now.Sub(w.loggedAt) >= reminderAt {
		log.Error("saving state failed; backing off", "dir", w.dir, "err", err,
			"failedAttempts", w.failures, "nextAttemptIn", w.backoff.String())
		w.loggedAt, w.loggedFor = now, w.backoff
	}
	return false
}
