// Package check runs every probe of a manifest once, now, and reports the
// results: `probed check -f FILE|DIR|-`, as a table (wide: with the pod IP
// and whole messages) or as a Report document in JSON or YAML (package
// output; docs/operations.md). What the input skips (documents without a
// pod, with why) is reported, and input without a probe to run is bad
// input, not a pass. It accepts Pods and the pod templates of
// Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs and CronJobs, so
// users can check the manifests they already have.
package check

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/agent/output"
	"github.com/probed/probed/manager"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime"
)

// Exit codes of probed check.
const (
	ExitOK       = 0 // every probe succeeded
	ExitFailed   = 1 // a probe failed, errored or did not run
	ExitBadInput = 2 // the manifest or the flags are wrong
)

// Options configure a check.
type Options struct {
	// File is a manifest file; a directory, whose manifest files (at its
	// top level, named as the agent reads them: source.IsManifest) are
	// read in lexical order; or "-" (Stdin) for Options.Stdin.
	File string
	// Stdin is read for File "-"; nil: os.Stdin.
	Stdin io.Reader
	// Output is the format Run writes; "" is output.Table.
	Output output.Format
	// Namespace keeps the pods of this namespace only ("" = all).
	Namespace string
	Container string // only this container ("" = all)
	// Pod selects one pod: its name or namespace/name ("" = all). Workload
	// templates are named after their workload.
	Pod       string
	ProbeType string // only this probe type: liveness, readiness or startup ("" = all)
	// PodIP is used for pods whose manifest has no status.podIP; default
	// 127.0.0.1.
	PodIP string
	// AllowHostExec runs exec probes on this host; otherwise they are
	// reported as not run.
	AllowHostExec bool
	// Parallel bounds the probes run at once; default 16.
	Parallel int
	Logger   *slog.Logger
}

// Row is one probe's line in the report.
type Row struct {
	Pod       string // namespace/name
	Container string
	Probe     string // liveness, readiness, startup
	Origin    string // where the probe is declared: spec or annotation
	Handler   string // http, tcp, exec, grpc (or a plugin kind)
	Result    string // success, warning, failure, error, not-run (exec without AllowHostExec, a plugin kind)
	Duration  time.Duration
	Message   string
	PodIP     string // the address probed
	File      string // the manifest file the pod came from ("-": stdin)
}

// Result is what a check found and did: the input for the table (or any
// other rendering of it).
type Result struct {
	// File is the manifest file, directory or "-" checked (Options.File).
	File string
	// Files are the manifest files read, in order (File itself for a
	// file or "-"; a directory's manifest files).
	Files []string
	// Rows are the probes run, in manifest order: per pod, the
	// containers' own (per container: startup, readiness, liveness), then
	// the probed.io/probes annotation's in its order.
	Rows []*Row
	// Skipped are the documents of the files that yield no pod (a Secret,
	// a Service, ...), and for a file that holds no object at all one entry
	// with Doc 0, each with its file and reason (manifest.Skipped.String
	// words it).
	Skipped []Skipped
	// Errors are the problems that make the input bad, one per line:
	// manifest errors naming file, pod, container and field; bad flags; a
	// pod or container filter that matches nothing; a file (after filters)
	// without probes ("FILE: no probes found").
	Errors []string
	// Warnings name what loads but will not work as written (BR-20 named
	// ports, unfilled placeholders), with file, document and pod.
	Warnings []string
	// Code is the exit code: ExitOK, ExitFailed or ExitBadInput.
	Code int
}

// Run loads the input, runs every selected probe once (Check), writes the
// result to out in Options.Output and returns the exit code. Errors and
// warnings are written to errOut, one per line, naming file, document,
// pod, container and field. Skipped documents are written there too, but
// only when no probe ran: then they say why a file yielded nothing;
// beside probes that ran, the Services, ConfigMaps and RBAC objects
// of a real multi-document manifest are expected, not news, and are listed
// only in the JSON or YAML Report's "skipped". The table is written
// only when probes ran (bad input prints nothing on stdout); a JSON or
// YAML Report is always written, so that a pipeline reading it sees the
// errors too.
func Run(ctx context.Context, opts Options, out, errOut io.Writer) int {
	res := Check(ctx, opts)
	for _, e := range res.Errors {
		fmt.Fprintln(errOut, e)
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(errOut, w)
	}
	if len(res.Rows) == 0 {
		for _, sk := range res.Skipped {
			fmt.Fprintf(errOut, "%s: %s\n", sk.File, sk.Skipped)
		}
	}
	switch {
	case opts.Output.Document():
		if err := output.Write(out, opts.Output, NewReport(res)); err != nil {
			fmt.Fprintln(errOut, err)
			return ExitBadInput
		}
	case len(res.Rows) > 0:
		writeTable(out, res.Rows, opts.Output == output.Wide)
	}
	return res.Code
}

// WriteTable writes rows as the table of probed check: POD CONTAINER PROBE
// HANDLER RESULT DURATION MESSAGE, the message cut to its first line and
// 200 characters.
func WriteTable(out io.Writer, rows []*Row) { writeTable(out, rows, false) }

// writeTable writes the table; wide adds POD IP before MESSAGE and prints
// the whole message on one line (wholeLine).
func writeTable(out io.Writer, rows []*Row, wide bool) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "POD\tCONTAINER\tPROBE\tHANDLER\tRESULT\tDURATION\tPOD IP\tMESSAGE")
	} else {
		fmt.Fprintln(tw, "POD\tCONTAINER\tPROBE\tHANDLER\tRESULT\tDURATION\tMESSAGE")
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t", r.Pod, r.Container, r.Probe, r.Handler, r.Result, r.Duration.Round(time.Millisecond))
		if wide {
			fmt.Fprintf(tw, "%s\t%s\n", r.PodIP, wholeLine(r.Message))
		} else {
			fmt.Fprintln(tw, oneLine(r.Message))
		}
	}
	_ = tw.Flush()
}

// Check loads the file, runs every selected probe once (initialDelaySeconds
// is skipped; a handler error is retried as the kubelet does, P2) and
// returns what it found. Bad input — a manifest error, a bad flag, a filter
// that matches nothing, or no probe at all to run (an empty file, a file of
// Secrets or Services, pods without probes) — runs nothing and is
// ExitBadInput; a probe that fails, errors or does not run is ExitFailed.
func Check(ctx context.Context, opts Options) *Result {
	out := &Result{File: opts.File}
	bad := func(format string, args ...any) *Result {
		out.Errors = append(out.Errors, fmt.Sprintf(format, args...))
		out.Code = ExitBadInput
		return out
	}
	if opts.PodIP == "" {
		opts.PodIP = "127.0.0.1"
	}
	// An IP, never a name: a name would be resolved (DNS) and probes sent
	// wherever it points. The agent refuses the same (agent.New).
	if net.ParseIP(opts.PodIP) == nil {
		return bad("--pod-ip %q is not an IP address", opts.PodIP)
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 16
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var only *runtime.ProbeType
	if opts.ProbeType != "" {
		pt, err := runtime.ParseProbeType(opts.ProbeType)
		if err != nil {
			return bad("--probe: %v", err)
		}
		only = &pt
	}
	res := load(opts)
	out.Files, out.Skipped = res.files, res.skipped
	for _, err := range res.Errors {
		out.Errors = append(out.Errors, err.Error())
	}
	for _, e := range res.Entries {
		for _, w := range e.Warnings {
			out.Warnings = append(out.Warnings, fmt.Sprintf("%s: document %d: pod %s/%s: warning: %s", e.Source, e.Doc, e.Pod.Namespace, e.Pod.Name, w))
		}
	}
	if len(res.Errors) > 0 {
		out.Code = ExitBadInput
		return out
	}

	type job struct {
		row   *Row
		spec  *runtime.Spec
		podIP string
	}
	var jobs []job
	var rows []*Row
	matched := false
	podMatched := opts.Pod == ""
	namespaceMatched := opts.Namespace == ""
	for i := range res.Entries {
		pod, file := res.Entries[i].Pod, res.Entries[i].Source
		if opts.Namespace != "" && pod.Namespace != opts.Namespace {
			continue
		}
		namespaceMatched = true
		if opts.Pod != "" && opts.Pod != pod.Name && opts.Pod != pod.Namespace+"/"+pod.Name {
			continue
		}
		podMatched = true
		podIP := pod.Status.PodIP
		if podIP == "" {
			podIP = opts.PodIP
		}
		if opts.Container != "" {
			// A container of that name exists, with probes or not (a
			// regular init container has none: the API forbids them):
			// "no probes found", not "no container".
			for _, cs := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
				for j := range cs {
					matched = matched || cs[j].Name == opts.Container
				}
			}
		}
		// The pod's probes as the agent would run them (its view, worked
		// out as the document was decoded): the spec's, then the
		// probed.io/probes annotation's.
		view := res.Entries[i].Probes
		for j := range view.Probes {
			vp := &view.Probes[j]
			if (opts.Container != "" && vp.Container.Name != opts.Container) || (only != nil && *only != vp.Type) {
				continue
			}
			spec := vp.Spec(pod)
			row := &Row{Pod: pod.Namespace + "/" + pod.Name, Container: vp.Container.Name, Probe: vp.Type.Lower(), Origin: vp.Origin.String(),
				Handler: vp.Kind, PodIP: podIP, File: file}
			rows = append(rows, row)
			jobs = append(jobs, job{row: row, podIP: podIP, spec: &spec})
		}
	}
	if !namespaceMatched {
		return bad("%s: no pod in namespace %q", opts.File, opts.Namespace)
	}
	if !podMatched {
		return bad("%s: no pod named %q", opts.File, opts.Pod)
	}
	if opts.Container != "" && !matched {
		return bad("%s: no container named %q", opts.File, opts.Container)
	}
	if len(rows) == 0 {
		// Nothing to check is bad input, not a pass: a CI job checking
		// the wrong file (a Secret, an empty file) must not go green.
		return bad("%s: no probes found", opts.File)
	}

	rt, err := runtime.New(runtime.Options{PoolSize: opts.Parallel, ExecPoolSize: opts.Parallel, Logger: opts.Logger})
	if err != nil {
		return bad("%v", err)
	}
	defer func() { _ = rt.Close(context.Background()) }()
	var runner manager.ExecRunner = probeexec.DisabledRunner{}
	if opts.AllowHostExec {
		runner = &probeexec.LocalRunner{}
	}
	if err := manager.RegisterBuiltins(rt, runner); err != nil {
		return bad("%v", err)
	}

	var wg sync.WaitGroup
	for _, j := range jobs {
		if !rt.HasKind(j.spec.Kind) {
			// A plugin kind: check starts no plugin.
			j.row.Result, j.row.Message = "not-run", fmt.Sprintf("probe kind %q is served by a plugin; probed check runs no plugins", j.spec.Kind)
			continue
		}
		wg.Add(1)
		task := taskFunc(func() {
			defer wg.Done()
			runOne(ctx, rt, j.spec, j.podIP, j.row)
		})
		if err := rt.Submit(runtime.LaneOf(j.spec.Kind), task); err != nil {
			wg.Done()
			j.row.Result, j.row.Message = "error", err.Error()
		}
	}
	wg.Wait()

	out.Rows = rows
	out.Code = ExitOK
	for _, r := range rows {
		if r.Result != "success" && r.Result != "warning" {
			out.Code = ExitFailed
		}
	}
	return out
}

type taskFunc func()

func (f taskFunc) Run() { f() }

func runOne(ctx context.Context, rt *runtime.Runtime, spec *runtime.Spec, podIP string, row *Row) {
	start := time.Now()
	p := rt.Prepare(spec)
	rep := rt.Run(ctx, p, runtime.Target{PodIP: podIP, ContainerID: "probed://check"})
	row.Duration = time.Since(start)
	switch {
	case errors.Is(rep.Err, probeexec.ErrHostExecDisabled):
		row.Result, row.Message = "not-run", rep.Err.Error()
	case rep.Err != nil:
		row.Result, row.Message = "error", rep.Err.Error()
	default:
		row.Result = rep.Outcome.Result.String()
		if rep.Outcome.Result != runtime.Success {
			row.Message = rep.Outcome.Output
		} else if rep.Outcome.StatusCode != 0 && spec.Kind == runtime.KindHTTP {
			row.Message = fmt.Sprintf("HTTP %d", rep.Outcome.StatusCode)
		}
	}
}

// oneLine keeps the table readable: the first line of a message, at most
// 200 characters; " …" marks a cut. Trailing white space (the newline an
// exec command's output usually ends with) is not a cut. Control
// characters are escaped (output.Printable), as `probed status` prints
// them.
func oneLine(s string) string {
	s = strings.TrimRight(s, " \t\r\n")
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > 200 {
		// Cut at a rune boundary: never half a UTF-8 sequence.
		i := 200
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i] + "…"
	}
	return output.Printable(s)
}
