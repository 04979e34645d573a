// Package statuspage serves the agent's status page: the HTML an operator
// opens at / of the agent's API listener instead of reading JSON. It shows
// the pods, failing first, with each container's probes (type, kind,
// target, last result, consecutive results against the threshold, the last
// failure and a sparkline of the last results and durations), one page per
// pod with its full probe history and events, a header with the scheduler's
// lag p99, backlog, pool busy per lane, plugin states and, in cluster mode,
// the API server connection and pending condition writes, and the manifest
// documents the pod source rejected. Filters (failing only, namespace, text)
// are query parameters applied on the server.
//
// The page reads the same Go values the JSON endpoints serve (GET /pods,
// /pods/{namespace}/{name}/probes, /events, /debug/scheduler, /metrics,
// /manifests) and links every row to the JSON it came from. It is rendered
// with html/template from files embedded in the binary: no external asset,
// no JavaScript framework. One small script (static/refresh.js) replaces
// the page's content in place every few seconds; with JavaScript off the page
// is complete and a reload refreshes it. Every value from a pod, a probe, a
// plugin or a manifest is shown through output.Printable (control
// characters escaped as `probed status` escapes them: no raw ESC reaches
// the page), then escaped as text by html/template, and the
// Content-Security-Policy forbids inline scripts and event handlers as a
// second wall.
package statuspage

import (
	"embed"
	"github.com/probed/probed/agent/guards"
	"html/template"
	"io/fs"
	"iter"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime/pluginhost"
)

//go:embed templates/*.html static/*
var assets embed.FS

// DefaultRefresh is how often the page's script refreshes the content when
// the query has no refresh parameter.
const DefaultRefresh = 5 * time.Second

// Options are what the page reads. Pods and Probes are required; every
// other source may be nil, and its part of the page is then left out.
type Options struct {
	// Pods yields the pods with their statuses, redacted as GET /pods
	// serves them, one copy at a time (the page keeps a row of each, not
	// the pods).
	Pods iter.Seq[*v1.Pod]
	// Pod returns one pod as Pods would yield it, false when there is no
	// such pod; nil: the pod is looked for in Pods.
	Pod func(namespace, name string) (*v1.Pod, bool)
	// Probes returns the probe histories of a pod and its refused probes:
	// the body of GET /pods/{namespace}/{name}/probes; false when there is
	// no such pod.
	Probes func(namespace, name string) (history.PodHistory, bool)
	// Events returns the agent's recent events, oldest first (GET /events).
	Events func() []events.Event
	// Scheduler returns the scheduler's and pools' figures (GET
	// /debug/scheduler: manager.StatsOf); false when unknown.
	Scheduler func() (manager.Stats, bool)
	// Metrics is the runtime's registry (GET /metrics); the lag p99 is read
	// from its probed_scheduler_lag_seconds histogram.
	Metrics prometheus.Gatherer
	// Plugins returns the plugins' states (pluginhost.Host.Status).
	Plugins func() []pluginhost.PluginStatus
	// Cluster returns the API server figures; nil in manifest mode.
	Cluster func() Cluster
	// Manifests returns the rejected manifest documents, oldest first (the
	// "rejected" list of GET /manifests, source.Report); nil: no such
	// section (cluster mode).
	Manifests func() []source.Rejection
	// Declared returns the pod's probes as the agent worked them out where
	// the pod came in (reconciler.Probes: podprobes.View, the mode's policy
	// applied): the probes probed runs, each with where it is declared,
	// and the refused ones with why. False: the agent does not know the
	// pod (its probes' histories are listed alone). Nil: the view is worked
	// out from the pod with manifest mode's policy (the spec's probes and
	// the annotation's).
	Declared func(pod *v1.Pod) (*podprobes.View, bool)
	// HistorySize is the number of results kept per probe (the agent's
	// --history): a run of results that fills it is shown as "≥n".
	HistorySize int
	// Now is the clock for ages; nil: time.Now.
	Now func() time.Time
	// Logger for template errors; nil: slog.Default().
	Logger *slog.Logger
}

// Cluster are the API server figures of cluster mode.
type Cluster struct {
	// Node is the node whose pods are probed.
	Node string
	// Synced: the informer's first list of the node's pods has arrived
	// (podsource.Source.HasSynced; it stays true during a later outage).
	Synced bool
	// WritesFailing: the last readiness-gate condition write failed for want
	// of an answer from the API server and writes are retried with backoff
	// (gate.Writer.WritesFailing).
	WritesFailing bool
	// WritesPending counts the gated pods whose condition may still need a
	// write (gate.Writer.WritesPending).
	WritesPending int
	// ConditionType is the readiness-gate condition probed owns.
	ConditionType string
	// Held is what the guards hold back now (GET /guards).
	Held []guards.Held
}

// Page serves the status page.
type Page struct {
	opts  Options
	index *template.Template
	pod   *template.Template
	files http.Handler
}

// New returns the page. It panics when Pods or Probes is nil (a wiring
// error) or an embedded template does not parse (a build error the tests
// catch).
func New(opts Options) *Page {
	if opts.Pods == nil || opts.Probes == nil {
		panic("statuspage: Options.Pods and Options.Probes are required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	static, err := fs.Sub(assets, "static")
	if err != nil {
		panic(err)
	}
	funcs := template.FuncMap{"ms": formatMS, "ago": func(t time.Time) string { return ago(opts.Now(), t) }, "stamp": stamp,
		"resultClass": func(result string) string { return resultClasses[result] }, "newestFirst": newestFirst,
		"printable": printableFunc, "breakable": breakable}
	parse := func(page string) *template.Template {
		t := template.Must(template.New(page).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/parts.html", "templates/"+page))
		printableActions(t)
		return t
	}
	return &Page{opts: opts, index: parse("index.html"), pod: parse("pod.html"),
		files: http.StripPrefix("/static/", http.FileServerFS(static))}
}

// Register adds the page's routes to mux: GET / (the index, with the
// query parameters failing=1, namespace=NS, q=TEXT and refresh=SECONDS),
// GET /pod/{namespace}/{name} (one pod) and GET /static/ (the stylesheet
// and the refresh script).
func (p *Page) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", p.serveIndex)
	mux.HandleFunc("GET /pod/{namespace}/{name}", p.servePod)
	mux.HandleFunc("GET /static/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // files only, no listing
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		p.files.ServeHTTP(w, r)
	})
}

// contentSecurityPolicy allows the page's own stylesheet and script and
// nothing else: no inline script, no event handler attribute, no
// external request.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func (p *Page) serveIndex(w http.ResponseWriter, r *http.Request) {
	f := parseFilter(r)
	p.render(w, http.StatusOK, p.index, p.indexView(f))
}

func (p *Page) servePod(w http.ResponseWriter, r *http.Request) {
	v, ok := p.podView(r.PathValue("namespace"), r.PathValue("name"), refreshOf(r))
	status := http.StatusOK
	if !ok {
		status = http.StatusNotFound
	}
	p.render(w, status, p.pod, v)
}

func (p *Page) render(w http.ResponseWriter, status int, t *template.Template, data any) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := t.ExecuteTemplate(w, "layout", data); err != nil {
		p.opts.Logger.Error("status page: rendering", "err", err)
	}
}

// refreshOf reads the refresh query parameter: seconds between in-page
// refreshes, 0 for none; DefaultRefresh when absent or invalid; at most an
// hour.
func refreshOf(r *http.Request) int {
	s := r.URL.Query().Get("refresh")
	n, err := strconv.Atoi(s)
	if s == "" || err != nil || n < 0 {
		return int(DefaultRefresh / time.Second)
	}
	return min(n, 3600)
}

// newestFirst returns the records newest first (the history keeps them
// oldest first).
func newestFirst(recs []history.Record) []history.Record {
	out := make([]history.Record, len(recs))
	for i, r := range recs {
		out[len(recs)-1-i] = r
	}
	return out
}
