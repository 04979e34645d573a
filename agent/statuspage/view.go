package statuspage

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/agent/statusview"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/redact"
)

// filter is the index's query: failing=1, namespace=NS, q=TEXT, refresh=S.
type filter struct {
	FailingOnly bool
	Namespace   string
	Text        string
	Refresh     int
}

func parseFilter(r *http.Request) filter {
	q := r.URL.Query()
	return filter{
		FailingOnly: q.Get("failing") == "1" || q.Get("failing") == "true" || q.Get("failing") == "on",
		Namespace:   strings.TrimSpace(q.Get("namespace")),
		Text:        strings.TrimSpace(q.Get("q")),
		Refresh:     refreshOf(r),
	}
}

// layoutView is what every page's layout reads.
type layoutView struct {
	Title   string
	Refresh int // seconds; 0: the script does not refresh
	Header  headerView
}

type indexView struct {
	layoutView
	Filter     filter
	Namespaces []string
	Pods       []podRow
	Total      int // pods before filtering
	Failing    int // failing pods before filtering
	Manifests  []source.Rejection
	// ShowManifests: Options.Manifests is set (manifest mode).
	ShowManifests bool
}

type podView struct {
	layoutView
	Found       bool
	Namespace   string
	Name        string
	Pod         podRow
	Conditions  []conditionRow
	Annotations []keyValue
	Events      []events.Event
	ShowEvents  bool
}

// conditionRow is one of the pod's conditions, as kubectl describe lists
// them.
type conditionRow struct {
	Type, Status, Reason, Message string
	Since                         time.Time // lastTransitionTime
	// Stale: the probed.io/ManifestStale condition, true.
	Stale bool
}

type keyValue struct{ Key, Value string }

// podRow is one pod of the index with its probes.
type podRow struct {
	Namespace, Name, UID string
	Phase                string
	// Status is kubectl's STATUS (statusview.StatusOf): CrashLoopBackOff
	// while a container backs off, Terminating, the phase otherwise.
	Status   string
	Ready    string // ready/total containers, sidecars included
	Restarts int32
	Failing  bool
	// Stale is the message of the probed.io/ManifestStale condition when
	// it is true: the pod's manifest no longer loads and its last valid
	// version is probed (source.MarkStale); "" otherwise.
	Stale string
	// Containers are the sidecars' and containers' states, in spec order.
	Containers []containerRow
	Probes     []probeRow
	PageURL    string // this pod's page
	ProbesURL  string // GET /pods/{namespace}/{name}/probes
	JSONURL    string // GET /pods/{namespace}/{name}
	Rowspan    int    // table rows of the pod: one per probe, at least one
}

// containerRow is one container's state (statusview.ContainerState).
type containerRow struct {
	Name    string
	Sidecar bool
	// State is running, waiting, terminated or unknown; Summary says it in
	// one line at the page's time ("waiting: CrashLoopBackOff, restart in
	// 12s (back-off 20s)", "terminated: Error, exit code 137").
	State, Summary string
	// Message is the waiting or terminated state's message.
	Message         string
	Ready, Started  bool
	Restarts        int32
	LastTermination string // "Error, exit code 137 at 2026-...Z"; "" when none
}

// probeRow is one probe of one container.
type probeRow struct {
	Container string
	// State is the container's state; nil when the status does not list
	// the container. ShowState: the first row of the container's probes,
	// which shows it.
	State     *containerRow
	ShowState bool
	Type      string // liveness, readiness, startup
	Kind      string // http, tcp, grpc, exec or a plugin kind
	ExecMode  string // an exec probe's mode (history.Probe.ExecMode)
	Target    string // GET http://10.1.2.3:8080/healthz, tcp :6379, grpc :9090, plugin redis
	// Declared is where the probe is declared (its origin): spec,
	// annotation (probed.io/probes) or offloaded (probed.io/offloaded);
	// "" for a probe known only from its
	// history.
	Declared string
	// Refused says why probed does not run the probe (the view's
	// refusals: each field and what is wrong with it; or the node's probe
	// budget); "" for a probe that runs.
	Refused string
	// Last is the newest run's result (history.Record.Result); "" before
	// the first run.
	Last string
	// Cached is the worker's result after thresholds at the newest run.
	Cached      string
	Consecutive consecutive
	LastFailure *history.Record
	Spark       sparkline
	Failing     bool
	Results     []history.Record // oldest first
}

// consecutive is the run of same-outcome results at the end of a history
// against the threshold that turns the result (W10-W13): failureThreshold
// for failures, successThreshold for successes.
type consecutive struct {
	Count     int
	Outcome   string // "failures" or "successes"; "" without a counted run
	Threshold int32
	// AtLeast: every record of the ring counts, so the run may be longer.
	AtLeast bool
}

func (c consecutive) String() string {
	if c.Outcome == "" {
		return "-"
	}
	n := strconv.Itoa(c.Count)
	if c.AtLeast {
		n = "≥" + n
	}
	return fmt.Sprintf("%s/%d %s", n, c.Threshold, c.Outcome)
}

// Reached reports whether the run met its threshold.
func (c consecutive) Reached() bool { return c.Outcome != "" && int32(c.Count) >= c.Threshold }

// indexView builds the index: every pod, failing first, then filtered.
func (p *Page) indexView(f filter) indexView {
	all := p.rows()
	v := indexView{layoutView: layoutView{Title: "probed", Refresh: f.Refresh, Header: p.header()}, Filter: f, Total: len(all)}
	seen := map[string]bool{}
	for _, r := range all {
		if r.Failing {
			v.Failing++
		}
		if !seen[r.Namespace] {
			seen[r.Namespace] = true
			v.Namespaces = append(v.Namespaces, r.Namespace)
		}
		if f.matches(&r) {
			v.Pods = append(v.Pods, r)
		}
	}
	sort.Strings(v.Namespaces)
	if p.opts.Manifests != nil {
		v.ShowManifests = true
		v.Manifests = p.opts.Manifests()
	}
	return v
}

// matches applies the filter: failing only, the namespace exactly, the
// text case-insensitively in the pod's namespace/name, container names,
// probe kinds, targets and failure messages.
func (f filter) matches(r *podRow) bool {
	if f.FailingOnly && !r.Failing {
		return false
	}
	if f.Namespace != "" && r.Namespace != f.Namespace {
		return false
	}
	if f.Text == "" {
		return true
	}
	needle := strings.ToLower(f.Text)
	hay := []string{r.Namespace + "/" + r.Name, r.Phase, r.Status}
	for _, c := range r.Containers {
		hay = append(hay, c.Summary)
	}
	for _, pr := range r.Probes {
		hay = append(hay, pr.Container, pr.Type, pr.Kind, pr.Target, pr.Declared, pr.Refused)
		if pr.LastFailure != nil {
			hay = append(hay, pr.LastFailure.Message)
		}
	}
	for _, h := range hay {
		if strings.Contains(strings.ToLower(h), needle) {
			return true
		}
	}
	return false
}

// rows builds every pod's row, failing pods first, then by namespace and
// name.
func (p *Page) rows() []podRow {
	var out []podRow
	for pod := range p.opts.Pods {
		hist, _ := p.opts.Probes(pod.Namespace, pod.Name)
		out = append(out, p.row(pod, hist))
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Failing != out[j].Failing {
			return out[i].Failing
		}
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// lookup finds one pod: Options.Pod, else the first of Pods with the name.
func (p *Page) lookup(namespace, name string) (*v1.Pod, bool) {
	if p.opts.Pod != nil {
		return p.opts.Pod(namespace, name)
	}
	for pod := range p.opts.Pods {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

// podView builds one pod's page.
func (p *Page) podView(namespace, name string, refresh int) (podView, bool) {
	v := podView{layoutView: layoutView{Title: namespace + "/" + name + " · probed", Refresh: refresh, Header: p.header()},
		Namespace: namespace, Name: name}
	pod, ok := p.lookup(namespace, name)
	if !ok {
		return v, false
	}
	hist, _ := p.opts.Probes(namespace, name)
	v.Found = true
	v.Pod = p.row(pod, hist)
	for _, c := range pod.Status.Conditions {
		v.Conditions = append(v.Conditions, conditionRow{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason,
			Message: c.Message, Since: c.LastTransitionTime.Time, Stale: isStale(c)})
	}
	for k, val := range pod.Annotations {
		v.Annotations = append(v.Annotations, keyValue{k, bound.Cut(val, bound.AnnotationBytes)}) // whole in the pod's JSON
	}
	sort.Slice(v.Annotations, func(i, j int) bool { return v.Annotations[i].Key < v.Annotations[j].Key })
	if p.opts.Events != nil {
		v.ShowEvents = true
		for _, e := range p.opts.Events() {
			if (e.PodUID != "" && e.PodUID == string(pod.UID)) || (e.PodUID == "" && e.Namespace == namespace && e.Pod == name) {
				v.Events = append(v.Events, e)
			}
		}
	}
	return v, true
}

// row joins a pod's declared probes with their histories (by container and
// probe type). A history without a declared probe (the pod changed since)
// is listed too, without a target.
func (p *Page) row(pod *v1.Pod, hist history.PodHistory) podRow {
	probes := hist.Probes
	r := podRow{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Phase: string(pod.Status.Phase),
		Status:  statusview.StatusOf(pod),
		PageURL: "/pod/" + url.PathEscape(pod.Namespace) + "/" + url.PathEscape(pod.Name),
		JSONURL: "/pods/" + url.PathEscape(pod.Namespace) + "/" + url.PathEscape(pod.Name)}
	r.ProbesURL = r.JSONURL + "/probes"
	if r.Phase == "" {
		r.Phase = "Pending"
	}
	if r.Status == "" {
		r.Status = r.Phase
	}
	for _, c := range pod.Status.Conditions {
		if isStale(c) {
			r.Stale = c.Message
		}
	}
	r.Ready, r.Restarts = readiness(pod)
	r.Containers = p.containers(pod)
	stateOf := func(name string) *containerRow {
		for i := range r.Containers {
			if r.Containers[i].Name == name {
				return &r.Containers[i]
			}
		}
		return nil
	}
	byKey := map[string]*history.Probe{}
	for i := range probes {
		byKey[probes[i].Container+"/"+probes[i].Type] = &probes[i]
	}
	used := map[string]bool{}
	refusals := refusalsOf(hist.Refused)
	for _, d := range declared(pod, p.view(pod)) {
		key := d.Container.Name + "/" + d.Type.Lower()
		used[key] = true
		pr := probeRow{Container: d.Container.Name, State: stateOf(d.Container.Name), Type: d.Type.Lower(), Declared: d.Origin.String()}
		pr.Kind, pr.Target = target(pod, d)
		pr.Target = bound.Cut(pr.Target, bound.TargetBytes) // a path is the manifest's length otherwise
		threshold := [2]int32{d.Probe.SuccessThreshold, d.Probe.FailureThreshold}
		fill(&pr, byKey[key], threshold, p.opts.HistorySize)
		if why := refusals.take(d.Field.String()); why != "" {
			pr.Refused, pr.Failing = why, true
		}
		r.Probes = append(r.Probes, pr)
	}
	for _, rf := range refusals.rest() {
		pr := probeRow{Container: rf.container, State: stateOf(rf.container), Type: rf.typ, Declared: rf.origin, Kind: "-",
			Refused: rf.reasons, Failing: true}
		if h := byKey[rf.key]; h != nil && rf.container != "" && !used[rf.key] {
			used[rf.key] = true // its runs from before the pod changed
			fill(&pr, h, [2]int32{}, p.opts.HistorySize)
			pr.Failing = true
		}
		r.Probes = append(r.Probes, pr)
	}
	for i := range probes {
		h := &probes[i]
		if used[h.Container+"/"+h.Type] {
			continue
		}
		pr := probeRow{Container: h.Container, State: stateOf(h.Container), Type: h.Type, Kind: h.Handler}
		fill(&pr, h, [2]int32{}, p.opts.HistorySize)
		r.Probes = append(r.Probes, pr)
	}
	shown := map[string]bool{}
	for i := range r.Probes {
		pr := &r.Probes[i]
		pr.ShowState, shown[pr.Container] = !shown[pr.Container], true
		if pr.Failing {
			r.Failing = true
		}
	}
	if pod.Status.Phase == v1.PodFailed {
		r.Failing = true
	}
	r.Rowspan = max(1, len(r.Probes))
	return r
}

// containers are the states of the pod's sidecars and containers at the
// page's time (statusview.ContainerStates: kubectl describe's State, with
// the time left of a crash-loop back-off).
func (p *Page) containers(pod *v1.Pod) []containerRow {
	now := p.opts.Now()
	last := map[string]*v1.ContainerStateTerminated{}
	for _, list := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range list {
			last[list[i].Name] = list[i].LastTerminationState.Terminated
		}
	}
	var out []containerRow
	for _, s := range statusview.ContainerStates(pod) {
		c := containerRow{Name: s.Name, Sidecar: s.Sidecar, State: s.State, Summary: s.Summary(now), Message: s.Message,
			Ready: s.Ready, Started: s.Started, Restarts: s.Restarts}
		if t := last[s.Name]; t != nil {
			c.LastTermination = statusview.ContainerState{State: statusview.StateTerminated, Reason: t.Reason, ExitCode: t.ExitCode, Signal: t.Signal}.Summary(now)
			if !t.FinishedAt.IsZero() {
				c.LastTermination += " at " + stamp(t.FinishedAt.Time)
			}
		}
		out = append(out, c)
	}
	return out
}

// isStale reports whether c is the probed.io/ManifestStale condition, true.
func isStale(c v1.PodCondition) bool {
	return c.Type == source.ConditionManifestStale && c.Status == v1.ConditionTrue
}

// fill sets the row's results from the probe's history; threshold holds
// the success and failure thresholds (0: the API defaults, 1 and 3).
func fill(pr *probeRow, h *history.Probe, threshold [2]int32, kept int) {
	if threshold[0] <= 0 {
		threshold[0] = 1
	}
	if threshold[1] <= 0 {
		threshold[1] = 3
	}
	if h == nil {
		return
	}
	if pr.Kind == "" {
		pr.Kind = h.Handler
	}
	pr.ExecMode = h.ExecMode
	pr.Results = h.Results
	pr.LastFailure = h.LastFailure
	if n := len(h.Results); n > 0 {
		last := h.Results[n-1]
		pr.Last, pr.Cached = last.Result, last.Cached
		pr.Failing = !succeeded(last.Result)
	}
	pr.Consecutive = consecutiveOf(h.Results, threshold, kept)
	pr.Spark = newSparkline(h.Results)
}

// succeeded: a success or a warning (which the kubelet counts as a success,
// spec P5).
func succeeded(result string) bool { return result == "success" || result == "warning" }

// consecutiveOf counts the newest run of same-outcome results of the
// newest container instance: the worker starts counting afresh for a new
// container ID (spec W11, as the kubelet's worker resets its counters).
// Errored runs are skipped: the worker discards them and they change no
// counter (spec P2). Failure and unknown count as failures (P5). kept is
// the history's ring size: when every kept record counts, the run may be
// longer than the ring (AtLeast).
func consecutiveOf(recs []history.Record, threshold [2]int32, kept int) consecutive {
	var c consecutive
	if len(recs) == 0 {
		return c
	}
	container := recs[len(recs)-1].ContainerID
	counted := 0
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].ContainerID != container {
			break
		}
		counted++
		res := recs[i].Result
		if res == "errored" {
			continue
		}
		outcome := "failures"
		if succeeded(res) {
			outcome = "successes"
		}
		if c.Outcome == "" {
			c.Outcome = outcome
		} else if c.Outcome != outcome {
			counted--
			break
		}
		c.Count++
	}
	c.AtLeast = c.Outcome != "" && kept > 0 && counted == len(recs) && len(recs) >= kept
	switch c.Outcome {
	case "successes":
		c.Threshold = threshold[0]
	case "failures":
		c.Threshold = threshold[1]
	}
	return c
}

// view returns the pod's probes as the agent worked them out
// (Options.Declared), or, without it, from the pod as manifest mode does.
func (p *Page) view(pod *v1.Pod) *podprobes.View {
	if p.opts.Declared == nil {
		return podprobes.Of(pod, podprobes.Policy{})
	}
	v, _ := p.opts.Declared(pod)
	return v
}

// declared lists the probes of the view in the page's order: sidecars,
// then containers, in spec order, each in the order liveness, readiness,
// startup, a spec probe before a probe of another origin (the view's
// order).
func declared(pod *v1.Pod, v *podprobes.View) []*podprobes.Probe {
	if v == nil {
		return nil
	}
	byContainer := map[string][]*podprobes.Probe{}
	for i := range v.Probes {
		p := &v.Probes[i]
		byContainer[p.Container.Name] = append(byContainer[p.Container.Name], p)
	}
	var names []string
	for i := range pod.Spec.InitContainers {
		if runtime.IsRestartable(&pod.Spec.InitContainers[i]) {
			names = append(names, pod.Spec.InitContainers[i].Name)
		}
	}
	for i := range pod.Spec.Containers {
		names = append(names, pod.Spec.Containers[i].Name)
	}
	out := make([]*podprobes.Probe, 0, len(v.Probes))
	for _, name := range names {
		for _, t := range []runtime.ProbeType{runtime.Liveness, runtime.Readiness, runtime.Startup} {
			for _, p := range byContainer[name] {
				if p.Type == t {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// refusals are a pod's refused probes as the API serves them
// (PodHistory.Refused), each reason once taken by the row that shows it.
type refusals struct {
	list  []history.Refused
	taken []bool
}

func refusalsOf(in []history.Refused) refusals {
	return refusals{list: in, taken: make([]bool, len(in))}
}

// reason is how the page words one refusal: its field, then why.
func reason(r *history.Refused) string {
	if r.Field == "" {
		return r.Reason
	}
	return r.Field + ": " + r.Reason
}

// take returns the reasons that refuse a declared probe as a whole (the
// node's budget: a refusal of its declaration's field or one under it),
// "" when none does. A declared probe is valid, so no other refusal names
// its fields.
func (rs refusals) take(declaredAt string) string {
	var reasons []string
	for i := range rs.list {
		f := rs.list[i].Field
		if !rs.taken[i] && (f == declaredAt || strings.HasPrefix(f, declaredAt+".") || strings.HasPrefix(f, declaredAt+"[")) {
			rs.taken[i] = true
			reasons = append(reasons, reason(&rs.list[i]))
		}
	}
	return bound.Cut(strings.Join(reasons, "; "), bound.MessageBytes)
}

// rowRefusal is one row of refused probes that are not declared: those
// of one origin, container and type (as far as known), with every reason.
type rowRefusal struct {
	key                    string // container/type
	container, typ, origin string
	reasons                string
}

// rest groups the refusals no declared probe took, in order.
func (rs refusals) rest() []rowRefusal {
	var out []rowRefusal
	index := map[string]int{}
	for i := range rs.list {
		if rs.taken[i] {
			continue
		}
		r := &rs.list[i]
		typ := r.Type
		if typ == "" {
			typ = "-"
		}
		group := r.Origin + "/" + r.Container + "/" + typ
		if j, ok := index[group]; ok {
			out[j].reasons += "; " + reason(r)
			continue
		}
		index[group] = len(out)
		out = append(out, rowRefusal{key: r.Container + "/" + typ, container: r.Container, typ: typ, origin: r.Origin, reasons: reason(r)})
	}
	for i := range out {
		out[i].reasons = bound.Cut(out[i].reasons, bound.MessageBytes)
	}
	return out
}

// target says what a probe probes, the way an operator writes it: "GET
// http://10.1.2.3:8080/healthz" (the host defaults to the pod's IP, spec
// H1), "tcp :6379" (an empty host is the pod's IP), "grpc :9090" (with the
// service when set), "exec cat /tmp/ready", "plugin redis" (with ":port"
// when set). A named port is shown resolved against the container's ports
// when it can be (spec 1.4), else by its name.
func target(pod *v1.Pod, d *podprobes.Probe) (kind, text string) {
	// What the API hides (runtime/redact: query values and credentials in
	// the path, secrets in the command, credential pairs in any other
	// string of an annotation probe) the page hides: the view is the
	// agent's own, not the API's redacted copy.
	var params map[string]string
	if d.Plugin != nil {
		params = d.Plugin.Params
	}
	secrets := redact.ForContainer(d.Container, params)
	if d.Plugin != nil {
		text = "plugin " + secrets.Text(d.Plugin.Name)
		if port := portOf(d.Plugin.Port, d.Container); port != "" && port != "0" {
			text += " :" + port
		}
		return d.Plugin.Name, text
	}
	h := &d.Probe.ProbeHandler
	switch {
	case h.HTTPGet != nil:
		g := h.HTTPGet
		host := secrets.Text(g.Host)
		if host == "" {
			host = pod.Status.PodIP
		}
		scheme := strings.ToLower(string(g.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		path := secrets.URL(g.Path)
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		return "http", "GET " + scheme + "://" + net.JoinHostPort(host, portOf(g.Port, d.Container)) + path
	case h.TCPSocket != nil:
		return "tcp", "tcp " + net.JoinHostPort(secrets.Text(h.TCPSocket.Host), portOf(h.TCPSocket.Port, d.Container))
	case h.GRPC != nil:
		text = "grpc :" + strconv.Itoa(int(h.GRPC.Port))
		if h.GRPC.Service != nil && *h.GRPC.Service != "" {
			text += " " + secrets.Text(*h.GRPC.Service)
		}
		return "grpc", text
	case h.Exec != nil:
		return "exec", strings.TrimSpace("exec " + strings.Join(secrets.Command(h.Exec.Command), " "))
	}
	return d.Kind, ""
}

// portOf resolves a port number or name against the container's ports
// (runtime.ResolvePort, the handlers' rule).
func portOf(port intstr.IntOrString, c *v1.Container) string {
	if n, _ := runtime.ResolvePort(port, c); n >= 0 { // a number, or a name found (spec 1.4)
		return strconv.Itoa(n)
	}
	return port.StrVal // a name the container does not declare: shown as written
}

// readiness is the pod's READY ("1/2") and RESTARTS, counted as `kubectl
// get pods` and `probed status` count them (statusview.CountContainers).
func readiness(pod *v1.Pod) (string, int32) {
	c := statusview.CountContainers(pod)
	return fmt.Sprintf("%d/%d", c.Ready, c.Containers), c.Restarts
}

// formatMS shows a duration in milliseconds with up to one decimal.
func formatMS(ms float64) string {
	if ms >= 10 {
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	}
	return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
}

// stamp is a time in UTC, RFC 3339; "-" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// ago is the age of t at now, rounded to the second ("3s ago").
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String() + " ago"
}
