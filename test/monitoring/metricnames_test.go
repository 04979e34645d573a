package monitoring

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// promqlStrings are PromQL string literals ("...", '...', `...`).
	promqlStrings = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	// labelMatchers are {...} selectors (no braces remain inside once the
	// strings are gone); ranges are [5m], [$__rate_interval], [1h:5m].
	labelMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	ranges        = regexp.MustCompile(`\[[^\[\]]*\]`)
	// labelLists are the label lists of aggregations and vector matching.
	labelLists = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	// promqlTokens are numbers (1, 0.99, 1e3, 5m, 0x1f, Inf) and identifiers
	// with what follows them, to tell a function call from a metric name.
	promqlTokens = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?`)
	// grafanaVariables are $name, ${name} and ${name:format}.
	grafanaVariables = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
)

// promqlKeywords are identifiers that are not metric names when not called.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "offset": true, "bool": true, "by": true, "without": true,
	"on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true,
	"start": true, "end": true, "atan2": true,
}

// metricNames returns the sorted metric names a PromQL expression selects
// (an identifier not called as a function, outside strings, label
// matchers, ranges and label lists). Grafana variables count as text.
func metricNames(expr string) []string {
	s := grafanaVariables.ReplaceAllString(expr, "1")
	s = promqlStrings.ReplaceAllString(s, `""`)
	for prev := ""; prev != s; {
		prev = s
		s = labelMatchers.ReplaceAllString(s, " ")
	}
	s = ranges.ReplaceAllString(s, " ")
	s = labelLists.ReplaceAllString(s, " ")
	seen := map[string]bool{}
	for _, m := range promqlTokens.FindAllStringSubmatch(s, -1) {
		name, called := m[1], m[2] != ""
		if name == "" || called || promqlKeywords[strings.ToLower(name)] {
			continue
		}
		seen[name] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

var (
	selectorWithMatchers = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^{}]*)\}`)
	matcherLabel         = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// matcherLabels returns, per metric name, the label names its selectors
// in expr match on (rate(foo{a="x", b=~"y"}[5m]) → foo: a, b).
func matcherLabels(expr string) map[string][]string {
	s := grafanaVariables.ReplaceAllString(expr, "1")
	s = promqlStrings.ReplaceAllString(s, `""`)
	out := map[string][]string{}
	for _, m := range selectorWithMatchers.FindAllStringSubmatch(s, -1) {
		for _, l := range matcherLabel.FindAllStringSubmatch(m[2], -1) {
			if !slices.Contains(out[m[1]], l[1]) {
				out[m[1]] = append(out[m[1]], l[1])
			}
		}
	}
	return out
}

// labelValuesQuery splits a Grafana label_values(selector, label) variable
// query into its selector and label.
var labelValuesQuery = regexp.MustCompile(`^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

func TestMetricNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`up{job=~"probed|probed-probes"} == 0`, []string{"up"}},
		{`histogram_quantile(0.99, sum by (job, instance, lane, le) (rate(probed_scheduler_lag_seconds_bucket[5m]))) > 1`,
			[]string{"probed_scheduler_lag_seconds_bucket"}},
		{`deriv(probed_scheduler_backlog[10m]) > 0 and min_over_time(probed_scheduler_backlog[10m]) > 0`,
			[]string{"probed_scheduler_backlog"}},
		{`sum by (instance, lane) (probed_pool_busy{job=~"$job"}) / on(instance, lane) group_left sum without (x) (probed_pool_capacity) >= 9e-1`,
			[]string{"probed_pool_busy", "probed_pool_capacity"}},
		// Strings holding braces, metric-like words and variables; offsets and subqueries.
		{`rate(a_total{msg="x{y} not_a_metric", ns=~"${namespace:regex}"}[$__rate_interval] offset 5m) + max_over_time(b[1h:5m]) unless c`,
			[]string{"a_total", "b", "c"}},
		{`absent(up{job="probed"})`, []string{"up"}},
		{`sort_desc(sum by (namespace, pod) (rate(prober_probe_total{result="failed"}[5m])) > 0)`, []string{"prober_probe_total"}},
	} {
		if got := metricNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%s) = %v, want %v", c.expr, got, c.want)
		}
	}
	got := matcherLabels(`sum by (x) (rate(a_total{job=~"$job", msg="}{b=1", reason!="handler_error"}[5m])) / c{le="+Inf"} + d`)
	if !slices.Equal(got["a_total"], []string{"job", "msg", "reason"}) || !slices.Equal(got["c"], []string{"le"}) || len(got) != 2 {
		t.Errorf("matcherLabels = %v", got)
	}
	m := labelValuesQuery.FindStringSubmatch(`label_values(prober_probe_total{namespace=~"$namespace"}, pod)`)
	if m == nil || m[1] != `prober_probe_total{namespace=~"$namespace"}` || m[2] != "pod" {
		t.Errorf("label_values split: %q", m)
	}
}
