package manager

import (
	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/runtime"
)

// customProbe is a probe declared in the probed.io/probes annotation: a
// built-in handler (probe holds it) or a plugin kind (plugin). It joins the
// same state machine as the spec's probes (thresholds, startup gating,
// Started/Ready, restarts).
type customProbe struct {
	container *v1.Container
	probeType runtime.ProbeType
	probe     *v1.Probe
	kind      string
	plugin    *runtime.PluginAction // nil for a built-in handler
	// milliseconds are the timing fields' millisecond offsets; nil: whole
	// seconds.
	milliseconds *runtime.Milliseconds
	// extension: periods by state and expectations (never nil).
	extension *runtime.Extension
}

// timing is the probe's timing, periods by state included.
func (cp *customProbe) timing() runtime.Timing {
	return runtime.TimingOf(cp.probe, cp.milliseconds).WithPeriods(&cp.extension.Periods)
}

// customProbes returns the valid custom probes of the pod's annotation. The
// agent validates the annotation when a pod arrives and reports every error
// once (a manifest's rejection, or cluster mode's Event); here an invalid
// entry is left out, the rest run, and a debug line says so (AddPod runs on
// every pod sync: a warning here would repeat every minute per pod). A kind
// no handler serves is kept: its runs are errored (never a failure) until a
// plugin serving it registers.
func (m *manager) customProbes(pod *v1.Pod) []customProbe {
	if _, ok := pod.Annotations[customprobe.Annotation]; !ok {
		return nil
	}
	opts := m.annotation
	opts.KnownKind = nil
	probes, errs := customprobe.ParseWith(pod, opts)
	if len(errs) > 0 {
		m.log.Debug("invalid custom probes ignored", "pod", klogPod(pod), "annotation", customprobe.Annotation, "err", errs.ToAggregate().Error())
	}
	out := make([]customProbe, 0, len(probes))
	for i := range probes {
		p := &probes[i]
		c := findContainer(pod, p.Container)
		if c == nil {
			continue
		}
		cp := customProbe{container: c, probeType: p.Type, probe: &p.Probe, kind: p.Kind(), milliseconds: p.Offsets(), extension: p.Extension()}
		if p.Plugin.Name != "" {
			cp.plugin = &p.Plugin
		}
		out = append(out, cp)
	}
	return out
}

// findContainer returns the container of the pod (or a restartable init
// container) with the given name.
func findContainer(pod *v1.Pod, name string) *v1.Container {
	var found *v1.Container
	probedContainers(pod, func(c *v1.Container) bool {
		if c.Name == name {
			found = c
			return false
		}
		return true
	})
	return found
}
