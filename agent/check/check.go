// Package check runs every probe of a manifest once, now, and reports the
// results: `probed check -f FILE|DIR|-`, as a table (wide: with the pod IP
// and whole messages) or as a Report document in JSON or YAML (package
// output; docs/operations.md). It accepts Pods and the pod templates of
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
	// read in lexical order; or "-" for Stdin.
	File string
	// Stdin is read for File "-"; nil: os.Stdin.
	Stdin io.Reader
	// Output is the format of the report; "" is output.Table.
	Output    output.Format
	Container string // only this container ("" = all)
	// Namespace keeps the pods of this namespace only ("" = all).
	Namespace string
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
	Handler   string // http, tcp, exec, grpc (or a plugin kind)
	Result    string // success, warning, failure, error, not-run
	Duration  time.Duration
	Message   string
	PodIP     string // the address probed
}

// Run loads the file, runs every selected probe once (initialDelaySeconds
// is skipped; a handler error is retried as the kubelet does, P2), writes the
// table to out and returns the exit code. Errors of the manifest are written
// to errOut, one per line, naming file, pod, container and field.
func Run(ctx context.Context, opts Options, out, errOut io.Writer) int {
	if opts.PodIP == "" {
		opts.PodIP = "127.0.0.1"
	}
	// An IP, never a name: a name would be resolved (DNS) and probes sent
	// wherever it points. The agent refuses the same (agent.New).
	if net.ParseIP(opts.PodIP) == nil {
		fmt.Fprintf(errOut, "--pod-ip %q is not an IP address\n", opts.PodIP)
		return ExitBadInput
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
			fmt.Fprintf(errOut, "--probe: %v\n", err)
			return ExitBadInput
		}
		only = &pt
	}
	res, files := load(opts)
	rep := newReport(files)
	for _, err := range res.Errors {
		fmt.Fprintln(errOut, err)
		rep.Errors = append(rep.Errors, err.Error())
	}
	for _, e := range res.Entries {
		for _, w := range e.Warnings {
			msg := fmt.Sprintf("%s: document %d: pod %s/%s: warning: %s", e.Source, e.Doc, e.Pod.Namespace, e.Pod.Name, w)
			fmt.Fprintln(errOut, msg)
			rep.Warnings = append(rep.Warnings, msg)
		}
	}
	rep.Skipped = append(rep.Skipped, res.skipped...)
	if len(res.Errors) > 0 {
		return rep.finish(out, opts.Output, nil, ExitBadInput)
	}

	rt, err := runtime.New(runtime.Options{PoolSize: opts.Parallel, ExecPoolSize: opts.Parallel, Logger: opts.Logger})
	if err != nil {
		fmt.Fprintln(errOut, err)
		return ExitBadInput
	}
	defer func() { _ = rt.Close(context.Background()) }()
	var runner manager.ExecRunner = probeexec.DisabledRunner{}
	if opts.AllowHostExec {
		runner = &probeexec.LocalRunner{}
	}
	if err := manager.RegisterBuiltins(rt, runner); err != nil {
		fmt.Fprintln(errOut, err)
		return ExitBadInput
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
		pod := res.Entries[i].Pod
		file := res.Entries[i].Source
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
		visit := func(c *v1.Container) {
			if opts.Container != "" && c.Name != opts.Container {
				return
			}
			matched = matched || opts.Container == "" || c.Name == opts.Container
			for _, pt := range []runtime.ProbeType{runtime.Startup, runtime.Readiness, runtime.Liveness} {
				if only != nil && *only != pt {
					continue
				}
				p := runtime.ProbeOf(c, pt)
				if p == nil {
					continue
				}
				kind := runtime.KindOf(p)
				row := &Row{Pod: pod.Namespace + "/" + pod.Name, Container: c.Name, Probe: pt.Lower(), Handler: kind, PodIP: podIP}
				rep.fileOf[row] = file
				rows = append(rows, row)
				jobs = append(jobs, job{row: row, podIP: podIP, spec: &runtime.Spec{Kind: kind, ProbeType: pt, Pod: pod, Container: c, Probe: p}})
			}
		}
		for j := range pod.Spec.Containers {
			visit(&pod.Spec.Containers[j])
		}
		for j := range pod.Spec.InitContainers {
			c := &pod.Spec.InitContainers[j]
			if runtime.IsRestartable(c) {
				visit(c)
			} else if c.Name == opts.Container {
				// A regular init container exists but has no probes (the
				// API forbids them): "no probes found", not "no container".
				matched = true
			}
		}
	}
	if !namespaceMatched {
		return rep.fail(out, errOut, opts.Output, fmt.Sprintf("%s: no pod in namespace %q", opts.File, opts.Namespace))
	}
	if !podMatched {
		return rep.fail(out, errOut, opts.Output, fmt.Sprintf("%s: no pod named %q", opts.File, opts.Pod))
	}
	if opts.Container != "" && !matched {
		return rep.fail(out, errOut, opts.Output, fmt.Sprintf("%s: no container named %q", opts.File, opts.Container))
	}

	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		j := j
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

	code := ExitOK
	for _, r := range rows {
		if r.Result != "success" && r.Result != "warning" {
			code = ExitFailed
		}
	}
	if len(rows) == 0 {
		fmt.Fprintf(errOut, "%s: no probes found\n", opts.File)
	}
	return rep.finish(out, opts.Output, rows, code)
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
// exec command's output usually ends with) is not a cut.
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
	return s
}
