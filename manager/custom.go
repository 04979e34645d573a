package manager

import (
	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime"
)

// customProbe is a probe declared in the probed.io/probes annotation and
// served by a plugin kind.
type customProbe struct {
	container *v1.Container
	probeType runtime.ProbeType
	probe     *v1.Probe
	plugin    *runtime.PluginAction
}

// customProbes returns the pod's custom probes.
func (m *manager) customProbes(pod *v1.Pod) []customProbe { return nil }
