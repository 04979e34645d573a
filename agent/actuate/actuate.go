// Package actuate is the seam between a liveness or startup probe's failure
// and what is done about it (spec K1, K2). In manifest mode the agent plays
// the container runtime: the store's simulator kills and restarts the
// container and runs --on-restart (package actuate/restart is not needed:
// store.Restart carries it). In cluster mode the kubelet owns containers:
// the actuator records an Event and, with --liveness-action=evict, evicts
// the pod (package kube/evict).
package actuate

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// Failure is a liveness or startup probe's Failure result of a running
// container: the kubelet would kill it (K2).
type Failure struct {
	// Pod is the pod as the agent knows it (read-only).
	Pod *v1.Pod
	// Container is the container's name; ContainerID the failed
	// instance ("containerd://…").
	Container   string
	ContainerID string
	// Probe is runtime.Liveness or runtime.Startup.
	Probe runtime.ProbeType
}

// Actuator acts on failures. ContainerFailed is called once per failed
// container instance and result change, from the agent's results
// goroutine: it must not block (queue slow work).
type Actuator interface {
	ContainerFailed(f Failure)
}

// PodLookup returns a pod with its current status (store.Store.Pod in
// manifest mode, the informer's statuses in cluster mode).
type PodLookup func(uid types.UID) (*v1.Pod, bool)

// OnFailure returns the verdicts.Consumer that hands every liveness or
// startup Failure of a container the pod's status still lists to a (K1: the
// kubelet's sync loop reads the liveness and startup results managers and
// kills on Failure). Other results, and containers no longer known, are
// ignored.
func OnFailure(lookup PodLookup, a Actuator) *Consumer {
	return &Consumer{lookup: lookup, actuator: a}
}

// Consumer is the verdicts.Consumer of OnFailure.
type Consumer struct {
	lookup   PodLookup
	actuator Actuator
}

// ProbeResult implements verdicts.Consumer.
func (c *Consumer) ProbeResult(t runtime.ProbeType, u results.Update) {
	if u.Result != results.Failure || (t != runtime.Liveness && t != runtime.Startup) {
		return
	}
	pod, ok := c.lookup(u.PodUID)
	if !ok {
		return
	}
	id := u.ContainerID.String()
	for _, list := range [][]v1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].ContainerID == id {
				c.actuator.ContainerFailed(Failure{Pod: pod, Container: list[i].Name, ContainerID: id, Probe: t})
				return
			}
		}
	}
}
