package statuspage

import (
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/probed/probed/runtime/pluginhost"
)

// lagMetric is the scheduler's lag histogram (manager's runtime metrics).
const lagMetric = "probed_scheduler_lag_seconds"

// headerView is the page's header: the runtime's figures.
type headerView struct {
	HasScheduler bool
	Entries      int
	Running      int
	Backlog      int
	Lanes        []laneView
	// LagP99 is the 99th percentile of the scheduler's lag over every lane
	// since the agent started; HasLag false when nothing ran yet.
	LagP99  time.Duration
	HasLag  bool
	Plugins []pluginhost.PluginStatus
	// ShowPlugins: plugin states are known (possibly none configured).
	ShowPlugins bool
	Cluster     *Cluster
}

// laneView is one pool lane: busy of capacity, and its backlog.
type laneView struct {
	Name                    string
	Busy, Capacity, Backlog int
}

func (p *Page) header() headerView {
	var h headerView
	if p.opts.Scheduler != nil {
		if st, ok := p.opts.Scheduler(); ok {
			h.HasScheduler = true
			h.Entries, h.Running = st.Entries, st.Running
			for name, ps := range st.Pools {
				h.Lanes = append(h.Lanes, laneView{Name: name, Busy: ps.Busy, Capacity: ps.Capacity, Backlog: st.Backlog[name]})
			}
			for _, n := range st.Backlog {
				h.Backlog += n
			}
			sort.Slice(h.Lanes, func(i, j int) bool { return h.Lanes[i].Name < h.Lanes[j].Name })
		}
	}
	if p.opts.Metrics != nil {
		if mfs, err := p.opts.Metrics.Gather(); err == nil {
			h.LagP99, h.HasLag = histogramQuantile(0.99, mfs, lagMetric)
			h.LagP99 = h.LagP99.Round(time.Microsecond)
		}
	}
	if p.opts.Plugins != nil {
		h.ShowPlugins = true
		h.Plugins = p.opts.Plugins()
	}
	if p.opts.Cluster != nil {
		c := p.opts.Cluster()
		h.Cluster = &c
	}
	return h
}

// histogramQuantile is PromQL's histogram_quantile over the named
// histogram, its series (lanes) summed: the bucket holding the q-th
// observation, interpolated linearly within it; the highest finite bound
// when it falls in the +Inf bucket. False when the histogram is absent or
// empty.
func histogramQuantile(q float64, mfs []*dto.MetricFamily, name string) (time.Duration, bool) {
	counts := map[float64]uint64{} // upper bound -> cumulative count, summed over series
	var total uint64
	for _, mf := range mfs {
		if mf.GetName() != name || mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			total += h.GetSampleCount()
			for _, b := range h.GetBucket() {
				counts[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
	}
	if total == 0 {
		return 0, false
	}
	bounds := make([]float64, 0, len(counts))
	for b := range counts {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for _, b := range bounds {
		c := counts[b]
		if float64(c) >= rank {
			if math.IsInf(b, 1) {
				return seconds(lower), true
			}
			if c == below {
				return seconds(b), true
			}
			return seconds(lower + (b-lower)*(rank-float64(below))/float64(c-below)), true
		}
		lower, below = b, c
	}
	return seconds(lower), true // observations above the highest finite bound
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
