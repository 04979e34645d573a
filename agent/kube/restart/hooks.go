package restart

import (
	"context"
	"errors"
	"fmt"
	"net/textproto"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime"
)

// runPreStop runs the container's preStop hook for at most it.grace
// seconds, as the kubelet's executePreStopHook does, and returns the whole
// seconds it took (truncated, as the kubelet counts them). A hook that
// fails is a Warning FailedPreStopHook Event without its output, and a log
// line with its error; one cut at the grace period only a log line.
func (it *item) runPreStop(ctx context.Context, hook *v1.LifecycleHandler) int64 {
	a := it.step
	start := a.opts.Clock.Now()
	if a.opts.HookContext != nil {
		ctx = a.opts.HookContext(ctx, it.pod)
	}
	hctx, cancel := runtime.WithTimeout(ctx, a.opts.Clock, time.Duration(it.grace)*time.Second)
	err := it.hook(hctx, hook)
	cut := hctx.Err() == context.DeadlineExceeded
	cancel()
	took := a.opts.Clock.Since(start)
	log := it.log
	switch {
	case ctx.Err() != nil: // the agent stopping
	case cut:
		// As the kubelet: the stop goes on, no Event.
		log.Info("liveness action: preStop hook not completed in grace period", "gracePeriod", it.grace)
	case err != nil:
		log.Warn("liveness action: preStop hook failed", "took", took, "error", err)
		a.opts.Recorder.Eventf(it.ref, v1.EventTypeWarning, ReasonFailedPreStopHook, "PreStopHook failed")
	default:
		log.Info("liveness action: preStop hook done", "took", took)
	}
	return int64(took.Seconds())
}

// hook runs one lifecycle handler (the kubelet's handlerRunner.Run).
func (it *item) hook(ctx context.Context, h *v1.LifecycleHandler) error {
	a := it.step
	switch {
	case h.Exec != nil:
		// In the container, without a timeout of its own (the kubelet
		// passes 0): ctx's grace period bounds it.
		_, _, err := a.opts.Runtime.ExecSync(ctx, it.ctr, h.Exec.Command, 0)
		return err
	case h.HTTPGet != nil:
		return it.httpHook(ctx, h.HTTPGet)
	case h.Sleep != nil:
		t := a.opts.Clock.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer t.Stop()
		select {
		case <-t.C():
			return nil
		case <-ctx.Done():
			return errors.New("container terminated before sleep hook finished")
		}
	}
	return errors.New("the preStop hook has no handler")
}

// httpHook sends the hook's GET as the HTTP probe handler would (host: the
// pod's IP unless set, the container's named ports, headers, scheme), with
// the kubelet's lifecycle User-Agent unless the hook sets one. Any HTTP
// response is a hook that ran, whatever its status (the kubelet's
// runHTTPHandler): only a request that got no response fails.
func (it *item) httpHook(ctx context.Context, get *v1.HTTPGetAction) error {
	a := it.step
	action := *get
	if !hasHeader(action.HTTPHeaders, "User-Agent") {
		action.HTTPHeaders = append(append([]v1.HTTPHeader(nil), action.HTTPHeaders...), v1.HTTPHeader{Name: "User-Agent", Value: LifecycleUserAgent})
	}
	spec := &runtime.Spec{
		Kind: runtime.KindHTTP, ProbeType: it.probe, Pod: it.pod, Container: it.container,
		Probe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &action}, TimeoutSeconds: int32(max(it.grace, 1))},
	}
	p, err := a.opts.HTTP.Prepare(spec)
	if err != nil {
		return err
	}
	out, err := p.Probe(ctx, runtime.Target{PodIP: it.pod.Status.PodIP, ContainerID: it.statusID, Attempt: 1})
	switch {
	case err != nil:
		return err
	case out.StatusCode == 0:
		return fmt.Errorf("HTTP lifecycle hook %s got no response: %s", get.Path, out.Output)
	}
	return nil
}

func hasHeader(hs []v1.HTTPHeader, name string) bool {
	for _, h := range hs {
		if textproto.CanonicalMIMEHeaderKey(h.Name) == textproto.CanonicalMIMEHeaderKey(name) {
			return true
		}
	}
	return false
}
