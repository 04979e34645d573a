package agent

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/manager"
)

// listeners tells each of its pods.Listeners in turn.
type listeners []pods.Listener

func (ls listeners) PodAdded(p *pods.Pod) {
	for _, l := range ls {
		l.PodAdded(p)
	}
}

func (ls listeners) PodStatusChanged(p *pods.Pod) {
	for _, l := range ls {
		l.PodStatusChanged(p)
	}
}

func (ls listeners) PodRemoved(p *pods.Pod) {
	for _, l := range ls {
		l.PodRemoved(p)
	}
}

// historyListener forgets the probe history and run log of removed pods.
type historyListener struct{ a *Agent }

func (historyListener) PodAdded(*pods.Pod)         {}
func (historyListener) PodStatusChanged(*pods.Pod) {}
func (l historyListener) PodRemoved(p *pods.Pod)   { l.a.forget(p.Pod.UID) }

// forget drops what the history and the run log keep of a pod.
func (a *Agent) forget(uid types.UID) {
	a.hist.Forget(uid)
	a.runs.Forget(uid)
}

// observers hands each run record to every observer in turn.
type observers []manager.Observer

func (o observers) ProbeRan(r manager.RunRecord) {
	for _, ob := range o {
		ob.ProbeRan(r)
	}
}
