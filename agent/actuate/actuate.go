// Package actuate is the seam between a liveness or startup probe's failure
// and what is done about it (spec K1, K2), and the one skeleton every
// liveness action of cluster mode runs on.
//
// In manifest mode the agent plays the container runtime: the store's
// simulator (agent/simulator) is the Actuator, and it kills and restarts
// the container itself. In cluster mode the kubelet owns containers, and
// the Actuator is a Queue around one action's Step (event, evict or
// restart; each decorated by its guards, such as the namespace scope of
// agent/kube/nsscope). The Queue
//
//  1. takes each failed container instance once and decides at once what
//     the action does about it — act, record an Event only, refuse it (the
//     namespace is not selected, the pod is exempt), or hold it back for a
//     while — before anything about the failure is announced: the
//     verdict's Event (Consequence) and the action's own Events say the
//     same Decision;
//  2. hands the failures it acts on to its workers, shared by namespace
//     (runtime/tenant.Shares): a namespace holds at most NamespaceShare of
//     them, and no more than its fair share while others wait, so the
//     failures of one namespace that hold their workers long (a restart
//     waits out the container's grace period) never hold them all;
//  3. paces the node: an attempt takes a token of the node's bucket
//     (Burst at once, then one every Interval) once it has its worker, so
//     a refused or held failure never takes one;
//  4. tries an attempt that errs again after a backoff (RetryBase doubling
//     to RetryMax), MaxAttempts times, then records a Warning Event; a
//     wait the step asks for (a PodDisruptionBudget's 429) is no attempt.
//
// A new action is one file: a Step, whose Plan returns the Decision about
// one failure and, when it acts, the work of one attempt, and its Texts. A
// new guard is one file too: a Step that wraps another's Plan, refusing or
// holding what it must and checking again before each attempt.
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

// Announcer is an Actuator that says what it does about a failure before
// it does it, as the end of a sentence about the failure ("the container
// is to be restarted (--liveness-action=restart)", "the container is not
// restarted: namespace ns is not selected by …"): the verdict's Event says
// it. It decides once per container instance, whichever of Consequence and
// ContainerFailed comes first, and ContainerFailed does what was said.
// Consequence must not block.
type Announcer interface {
	Actuator
	Consequence(f Failure) string
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
	if u.Result != results.Failure {
		return
	}
	if f, ok := c.failure(t, u.PodUID, u.ContainerID.String()); ok {
		c.actuator.ContainerFailed(f)
	}
}

// Consequence says what the actuator does about a Failure verdict of probe
// type t of the container instance containerID of pod uid, as the
// announcement of the verdict says it: the Announcer's Consequence, or,
// for an Announcer, that nothing is done about a container the pod's
// status no longer lists. ok is false when the actuator is no Announcer
// (the caller says what it always leads to) or t is not liveness or
// startup.
func (c *Consumer) Consequence(t runtime.ProbeType, uid types.UID, containerID string) (what string, ok bool) {
	a, isAnnouncer := c.actuator.(Announcer)
	if !isAnnouncer || (t != runtime.Liveness && t != runtime.Startup) {
		return "", false
	}
	f, known := c.failure(t, uid, containerID)
	if !known {
		return "nothing is done: the pod's status no longer lists this container instance", true
	}
	return a.Consequence(f), true
}

// failure is the Failure of the container instance id of pod uid, when the
// pod's status lists it and t is liveness or startup.
func (c *Consumer) failure(t runtime.ProbeType, uid types.UID, id string) (Failure, bool) {
	if t != runtime.Liveness && t != runtime.Startup {
		return Failure{}, false
	}
	pod, ok := c.lookup(uid)
	if !ok {
		return Failure{}, false
	}
	for _, list := range [][]v1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].ContainerID == id {
				return Failure{Pod: pod, Container: list[i].Name, ContainerID: id, Probe: t}, true
			}
		}
	}
	return Failure{}, false
}
