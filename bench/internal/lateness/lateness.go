// Package lateness records the start time of every probe call per worker
// and turns them into the figures of the benchmark: lateness against each
// worker's own most punctual run, missed runs, probes executed, and the
// burstiness of the first periods after a mass AddPod.
//
// The same code runs in the benchmark process (instant handler: the
// CommandRunner records) and in the target server (TCP and HTTP: the
// server records when it accepts a probe's connection), for both
// implementations.
package lateness

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// BucketWidth is the resolution of the burst histogram.
const BucketWidth = 10 * time.Millisecond

// Recorder is safe for concurrent use. A worker's calls must not overlap
// (both implementations guarantee one run in flight per worker).
type Recorder struct {
	workers int
	base    time.Time

	// Burst histogram: starts per 10 ms from burstStart (ns since base).
	burstStart atomic.Int64
	buckets    []atomic.Int32
	burstOn    atomic.Bool

	// Window buffers: allocated by StartWindow so that they are not part of
	// the memory figures taken before it.
	win atomic.Pointer[window]

	calls atomic.Int64 // all recorded calls, any time
}

type window struct {
	start int64 // ns since base
	cap   int
	times []int32 // µs since start, workers×cap
	n     []atomic.Int32
	lost  atomic.Int64 // calls beyond cap
	stop  atomic.Bool
}

// New returns a recorder for workers workers; the burst histogram spans
// horizon from StartBurst.
func New(workers int, horizon time.Duration) *Recorder {
	return &Recorder{
		workers: workers,
		base:    time.Now(),
		buckets: make([]atomic.Int32, int(horizon/BucketWidth)+1),
	}
}

// Workers returns the number of workers.
func (r *Recorder) Workers() int { return r.workers }

// StartBurst starts the burst histogram now.
func (r *Recorder) StartBurst() {
	r.burstStart.Store(int64(time.Since(r.base)))
	r.burstOn.Store(true)
}

// StartWindow allocates room for perWorker calls per worker and starts
// recording them.
func (r *Recorder) StartWindow(perWorker int) {
	w := &window{
		start: int64(time.Since(r.base)),
		cap:   perWorker,
		times: make([]int32, r.workers*perWorker),
		n:     make([]atomic.Int32, r.workers),
	}
	r.win.Store(w)
}

// StopWindow stops recording calls in the window.
func (r *Recorder) StopWindow() {
	if w := r.win.Load(); w != nil {
		w.stop.Store(true)
	}
}

// Calls returns the number of calls recorded since New.
func (r *Recorder) Calls() int64 { return r.calls.Load() }

// Start records that worker w's probe call starts now.
func (r *Recorder) Start(w int) { r.StartAt(w, time.Now()) }

// StartAt records that worker w's probe call started at at: for times
// recorded elsewhere on this host (a target's arrival times, read after the
// window; bench/node). Calls before the window's start are not in it.
func (r *Recorder) StartAt(w int, at time.Time) {
	now := int64(at.Sub(r.base))
	r.calls.Add(1)
	if r.burstOn.Load() {
		if b := (now - r.burstStart.Load()) / int64(BucketWidth); b >= 0 && b < int64(len(r.buckets)) {
			r.buckets[b].Add(1)
		}
	}
	win := r.win.Load()
	if win == nil || win.stop.Load() || w < 0 || w >= r.workers {
		return
	}
	if now < win.start {
		return
	}
	i := win.n[w].Add(1) - 1
	if int(i) >= win.cap {
		win.lost.Add(1)
		return
	}
	win.times[w*win.cap+int(i)] = int32((now - win.start) / int64(time.Microsecond))
}

// Burstiness returns the largest number of starts in any 100 ms window
// within [0, span) of StartBurst, divided by the mean number per 100 ms
// at the expected rate (probes/s). 0 when nothing was recorded.
func (r *Recorder) Burstiness(span time.Duration, expectedPerSecond float64) (burst float64, peak int) {
	const win = int(100 * time.Millisecond / BucketWidth)
	n := min(int(span/BucketWidth), len(r.buckets))
	sum := 0
	for i := 0; i < n; i++ {
		sum += int(r.buckets[i].Load())
		if i >= win {
			sum -= int(r.buckets[i-win].Load())
		}
		peak = max(peak, sum)
	}
	mean := expectedPerSecond * 0.1
	if mean <= 0 || peak == 0 {
		return 0, peak
	}
	return float64(peak) / mean, peak
}

// Stats are the figures of one window.
type Stats struct {
	Calls          int64   `json:"calls"`            // calls in the window
	Lost           int64   `json:"lost"`             // calls beyond the per-worker buffer
	WorkersSeen    int     `json:"workers_seen"`     // workers with at least one call
	WorkersSilent  int     `json:"workers_silent"`   // selected workers with no call
	Missed         int64   `json:"missed"`           // grid periods without a call between a worker's first and last call
	Duplicates     int64   `json:"duplicates"`       // extra calls in one grid period
	LatenessP50Ms  float64 `json:"lateness_p50_ms"`  // ms
	LatenessP99Ms  float64 `json:"lateness_p99_ms"`  // ms
	LatenessP999Ms float64 `json:"lateness_p999_ms"` // ms
	LatenessMaxMs  float64 `json:"lateness_max_ms"`  // ms
	Samples        int     `json:"samples"`          // lateness samples
}

// Stats computes the window's figures over the workers for which keep
// returns true (nil: all). Lateness of a call is its offset on the
// worker's period grid (its start modulo the period) minus the offset of
// the worker's most punctual call; the grid's phase is found as the start
// of the largest gap between the offsets on the circle, so lateness is
// measured modulo one period and a run later than a whole period shows as
// a missed period instead.
func (r *Recorder) Stats(period time.Duration, keep func(w int) bool) Stats {
	var st Stats
	win := r.win.Load()
	if win == nil {
		return st
	}
	st.Lost = win.lost.Load()
	p := int64(period / time.Microsecond)
	var lat []int32
	offs := make([]int64, 0, win.cap)
	for w := 0; w < r.workers; w++ {
		if keep != nil && !keep(w) {
			continue
		}
		n := min(int(win.n[w].Load()), win.cap)
		if n == 0 {
			st.WorkersSilent++
			continue
		}
		st.WorkersSeen++
		st.Calls += int64(n)
		ts := win.times[w*win.cap : w*win.cap+n]
		offs = offs[:0]
		for _, t := range ts {
			offs = append(offs, int64(t)%p)
		}
		slices.Sort(offs)
		// The most punctual offset follows the largest circular gap.
		best, gap := offs[0], offs[0]+p-offs[n-1]
		for i := 1; i < n; i++ {
			if d := offs[i] - offs[i-1]; d > gap {
				gap, best = d, offs[i]
			}
		}
		// Lateness and grid index of each call.
		var prevK int64 = math.MinInt64
		first := true
		for _, t := range ts {
			l := ((int64(t)-best)%p + p) % p
			lat = append(lat, int32(l))
			k := (int64(t) - l - best) / p
			if !first {
				switch {
				case k == prevK:
					st.Duplicates++
				case k > prevK+1:
					st.Missed += k - prevK - 1
				}
			}
			first = false
			prevK = k
		}
	}
	st.Samples = len(lat)
	if len(lat) == 0 {
		return st
	}
	slices.Sort(lat)
	q := func(f float64) float64 {
		i := int(math.Ceil(f*float64(len(lat)))) - 1
		i = max(0, min(i, len(lat)-1))
		return float64(lat[i]) / 1000
	}
	st.LatenessP50Ms = q(0.50)
	st.LatenessP99Ms = q(0.99)
	st.LatenessP999Ms = q(0.999)
	st.LatenessMaxMs = float64(lat[len(lat)-1]) / 1000
	return st
}

// Profile returns the starts per consecutive 100 ms from StartBurst, for
// at most n windows.
func (r *Recorder) Profile(n int) []int {
	const win = int(100 * time.Millisecond / BucketWidth)
	var out []int
	for i := 0; i < n && (i+1)*win <= len(r.buckets); i++ {
		s := 0
		for j := i * win; j < (i+1)*win; j++ {
			s += int(r.buckets[j].Load())
		}
		out = append(out, s)
	}
	return out
}
