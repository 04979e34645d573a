// Command testplugin is a misbehaving-on-demand probe plugin for the
// pluginhost tests. It serves the kinds in $TESTPLUGIN_KINDS (default
// "test"); the probe's "mode" parameter picks the behaviour:
//
//	ok      Success, output "ok" (default)
//	fail    Failure, output "failed on purpose"
//	error   a handler error
//	hang    never answers (ignores the deadline)
//	sleep   waits "sleep" (a Go duration) or until the deadline, then Success
//	crash   the process exits with status 3
//	panic   the handler panics
//	file    Success when the file "file" holds "ok", else Failure
//	print   writes to stdout and stderr, then Success
//	dial    connects to "addr" through sdk.Dialer: Success, or Failure
//	        with the dial error (the egress policy's refusal)
//
// Details echo what the plugin received. With the parameter "tracefile",
// every call appends "<trace id> <span id> <trace flags>" of the incoming
// trace context to that file. With $TESTPLUGIN_STDOUT set, the plugin
// prints it to stdout before the handshake (a bug plugins must not have).
// With $TESTPLUGIN_ENFORCES_EGRESS set it announces the egress level
// (sdk.Plugin.EnforcesEgress); details["egress"] shows the policy the
// request carried.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/probed/probed/plugins/sdk"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

func init() {
	if s := os.Getenv("TESTPLUGIN_STDOUT"); s != "" {
		fmt.Println(s)
	}
}

func main() {
	kinds := "test"
	if s := os.Getenv("TESTPLUGIN_KINDS"); s != "" {
		kinds = s
	}
	p := sdk.Plugin{Name: "testplugin", Version: "0.0.1"}
	for _, k := range strings.Split(kinds, ",") {
		p.Kinds = append(p.Kinds, sdk.Kind{Name: k, Handler: handler{}})
	}
	p.EnforcesEgress = os.Getenv("TESTPLUGIN_ENFORCES_EGRESS") != ""
	if s := os.Getenv("TESTPLUGIN_MAX_CONCURRENCY"); s != "" {
		p.MaxConcurrency, _ = strconv.Atoi(s)
	}
	p.Configure = func(_ context.Context, c sdk.Config) error {
		if c.Settings["fail"] != "" {
			return errors.New(c.Settings["fail"])
		}
		// fail_when_file: Configure fails with the file's content once the
		// file exists, so a test can make a restart fail.
		if f := c.Settings["fail_when_file"]; f != "" {
			if msg, err := os.ReadFile(f); err == nil {
				return errors.New(string(msg))
			}
		}
		return nil
	}
	sdk.Serve(p)
}

type handler struct{}

func (handler) Prepare(spec *runtime.Spec) (runtime.Prober, error) {
	if spec.Plugin == nil {
		return nil, errors.New("testplugin serves plugin kinds only")
	}
	if spec.Plugin.Params["mode"] == "badprepare" {
		return nil, errors.New("prepare failed on purpose")
	}
	return runtime.ProberFunc(func(ctx context.Context, t runtime.Target) (runtime.Outcome, error) {
		return probe(ctx, spec, t)
	}), nil
}

func probe(ctx context.Context, spec *runtime.Spec, t runtime.Target) (runtime.Outcome, error) {
	prm := spec.Plugin.Params
	d := map[string]string{
		"kind":         spec.Kind,
		"probe_type":   spec.ProbeType.Lower(),
		"pod_uid":      string(spec.Pod.UID),
		"pod":          spec.Pod.Namespace + "/" + spec.Pod.Name,
		"container":    spec.Container.Name,
		"port":         spec.Plugin.Port.String(),
		"timeout":      spec.Timeout().String(),
		"pod_ip":       t.PodIP,
		"container_id": t.ContainerID,
		"attempt":      strconv.Itoa(t.Attempt),
		"pid":          strconv.Itoa(os.Getpid()),
	}
	if dl, ok := ctx.Deadline(); ok {
		d["remaining"] = time.Until(dl).Round(10 * time.Millisecond).String()
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		d["trace_id"] = sc.TraceID().String()
	}
	if f := prm["tracefile"]; f != "" {
		// One line per call: the trace context the plugin received.
		sc := trace.SpanContextFromContext(ctx)
		line := fmt.Sprintf("%s %s %s\n", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
		if fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = fh.WriteString(line)
			_ = fh.Close()
		}
	}
	for k, v := range prm {
		d["param."+k] = v
	}
	if pol := egress.FromContext(ctx); pol != nil {
		d["egress"] = fmt.Sprintf("pod_ips=%v allowed=%v", pol.PodIPs(), pol.Allowed())
	}
	ok := runtime.Outcome{Result: runtime.Success, Output: "ok", Details: d}
	switch prm["mode"] {
	case "", "ok":
		return ok, nil
	case "fail":
		return runtime.Outcome{Result: runtime.Failure, Output: "failed on purpose", Details: d}, nil
	case "error":
		return runtime.Outcome{}, errors.New("handler error on purpose")
	case "hang":
		time.Sleep(time.Hour)
		return ok, nil
	case "sleep":
		// details["sleep_end"]: "slept" when the whole sleep passed,
		// "cut" when the call's context ended it.
		dur, _ := time.ParseDuration(prm["sleep"])
		t := time.NewTimer(dur)
		defer t.Stop()
		select {
		case <-t.C:
			d["sleep_end"] = "slept"
		case <-ctx.Done():
			d["sleep_end"] = "cut"
		}
		return ok, nil
	case "crash":
		os.Exit(3)
	case "panic":
		panic("panic on purpose")
	case "file":
		b, err := os.ReadFile(prm["file"])
		if err == nil && strings.TrimSpace(string(b)) == "ok" {
			return ok, nil
		}
		return runtime.Outcome{Result: runtime.Failure, Output: "file says no", Details: d}, nil
	case "dial":
		c, err := sdk.Dialer(0).DialContext(ctx, "tcp", prm["addr"])
		if err != nil {
			return runtime.Outcome{Result: runtime.Failure, Output: err.Error(), Details: d, Cause: err}, nil
		}
		_ = c.Close()
		return ok, nil
	case "print":
		fmt.Println("printed to stdout after the handshake")
		fmt.Fprintln(os.Stderr, "printed to stderr after the handshake")
		return ok, nil
	}
	return runtime.Outcome{}, fmt.Errorf("unknown mode %q", prm["mode"])
}
