package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	compmetrics "k8s.io/component-base/metrics"
	_ "k8s.io/kubernetes/pkg/apis/core/install" // the kubelet registers core/v1 in its scheme: probe events need object references
	kubeprober "k8s.io/kubernetes/pkg/kubelet/prober"
	kuberesults "k8s.io/kubernetes/pkg/kubelet/prober/results"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/plugins/exec"
	probedhttp "github.com/probed/probed/plugins/http"
	"github.com/probed/probed/plugins/tcp"
	"github.com/probed/probed/runtime"
)

// impl is one prober manager under test.
type impl interface {
	AddPod(ctx context.Context, pod *v1.Pod)
	RemovePod(pod *v1.Pod)
	// Gone reports whether every worker has exited after RemovePod.
	Gone(baselineGoroutines, goroutines int) bool
	Gather() ([]*dto.MetricFamily, error)
	// Extra returns implementation-specific figures for the JSON line.
	Extra() map[string]any
	Close() error
}

type implOptions struct {
	pool, execPool int
	shards         int
	tick           time.Duration // probed's scheduler tick; 0: its default
	coalesce       time.Duration // probed's coalescing window (manager.Options.Coalesce)
	keepAlive      bool          // probed: HTTP probes keep their connection (plugins/http KeepAlive)
}

// drain consumes a results channel until stop is closed (both results
// managers block on a full 20-slot channel, R4).
func drain[T any](ch <-chan T, stop <-chan struct{}) {
	go func() {
		for {
			select {
			case <-ch:
			case <-stop:
				return
			}
		}
	}()
}

// ---- probed ----

type probedImpl struct {
	mgr  manager.Manager
	reg  *prometheus.Registry
	stop chan struct{}
}

func newProbed(sc *scenario, runner exec.Runner, o implOptions) (*probedImpl, error) {
	logger := slog.New(slog.DiscardHandler)
	rt, err := runtime.New(runtime.Options{PoolSize: o.pool, ExecPoolSize: o.execPool, Logger: logger})
	if err != nil {
		return nil, err
	}
	for kind, h := range map[string]runtime.Handler{
		runtime.KindExec: exec.New(runner),
		runtime.KindTCP:  tcp.New(),
		runtime.KindHTTP: probedhttp.New(probedhttp.KeepAlive(o.keepAlive)),
	} {
		if err := rt.Register(kind, h); err != nil {
			return nil, err
		}
	}
	p := &probedImpl{reg: prometheus.NewRegistry(), stop: make(chan struct{})}
	live, ready, startup := results.NewManager(), results.NewManager(), results.NewManager()
	for _, rm := range []results.Manager{live, ready, startup} {
		drain(rm.Updates(), p.stop)
	}
	p.mgr, err = manager.New(manager.Options{
		Status:            statusAdapter{sc.status},
		Liveness:          live,
		Readiness:         ready,
		Startup:           startup,
		Runtime:           rt,
		MetricsRegisterer: p.reg,
		Logger:            logger,
		Recorder:          &record.FakeRecorder{},
		Shards:            o.shards,
		Tick:              o.tick,
		Coalesce:          o.coalesce,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (p *probedImpl) AddPod(ctx context.Context, pod *v1.Pod) { p.mgr.AddPod(ctx, pod) }
func (p *probedImpl) RemovePod(pod *v1.Pod)                   { p.mgr.RemovePod(pod) }
func (p *probedImpl) Gather() ([]*dto.MetricFamily, error)    { return p.reg.Gather() }

func (p *probedImpl) Gone(_, _ int) bool {
	st, ok := manager.StatsOf(p.mgr)
	return ok && st.Entries == 0 && st.Running == 0
}

func (p *probedImpl) Extra() map[string]any {
	st, ok := manager.StatsOf(p.mgr)
	if !ok {
		return nil
	}
	return map[string]any{
		"sched_entries":    st.Entries,
		"sched_dispatched": st.Dispatched,
		"sched_skipped":    st.Skipped,
		"sched_backlog":    st.Backlog,
		"pools":            st.Pools,
	}
}

func (p *probedImpl) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := p.mgr.Close(ctx)
	close(p.stop)
	return err
}

// ---- kubelet ----

type kubeletImpl struct {
	mgr  kubeprober.Manager
	reg  compmetrics.KubeRegistry
	stop chan struct{}
}

func newKubelet(sc *scenario, runner kubeletRunner) (*kubeletImpl, error) {
	k := &kubeletImpl{reg: compmetrics.NewKubeRegistry(), stop: make(chan struct{})}
	// As the kubelet's /metrics/probes registry does: the prober's series
	// are live (unregistered component-base metrics are no-ops).
	if err := k.reg.Register(kubeprober.ProberResults); err != nil {
		return nil, fmt.Errorf("registering ProberResults: %w", err)
	}
	if err := k.reg.Register(kubeprober.ProberDuration); err != nil {
		return nil, fmt.Errorf("registering ProberDuration: %w", err)
	}
	live, ready, startup := kuberesults.NewManager(), kuberesults.NewManager(), kuberesults.NewManager()
	for _, rm := range []kuberesults.Manager{live, ready, startup} {
		drain(rm.Updates(), k.stop)
	}
	k.mgr = kubeprober.NewManager(sc.status, live, ready, startup, runner, &record.FakeRecorder{})
	return k, nil
}

func (k *kubeletImpl) AddPod(ctx context.Context, pod *v1.Pod) { k.mgr.AddPod(ctx, pod) }
func (k *kubeletImpl) RemovePod(pod *v1.Pod)                   { k.mgr.RemovePod(pod) }
func (k *kubeletImpl) Gather() ([]*dto.MetricFamily, error)    { return k.reg.Gather() }

// Gone: each kubelet worker is one goroutine that exits when stopped.
func (k *kubeletImpl) Gone(baseline, now int) bool { return now <= baseline }
func (k *kubeletImpl) Extra() map[string]any       { return nil }

func (k *kubeletImpl) Close() error {
	close(k.stop)
	return nil
}
