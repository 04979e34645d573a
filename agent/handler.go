package agent

import (
	"net"
	"net/http"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/agent/api"
	"github.com/probed/probed/agent/health"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/agent/statuspage"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime"
)

// Manifests returns the report of GET /manifests: in manifest mode the
// source's last scan (rejected and skipped documents), in cluster mode an
// empty report of source "cluster".
func (a *Agent) Manifests() source.Report { return a.mode.manifests() }

// Addr is the address the API listens on.
func (a *Agent) Addr() net.Addr { return a.ln.Addr() }

// Handler returns the agent's HTTP API.
func (a *Agent) Handler() http.Handler {
	return api.New(api.Options{
		Pods:         a.mode.pods,
		ProbeMetrics: a.probeReg,
		Metrics:      a.reg,
		Events:       a.events,
		Transitions:  a.transitions,
		Healthy:      health.New(a.mode.source.HasSynced, a.mgr).Check,
		Manifests:    a.Manifests,
		Guards:       a.mode.guards,
		Debug: func() any {
			st, _ := manager.StatsOf(a.mgr)
			return map[string]any{"scheduler": st, "plugins": a.plugins.Status()}
		},
		History: func(namespace, name string) (history.PodHistory, bool) {
			pod, ok := a.mode.pods.PodByName(namespace, name)
			if !ok {
				return history.PodHistory{}, false
			}
			probes := a.hist.Pod(pod.UID)
			for i := range probes {
				if p := &probes[i]; p.Handler == string(runtime.KindExec) && len(p.Results) > 0 {
					// How the exec probes of the container run, in the
					// runner's own word.
					p.ExecMode = a.mode.runner.Mode(p.Results[len(p.Results)-1].ContainerID)
				}
			}
			return history.PodHistory{Namespace: namespace, Name: name, UID: string(pod.UID), Probes: probes, Refused: a.refused(pod)}, true
		},
		Page: a.pageOptions(),
	})
}

// pageOptions are the status page's sources beside the API's own: the
// scheduler's figures, the plugins, the pods' probes as the reconciler
// worked them out, and the mode's (manifest mode: the rejected manifests;
// cluster mode: the API server connection, the condition writer and the
// node's probe budget).
func (a *Agent) pageOptions() *statuspage.Options {
	opts := &statuspage.Options{
		Scheduler:   func() (manager.Stats, bool) { return manager.StatsOf(a.mgr) },
		Plugins:     a.plugins.Status,
		Declared:    a.podProbes,
		HistorySize: a.hist.Size(),
		Logger:      a.log,
	}
	a.mode.page(opts)
	return opts
}

// refused lists the pod's refused probes as the API serves them: its view's
// refusals and those the mode holds back (cluster mode: every probe the
// node's budget holds back).
func (a *Agent) refused(pod *v1.Pod) []history.Refused {
	view, _ := a.podProbes(pod)
	out := history.RefusedOf(view)
	if view == nil {
		return out
	}
	return append(out, a.mode.held(pod, view)...)
}

// podProbes returns the probes of the pod as the reconciler worked them out
// for its spec (podprobes.View), false when it does not know the pod.
func (a *Agent) podProbes(pod *v1.Pod) (*podprobes.View, bool) {
	return a.reconciler.Probes(pod.UID)
}

// PodHistory is the body of GET /pods/{namespace}/{name}/probes.
type PodHistory = history.PodHistory
