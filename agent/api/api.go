// Package api serves the agent's HTTP API: /pods (a v1.PodList like the
// kubelet's /pods) and /pods/{namespace}/{name} (one v1.Pod), /healthz
// (with ?verbose: the reason and the build's version), /version (the
// build's version.Info), the kubelet's probe metrics on /metrics/probes
// (spec X3), the runtime's metrics on /metrics, /events (and the
// health-event log, /events?type=transition), /manifests (the
// manifests rejected and skipped), /debug/scheduler and the status page at
// / (package statuspage), from a server that bounds itself (NewServer,
// Listen: timeouts, a header cap, a cap on connections).
package api

import (
	"context"
	"encoding/json"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/guards"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/agent/statuspage"
	"github.com/probed/probed/internal/version"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/runtime/redact"
)

// PodLister is what the API reads pods from: their names, then one copy at
// a time, so that no request holds a copy of every pod.
type PodLister interface {
	// PodNames returns the namespace and name of every pod, sorted by
	// namespace and name.
	PodNames() []types.NamespacedName
	// PodByName returns a copy of the pod with its current status; false
	// when there is no such pod (or no longer).
	PodByName(namespace, name string) (*v1.Pod, bool)
}

// The bounds of GET /pods (docs/operations.md, "Bounds"): its answer is
// written one pod at a time, so one request holds one pod's copy and JSON,
// whatever the number of pods; these bound how many are written at once and
// how long a reader may stall one.
const (
	// DefaultMaxPodLists is how many GET /pods answers are written at once.
	DefaultMaxPodLists = 4
	// PodListWait is how long a GET /pods over DefaultMaxPodLists waits for
	// its turn before it is answered 503 Service Unavailable with
	// Retry-After: 1.
	PodListWait = 2 * time.Second
	// PodListStall is how long a reader of GET /pods may take nothing
	// before its answer is cut: the write deadline moves on by this much
	// with each pod written (a reader that keeps reading may take longer
	// than the server's write timeout for a long list).
	PodListStall = 10 * time.Second
)

// Options configure the handler.
type Options struct {
	Pods PodLister
	// ProbeMetrics is the registry of prober_probe_total and
	// prober_probe_duration_seconds, served on /metrics/probes (X3).
	ProbeMetrics prometheus.Gatherer
	// Metrics is the runtime's registry, served on /metrics.
	Metrics prometheus.Gatherer
	// Events, when set, are served on /events.
	Events *events.Recorder
	// Transitions, when set, is the health-event log served on
	// /events?type=transition.
	Transitions *events.Transitions
	// Debug, when set, returns the scheduler and pool state for
	// /debug/scheduler.
	Debug func() any
	// Healthy, when set, decides /healthz (nil: always ok).
	Healthy func() error
	// History, when set, serves GET /pods/{namespace}/{name}/probes.
	History func(namespace, name string) (history.PodHistory, bool)
	// Manifests, when set, serves GET /manifests: the manifests rejected
	// and skipped (source.Report, its JSON as docs/operations.md shows).
	Manifests func() source.Report
	// Guards, when set, serves GET /guards: what cluster mode's guards
	// hold back now (guards.Report).
	Guards func() guards.Report
	// Version is the build served on GET /version and in
	// /healthz?verbose; the zero value: version.Get().
	Version version.Info
	// MaxPodLists bounds the GET /pods answers written at once; zero:
	// DefaultMaxPodLists. PodListWait is how long a request over it waits
	// for its turn; zero: PodListWait (the constant).
	MaxPodLists int
	PodListWait time.Duration
	// Page, when set with History, serves the status page (package
	// statuspage) at /. Its Pods, Probes, Events and Metrics are this API's
	// own when nil: the page shows what the JSON endpoints serve, redacted
	// alike.
	Page *statuspage.Options
}

// New returns the API's handler.
func New(opts Options) http.Handler {
	mux := http.NewServeMux()
	if opts.Version == (version.Info{}) {
		opts.Version = version.Get()
	}
	// /healthz answers "ok" (200) or the reason (503), as probes and
	// scripts compare it; ?verbose (the API server's word for details)
	// adds a line with the build: "probed v1.2.3 (commit …; go1.26.0
	// linux/amd64)". The status code is the same either way.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		body, code := "ok", http.StatusOK
		if opts.Healthy != nil {
			if err := opts.Healthy(); err != nil {
				body, code = err.Error(), http.StatusServiceUnavailable
			}
		}
		if r.URL.Query().Has("verbose") {
			body += "\nprobed " + opts.Version.String() + "\n"
		} else if code != http.StatusOK {
			body += "\n" // as http.Error writes it
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, opts.Version)
	})
	if opts.MaxPodLists <= 0 {
		opts.MaxPodLists = DefaultMaxPodLists
	}
	if opts.PodListWait <= 0 {
		opts.PodListWait = PodListWait
	}
	lists := make(chan struct{}, opts.MaxPodLists)
	mux.HandleFunc("GET /pods", func(w http.ResponseWriter, r *http.Request) {
		if !takeTurn(r.Context(), lists, opts.PodListWait) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many GET /pods at once; retry", http.StatusServiceUnavailable)
			return
		}
		defer func() { <-lists }()
		writePodList(w, opts.Pods)
	})
	mux.HandleFunc("GET /pods/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		p, ok := opts.Pods.PodByName(r.PathValue("namespace"), r.PathValue("name"))
		if !ok {
			http.Error(w, "pod not found", http.StatusNotFound)
			return
		}
		redactPod(p)
		p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
		writeJSON(w, p)
	})
	if opts.History != nil {
		mux.HandleFunc("GET /pods/{namespace}/{name}/probes", func(w http.ResponseWriter, r *http.Request) {
			h, ok := opts.History(r.PathValue("namespace"), r.PathValue("name"))
			if !ok {
				http.Error(w, "pod not found", http.StatusNotFound)
				return
			}
			writeJSON(w, h)
		})
	}
	if opts.Manifests != nil {
		mux.HandleFunc("GET /manifests", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, opts.Manifests())
		})
	}
	if opts.Guards != nil {
		mux.HandleFunc("GET /guards", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, opts.Guards())
		})
	}
	if opts.Page != nil && opts.History != nil {
		page := *opts.Page
		if page.Pods == nil {
			page.Pods = redactedPods(opts.Pods)
		}
		if page.Pod == nil {
			page.Pod = func(namespace, name string) (*v1.Pod, bool) {
				p, ok := opts.Pods.PodByName(namespace, name)
				if ok {
					redactPod(p)
				}
				return p, ok
			}
		}
		if page.Probes == nil {
			page.Probes = opts.History
		}
		if page.Events == nil && opts.Events != nil {
			page.Events = opts.Events.List
		}
		if page.Metrics == nil {
			page.Metrics = opts.Metrics
		}
		statuspage.New(page).Register(mux)
	}
	if opts.ProbeMetrics != nil {
		mux.Handle("GET /metrics/probes", promhttp.HandlerFor(opts.ProbeMetrics, promhttp.HandlerOpts{}))
	}
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Metrics, promhttp.HandlerOpts{}))
	}
	if opts.Events != nil {
		mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) { serveEvents(w, r, opts) })
	}
	if opts.Debug != nil {
		mux.HandleFunc("GET /debug/scheduler", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, opts.Debug())
		})
	}
	return mux
}

// serveEvents is GET /events: the recorded events ({"events": [...]},
// oldest first), only those of one type with ?type=Normal or
// ?type=Warning, and with ?type=transition the health-event log instead
// (events.TransitionList; with ?since=N only the entries after Seq N: what
// `probed events --watch` polls).
func serveEvents(w http.ResponseWriter, r *http.Request, opts Options) {
	q := r.URL.Query()
	switch typ := q.Get("type"); typ {
	case "":
		writeJSON(w, map[string]any{"events": opts.Events.List()})
	case v1.EventTypeNormal, v1.EventTypeWarning:
		list := []events.Event{}
		for _, e := range opts.Events.List() {
			if e.Type == typ {
				list = append(list, e)
			}
		}
		writeJSON(w, map[string]any{"events": list})
	case "transition":
		if opts.Transitions == nil {
			http.Error(w, "this agent keeps no health-event log", http.StatusNotFound)
			return
		}
		var since uint64
		if s := q.Get("since"); s != "" {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				http.Error(w, "since: want the seq of the last entry seen, a non-negative integer", http.StatusBadRequest)
				return
			}
			since = n
		}
		list, last := opts.Transitions.Since(since)
		writeJSON(w, events.TransitionList{Transitions: list, Last: last})
	default:
		http.Error(w, "type: want Normal, Warning or transition", http.StatusBadRequest)
	}
}

// redactedPods yields the pods as /pods serves them, one copy at a time,
// redacted (redactPod; the lister's copies are the caller's to change).
func redactedPods(l PodLister) iter.Seq[*v1.Pod] {
	return func(yield func(*v1.Pod) bool) {
		for _, n := range l.PodNames() {
			p, ok := l.PodByName(n.Namespace, n.Name)
			if !ok {
				continue // gone meanwhile
			}
			redactPod(p)
			if !yield(p) {
				return
			}
		}
	}
}

// takeTurn takes a slot of turns, waiting at most wait (or until ctx
// ends); false when it got none.
func takeTurn(ctx context.Context, turns chan struct{}, wait time.Duration) bool {
	select {
	case turns <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case turns <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// writePodList writes GET /pods: a v1.PodList as writeJSON would write it
// (indented), one item at a time, so that the memory it takes is one
// pod's, not the list's; each pod written moves the connection's write
// deadline PodListStall on, and a write that fails (the reader stalled or
// gone) ends it.
func writePodList(w http.ResponseWriter, l PodLister) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/json")
	write := func(s string) bool {
		_, err := io.WriteString(w, s)
		return err == nil
	}
	if !write("{\n  \"kind\": \"PodList\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n  \"items\": [") {
		return
	}
	sep := "\n    "
	for p := range redactedPods(l) {
		b, err := json.MarshalIndent(p, "    ", "  ")
		if err != nil {
			continue // API types always marshal
		}
		_ = rc.SetWriteDeadline(time.Now().Add(PodListStall))
		if !write(sep) || !write(string(b)) {
			return
		}
		sep = ",\n    "
	}
	end := "]\n}\n"
	if sep != "\n    " {
		end = "\n  ]\n}\n"
	}
	write(end)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Redacted replaces a secret value in /pods: runtime/redact's mask, the
// one every output of probed uses.
const Redacted = redact.Mask

// redactAnnotation hides secrets in the probed.io/probes annotation by the
// rule the spec's probes get (redactAction): in each element, the httpGet
// path (query values, credentials) and header values (redact.Header), the
// exec command (redact.Secrets.Command), the plugin parameters (a
// secret-named one hidden whole: a redis password, an API token), and every
// other string of the element through the free-text rule (a plugin's
// "path" with a query, a "header" with "Authorization: Bearer …"), with the
// named container's env values and the secret-named parameters as known
// secrets. The annotation is a tenant's text, shown on /pods, the pod's
// JSON and the status page: a value that does not parse as a JSON list of
// objects is hidden whole.
func redactAnnotation(p *v1.Pod, v string) string {
	var probes []map[string]any
	dec := json.NewDecoder(strings.NewReader(v))
	dec.UseNumber() // numbers are shown as written
	if err := dec.Decode(&probes); err != nil {
		return Redacted
	}
	for _, pr := range probes {
		plugin, _ := pr["plugin"].(map[string]any)
		params, _ := plugin["params"].(map[string]any)
		strs := make(map[string]string, len(params))
		for k, v := range params {
			if s, ok := v.(string); ok {
				strs[k] = s
			}
		}
		name, _ := pr["container"].(string)
		secrets := secretsOf(p, name, strs)
		if get, ok := pr["httpGet"].(map[string]any); ok {
			if path, ok := get["path"].(string); ok {
				get["path"] = secrets.URL(path)
			}
			headers, _ := get["httpHeaders"].([]any)
			for _, h := range headers {
				if h, ok := h.(map[string]any); ok && h["value"] != nil {
					name, _ := h["name"].(string)
					value, ok := h["value"].(string)
					if !ok { // not a string: invalid, and hidden unless plain
						value = Redacted
					}
					h["value"] = redact.Header(name, value)
				}
			}
		}
		if exec, ok := pr["exec"].(map[string]any); ok {
			if cmd, ok := exec["command"].([]any); ok {
				args := make([]string, len(cmd))
				for i, a := range cmd {
					args[i], _ = a.(string)
				}
				for i, a := range secrets.Command(args) {
					if _, ok := cmd[i].(string); ok {
						cmd[i] = a
					}
				}
			}
		}
		secrets.Value(pr)
	}
	out, err := json.Marshal(probes)
	if err != nil {
		return Redacted
	}
	return string(out)
}

// secretsOf returns the known secrets of the named container of p (nil
// when there is none) and of the given plugin parameters.
func secretsOf(p *v1.Pod, container string, params map[string]string) redact.Secrets {
	for _, cs := range [][]v1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == container {
				return redact.ForContainer(&cs[i], params)
			}
		}
	}
	return redact.ForContainer(nil, params)
}

// lastApplied is the annotation in which kubectl keeps a copy of the whole
// applied manifest (env values and probe headers included); manifests
// exported from a cluster carry it.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// redact removes what /pods must not show (runtime/redact's rule): the
// values of environment variables, of probe and hook headers that may carry
// credentials, URL query values and credentials in probe and hook paths,
// credentials and env values in commands and arguments, and kubectl's copy
// of the manifest that holds them too.
func redactPod(p *v1.Pod) {
	if _, ok := p.Annotations[lastApplied]; ok {
		p.Annotations[lastApplied] = Redacted
	}
	if v, ok := p.Annotations[customprobe.Annotation]; ok {
		p.Annotations[customprobe.Annotation] = redactAnnotation(p, v)
	}
	for _, cs := range [][]v1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range cs {
			c := &cs[i]
			secrets := redact.ForContainer(c, nil)
			redactContainer(secrets, c.Env, &c.Command, &c.Args)
			for _, pr := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if pr != nil {
					redactAction(secrets, pr.Exec, pr.HTTPGet)
				}
			}
			if c.Lifecycle != nil {
				for _, h := range []*v1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
					if h != nil {
						redactAction(secrets, h.Exec, h.HTTPGet)
					}
				}
			}
		}
	}
	for i := range p.Spec.EphemeralContainers {
		c := &p.Spec.EphemeralContainers[i].EphemeralContainerCommon
		secrets := redact.ForContainer(&v1.Container{Env: c.Env}, nil)
		redactContainer(secrets, c.Env, &c.Command, &c.Args)
	}
}

// redactContainer hides env values and redacts the command and arguments
// (before the env values are masked: secrets knows them).
func redactContainer(secrets redact.Secrets, env []v1.EnvVar, command, args *[]string) {
	*command = secrets.Command(*command)
	*args = secrets.Command(*args)
	for j := range env {
		if env[j].Value != "" {
			env[j].Value = Redacted
		}
	}
}

// redactAction redacts the exec command or the httpGet path and headers
// of a probe or lifecycle hook.
func redactAction(secrets redact.Secrets, exec *v1.ExecAction, get *v1.HTTPGetAction) {
	if exec != nil {
		exec.Command = secrets.Command(exec.Command)
	}
	secrets.HTTPGet(get)
}
