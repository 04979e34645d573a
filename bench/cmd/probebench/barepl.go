package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/bench/internal/bare"
)

// implBare is the bare prober (bench/internal/bare): a goroutine and a
// ticker per probe, a plain GET with keep-alives off, a plain dial and
// close — the floor of a prober with the kubelet's model, beside probed
// and the kubelet on the same pods (tcp, http and node modes).
const implBare = "bare"

type bareImpl struct {
	sc *scenario
	b  *bare.Prober
}

func newBare(sc *scenario) (*bareImpl, error) {
	if sc.mode == modeInstant {
		return nil, fmt.Errorf("-impl bare probes real targets: -mode tcp, http, hung or node, not %q", sc.mode)
	}
	return &bareImpl{sc: sc, b: bare.New()}, nil
}

// AddPod starts the pod's readiness (worker 2i) and liveness (2i+1)
// probes against the pod's IP, as the scenario's probe specs say.
func (p *bareImpl) AddPod(_ context.Context, pod *v1.Pod) {
	i := podIndex(pod)
	st, _ := p.sc.status.GetPodStatus(pod.UID)
	for _, liveness := range []bool{false, true} {
		spec := p.sc.probe(liveness)
		period := time.Duration(spec.PeriodSeconds) * time.Second
		if p.sc.annotation {
			period = p.sc.period
		}
		probe := bare.Probe{Period: period, Timeout: time.Duration(spec.TimeoutSeconds) * time.Second}
		switch {
		case spec.HTTPGet != nil:
			probe.URL = "http://" + net.JoinHostPort(st.PodIP, spec.HTTPGet.Port.String()) + spec.HTTPGet.Path
		case spec.TCPSocket != nil:
			probe.Addr = net.JoinHostPort(st.PodIP, spec.TCPSocket.Port.String())
		}
		p.b.Start(workerIndex(i, liveness), probe)
	}
}

func (p *bareImpl) RemovePod(pod *v1.Pod) {
	i := podIndex(pod)
	p.b.Remove(workerIndex(i, false))
	p.b.Remove(workerIndex(i, true))
}

func (p *bareImpl) Gone(_, _ int) bool { return p.b.Running() == 0 }

// Gather has no prober_probe_total: the bare prober keeps two counts only
// (Extra).
func (p *bareImpl) Gather() ([]*dto.MetricFamily, error) { return nil, nil }

func (p *bareImpl) Extra() map[string]any {
	ok, failed := p.b.Counts()
	return map[string]any{"bare_ok": ok, "bare_failed": failed}
}

func (p *bareImpl) Close() error { p.b.Stop(); return nil }

// podIndex is i of the scenario's pod "pod-i".
func podIndex(pod *v1.Pod) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(pod.Name, podNamePrefix))
	return i
}
