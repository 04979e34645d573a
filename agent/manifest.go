package agent

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/agent/simulator"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/agent/statuspage"
	"github.com/probed/probed/agent/store"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/podprobes"
	probeexec "github.com/probed/probed/plugins/exec"
)

// manifestMode builds the rooms of manifest mode: the directory source, the
// status store that plays the kubelet, the container simulator, the state
// directory; exec probes run on this host with --allow-host-exec.
func manifestMode(d deps) (*mode, error) {
	opts := d.opts
	src, err := source.New(source.Options{Path: opts.ManifestDir, Logger: opts.Logger, Rescan: opts.Rescan,
		Manifest: manifest.Options{KnownPluginKind: d.knownProbeKind}, Registerer: d.reg})
	if err != nil {
		return nil, err
	}
	st := store.New(store.Options{Logger: opts.Logger, PodIP: opts.PodIP})
	sim := simulator.New(simulator.Options{Store: st, Recorder: d.events, Logger: opts.Logger,
		OnRestart: opts.OnRestart, OnRestartTimeout: opts.OnRestartTimeout})
	// Back-off timers, delayed starts, --on-restart commands.
	d.onClose(func(context.Context) error { sim.Close(); return nil })
	saver, err := newStateSaver(opts.StateDir, opts.StateInterval, st, d.log)
	if err != nil {
		return nil, err
	}
	// After the simulator's closer: the last state is written first.
	d.onClose(saver.close)
	var runner probeexec.ModeRunner = probeexec.DisabledRunner{}
	if opts.AllowHostExec {
		runner = &probeexec.LocalRunner{}
	}
	return &mode{
		source:    src,
		status:    st,
		runner:    runner,
		recorder:  d.events,
		runEvents: d.events.Unlogged(),
		probes:    manifest.ProbesPolicy(d.knownProbeKind),
		pods:      staleMarker{st, src},
		bind:      func(m manager.Manager) { st.SetProber(m) },
		listeners: listeners{st},
		consumers: []verdicts.Consumer{st, actuate.OnFailure(st.Pod, sim)},
		// Each periodic pod sync also regenerates the statuses: every
		// status generation triggers readiness of not-ready containers
		// (M7c).
		onSync:    st.Resync,
		services:  []*service{{name: "state writer", run: saver.run, stopFirst: true}},
		manifests: src.Report,
		page: func(o *statuspage.Options) {
			o.Manifests = func() []source.Rejection { return src.Report().Rejected }
		},
		held:     func(*v1.Pod, *podprobes.View) []history.Refused { return nil },
		startMsg: "probed running",
		startLog: []any{"manifests", opts.ManifestDir, "allowHostExec", opts.AllowHostExec, "stateDir", opts.StateDir},
	}, nil
}

// staleMarker serves the store's pods with the ConditionManifestStale
// condition on those the source keeps at their last valid version.
type staleMarker struct {
	store *store.Store
	src   *source.Source
}

func (m staleMarker) mark(p *v1.Pod) *v1.Pod {
	if r, ok := m.src.StaleOf(p.UID); ok {
		source.MarkStale(p, r)
	}
	return p
}

func (m staleMarker) PodNames() []types.NamespacedName { return m.store.PodNames() }

func (m staleMarker) PodByName(namespace, name string) (*v1.Pod, bool) {
	p, ok := m.store.PodByName(namespace, name)
	if ok {
		m.mark(p)
	}
	return p, ok
}
