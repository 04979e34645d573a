// Package statusview is `probed status`: it reads a running agent's API —
// GET /pods, per pod GET /pods/{namespace}/{name}/probes for the probes'
// last results and failures, and GET /manifests for the manifest documents
// the agent rejected or skipped — into one Status document, and prints it
// like `kubectl get pods` (table, wide) or as JSON or YAML (package output;
// the shape is documented in docs/operations.md).
package statusview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/agent/guards"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/output"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/runtime"
)

// Options configure Fetch and Print.
type Options struct {
	// Server is the agent's API base URL, e.g. http://127.0.0.1:8089 (see
	// ParseServer for what a user may type).
	Server string
	// Namespace keeps the pods of this namespace only ("": all), and the
	// rejected manifest documents whose pod is in it or unknown.
	Namespace string
	// Output is the format; "" is output.Table.
	Output output.Format
	// Client; nil: a client with a 10 s timeout.
	Client *http.Client
	// Now for the AGE column; nil: time.Now.
	Now func() time.Time
}

// ParseServer turns what a user gives as --server into the API's base URL:
// "127.0.0.1:8089" and "localhost:8089" (no scheme) mean http://; http://
// and https:// URLs are taken as they are, with an optional path prefix
// (an agent behind a proxy), without a trailing slash. Anything else is an
// error naming the flag.
func ParseServer(s string) (string, error) {
	raw := strings.TrimSpace(s)
	if raw == "" {
		return "", errors.New("--server: empty; want host:port or an http:// or https:// URL")
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("--server %q: %v", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("--server %q: scheme %q; want http or https (or host:port)", s, u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("--server %q: no host; want host:port or an http:// or https:// URL", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--server %q: a base URL has no query or fragment", s)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String(), nil
}

// Fetch reads the agent's state into a Status. Errors reading /pods are
// returned ("cannot reach the agent: ...", or the HTTP status); a pod whose
// probe history is missing (it went away between the two requests) has no
// probes; an agent without GET /manifests (older, or one that does not read
// manifests) leaves Status.Manifests nil.
func Fetch(ctx context.Context, opts Options) (*Status, error) {
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	base := strings.TrimRight(opts.Server, "/")
	var list v1.PodList
	if err := getJSON(ctx, opts.Client, base+"/pods", &list); err != nil {
		return nil, err
	}
	st := &Status{Kind: StatusKind, APIVersion: APIVersion, Server: base, Namespace: opts.Namespace, Pods: []Pod{}}
	for i := range list.Items {
		p := &list.Items[i]
		if opts.Namespace != "" && p.Namespace != opts.Namespace {
			continue
		}
		var hist history.PodHistory
		if err := getJSON(ctx, opts.Client, fmt.Sprintf("%s/pods/%s/%s/probes", base, url.PathEscape(p.Namespace), url.PathEscape(p.Name)), &hist); err != nil {
			hist = history.PodHistory{}
		}
		pod := podOf(p, hist.Probes)
		pod.Refused = hist.Refused
		st.Pods = append(st.Pods, pod)
	}
	var held guards.Report
	var notServed *httpError
	switch err := getJSON(ctx, opts.Client, base+"/guards", &held); {
	case errors.As(err, &notServed) && notServed.code == http.StatusNotFound:
		// Manifest mode, or an older agent: no section.
	case err != nil:
		return nil, err
	default:
		st.Guards = &guards.Report{Held: []guards.Held{}}
		for _, h := range held.Held {
			if opts.Namespace == "" || h.Namespace == opts.Namespace {
				st.Guards.Held = append(st.Guards.Held, h)
			}
		}
	}
	var rep source.Report
	switch err := getJSON(ctx, opts.Client, base+"/manifests", &rep); {
	case errors.As(err, &notServed) && notServed.code == http.StatusNotFound:
		// An agent without the endpoint: no section, no error.
	case err != nil:
		return nil, err
	default:
		rep.Rejected = filterRejected(rep.Rejected, opts.Namespace)
		if rep.Rejected == nil {
			rep.Rejected = []source.Rejection{}
		}
		if rep.Skipped == nil {
			rep.Skipped = []source.SkippedDocument{}
		}
		st.Manifests = &rep
	}
	return st, nil
}

// Print fetches the status and writes it in opts.Output: the table
// (NAMESPACE NAME READY STARTED RESTARTS STATUS AGE LAST FAILURE; wide adds
// IP and PROBES before LAST FAILURE), followed by the rejected and the
// skipped manifest documents when there are any; or the Status document as
// JSON or YAML. Nothing is written when Fetch fails.
func Print(ctx context.Context, opts Options, out io.Writer) error {
	st, err := Fetch(ctx, opts)
	if err != nil {
		return err
	}
	if opts.Output.Document() {
		return output.Write(out, opts.Output, st)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return writeTable(out, st, opts.Output == output.Wide, opts.Now())
}

func filterRejected(in []source.Rejection, namespace string) []source.Rejection {
	if namespace == "" {
		return in
	}
	var out []source.Rejection
	for _, r := range in {
		if ns, _, ok := strings.Cut(r.Pod, "/"); !ok || ns == namespace {
			out = append(out, r)
		}
	}
	return out
}

// podOf summarises one pod of /pods and its probes' history.
func podOf(p *v1.Pod, probes []history.Probe) Pod {
	out := Pod{
		Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), PodIP: p.Status.PodIP,
		Phase: string(p.Status.Phase), Status: StatusOf(p), Probes: []Probe{},
	}
	out.Ready = podReady(p)
	if p.Status.StartTime != nil {
		t := p.Status.StartTime.UTC()
		out.StartTime = &t
	}
	c := CountContainers(p)
	out.Containers, out.ReadyContainers, out.StartedContainers, out.Restarts = c.Containers, c.Ready, c.Started, c.Restarts
	for i := range probes {
		hp := &probes[i]
		pr := Probe{Container: hp.Container, Type: hp.Type, Handler: hp.Handler, Origin: hp.Origin, ExecMode: hp.ExecMode}
		if n := len(hp.Results); n > 0 {
			last := hp.Results[n-1]
			pr.LastResult = last.Result
			t := last.Time.UTC()
			pr.LastRun = &t
		}
		if f := hp.LastFailure; f != nil {
			pr.LastFailure = &Failure{Container: hp.Container, Type: hp.Type, Result: f.Result, Message: f.Message, Time: f.Time.UTC()}
			if out.LastFailure == nil || f.Time.After(out.LastFailure.Time) {
				out.LastFailure = pr.LastFailure
			}
		}
		out.Probes = append(out.Probes, pr)
	}
	return out
}

// ContainerCounts are the READY, STARTED and RESTARTS columns of a pod,
// as kubectl's printPod counts them: the regular containers and the
// sidecars (restartable init containers).
type ContainerCounts struct {
	// Containers is the number the pod's spec declares (a container
	// without a status yet counts, neither ready nor started), or of its
	// statuses when there are more (a pod listed without its spec).
	Containers int
	// Ready and Started count the statuses with Ready, Started true.
	Ready, Started int
	// Restarts sums their restart counts.
	Restarts int32
}

// CountContainers counts p's containers and sidecars (ContainerCounts).
// The status page and `probed status` both show these counts.
func CountContainers(p *v1.Pod) ContainerCounts {
	out := ContainerCounts{Containers: len(p.Spec.Containers)}
	sidecars := map[string]bool{}
	for i := range p.Spec.InitContainers {
		if runtime.IsRestartable(&p.Spec.InitContainers[i]) {
			sidecars[p.Spec.InitContainers[i].Name] = true
			out.Containers++
		}
	}
	statuses := 0
	count := func(cs *v1.ContainerStatus) {
		statuses++
		if cs.Ready {
			out.Ready++
		}
		if cs.Started != nil && *cs.Started {
			out.Started++
		}
		out.Restarts += cs.RestartCount
	}
	for i := range p.Status.ContainerStatuses {
		count(&p.Status.ContainerStatuses[i])
	}
	for i := range p.Status.InitContainerStatuses {
		if sidecars[p.Status.InitContainerStatuses[i].Name] {
			count(&p.Status.InitContainerStatuses[i])
		}
	}
	// A pod listed without its spec still counts the statuses it has.
	out.Containers = max(out.Containers, statuses)
	return out
}

// httpError is an answer other than 200 OK.
type httpError struct {
	url, status string
	code        int
}

func (e *httpError) Error() string { return fmt.Sprintf("GET %s: %s", e.url, e.status) }

// getJSON GETs url and decodes the JSON answer into v.
func getJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the agent: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &httpError{url: url, status: resp.Status, code: resp.StatusCode}
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
