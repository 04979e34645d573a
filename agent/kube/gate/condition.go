package gate

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// The reasons of the readiness-gate condition.
const (
	// ReasonProbeSucceeded: every annotation readiness probe of the pod is
	// Success and every annotation startup probe has succeeded (True).
	ReasonProbeSucceeded = "ProbeSucceeded"
	// ReasonProbeFailed: an annotation readiness probe's result is
	// Failure (False); this includes the initial Failure of a new
	// container (W1).
	ReasonProbeFailed = "ProbeFailed"
	// ReasonContainerNotStarted: a container with annotation readiness or
	// startup probes is not running, or has not started: its startup probe
	// has not succeeded, or the kubelet reports it not started (False).
	ReasonContainerNotStarted = "ContainerNotStarted"
	// ReasonNoProbes: the pod has no readiness probe probed runs (the
	// annotation's or offloaded), so nothing holds it back (True): a gated
	// pod is never stranded.
	ReasonNoProbes = "NoProbes"
)

// The messages of the True conditions.
const (
	MessageProbesSucceeded = "all readiness probes succeeded"
	MessageNoProbes        = "no readiness probe in the " + customprobe.Annotation + " annotation or the " + customprobe.OffloadedAnnotation + " record"
)

// Condition is the readiness-gate condition probed wants on a pod.
type Condition struct {
	// Known is false while some probe that decides the condition has no
	// result yet (a container that survived a restart of probed, W6c, or
	// a worker that has not seen its container): the pod's existing
	// condition is kept and nothing is written, as the kubelet keeps Ready
	// across its own restart (M8, M9).
	Known bool
	// Status is True or False (meaningful when Known).
	Status v1.ConditionStatus
	// Reason is one of the Reason constants.
	Reason string
	// Message names the containers and probes that hold the pod back
	// ("readiness probe of container app failed"), joined with "; ". It
	// never holds a probe's output, target or parameters (BR-22).
	Message string
}

// Results are the results managers a condition reads.
type Results struct {
	Readiness, Startup results.Manager
}

// Decide computes the readiness-gate condition of pod from the probes probed
// runs for it (its view, podprobes.View: in cluster mode the elements of
// the probed.io/probes annotation that were not refused), its container
// statuses as the kubelet wrote them, and the results managers; proberStart
// is when the prober manager started (W6c).
//
// Per container that has annotation readiness or startup probes, in pod
// order (init containers first):
//   - not running, or without a container ID: False, ContainerNotStarted;
//   - startup probe: the result for the current container ID must be
//     Success; Failure or Unknown (W1) is False, ContainerNotStarted. With
//     no result, a container that survived a restart of probed and that the
//     pod's status reports started counts as started (M8); otherwise the
//     condition is not known, unless its readiness result is Failure (then
//     False, ContainerNotStarted);
//   - readiness probe: Success passes, Failure is False (ProbeFailed, or
//     ContainerNotStarted when the container has not started); no result
//     is not known.
//
// Any False makes the condition False (the first failure gives the reason);
// else anything not known makes it not known; else True, ProbeSucceeded, or
// NoProbes when the pod has no annotation readiness probe.
func Decide(pod *v1.Pod, probes *podprobes.View, res Results, proberStart time.Time) Condition {
	type want struct{ readiness, startup bool }
	wanted := map[string]*want{}
	readinessProbes := 0
	var all []podprobes.Probe
	if probes != nil {
		all = probes.Probes
	}
	for i := range all {
		p := &all[i]
		if p.Type != runtime.Readiness && p.Type != runtime.Startup {
			continue
		}
		w := wanted[p.Container.Name]
		if w == nil {
			w = &want{}
			wanted[p.Container.Name] = w
		}
		if p.Type == runtime.Readiness {
			w.readiness = true
			readinessProbes++
		} else {
			w.startup = true
		}
	}

	var d decision
	for _, name := range containerNames(pod) {
		w := wanted[name]
		if w == nil {
			continue
		}
		d.container(name, statusOf(pod, name), w.readiness, w.startup, res, proberStart)
	}
	switch {
	case len(d.failures) > 0:
		return Condition{Known: true, Status: v1.ConditionFalse, Reason: d.reason, Message: strings.Join(d.failures, "; ")}
	case d.unknown:
		return Condition{}
	case readinessProbes == 0:
		return Condition{Known: true, Status: v1.ConditionTrue, Reason: ReasonNoProbes, Message: MessageNoProbes}
	}
	return Condition{Known: true, Status: v1.ConditionTrue, Reason: ReasonProbeSucceeded, Message: MessageProbesSucceeded}
}

// decision collects the per-container outcomes of Decide.
type decision struct {
	reason   string   // of the first failure
	failures []string // messages
	unknown  bool
}

func (d *decision) fail(reason, format string, args ...any) {
	if len(d.failures) == 0 {
		d.reason = reason
	}
	d.failures = append(d.failures, fmt.Sprintf(format, args...))
}

// container judges one container's annotation readiness and startup probes.
func (d *decision) container(name string, cs *v1.ContainerStatus, readiness, startup bool, res Results, proberStart time.Time) {
	if cs == nil || cs.ContainerID == "" || cs.State.Running == nil {
		d.fail(ReasonContainerNotStarted, "container %s is not running", name)
		return
	}
	id := results.ParseContainerID(cs.ContainerID)
	startupUnknown := false
	if startup {
		r, ok := res.Startup.Get(id)
		switch {
		case ok && r == results.Success:
		case ok:
			d.fail(ReasonContainerNotStarted, "startup probe of container %s has not succeeded", name)
			return
		case survivedRestart(cs, proberStart) && cs.Started != nil && *cs.Started:
			// M8: started before probed's restart, and reported so.
		default:
			startupUnknown = true
		}
	}
	if !readiness {
		d.unknown = d.unknown || startupUnknown
		return
	}
	r, ok := res.Readiness.Get(id)
	switch {
	case ok && r == results.Failure && startupUnknown:
		d.fail(ReasonContainerNotStarted, "startup probe of container %s has not succeeded", name)
	case ok && r == results.Failure && cs.Started != nil && !*cs.Started:
		d.fail(ReasonContainerNotStarted, "container %s has not started", name)
	case ok && r == results.Failure:
		d.fail(ReasonProbeFailed, "readiness probe of container %s failed", name)
	case ok && r == results.Success:
		d.unknown = d.unknown || startupUnknown
	default:
		d.unknown = true
	}
}

// survivedRestart reports whether the container was running before the
// prober manager started: its workers wrote no initial result (W6c). The
// manager's rule with cluster mode's window, 0
// (manager.Options.AnyRunningSurvives).
func survivedRestart(cs *v1.ContainerStatus, proberStart time.Time) bool {
	return manager.SurvivedRestart(cs, proberStart, 0)
}

// containerNames lists the pod's init containers and containers in order.
func containerNames(pod *v1.Pod) []string {
	names := make([]string, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		names = append(names, pod.Spec.InitContainers[i].Name)
	}
	for i := range pod.Spec.Containers {
		names = append(names, pod.Spec.Containers[i].Name)
	}
	return names
}

// statusOf finds the container's status by name: in the container statuses
// when it has a container ID there, else in the init container statuses (as
// W5.3 looks), else whatever entry there is, or nil.
func statusOf(pod *v1.Pod, name string) *v1.ContainerStatus {
	if cs := findStatus(pod.Status.ContainerStatuses, name); cs != nil && cs.ContainerID != "" {
		return cs
	}
	if cs := findStatus(pod.Status.InitContainerStatuses, name); cs != nil {
		return cs
	}
	return findStatus(pod.Status.ContainerStatuses, name)
}

func findStatus(list []v1.ContainerStatus, name string) *v1.ContainerStatus {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}
