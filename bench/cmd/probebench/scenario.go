package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	kubepod "k8s.io/kubernetes/pkg/kubelet/pod"
	"k8s.io/kubernetes/pkg/kubelet/status"
	statustest "k8s.io/kubernetes/pkg/kubelet/status/testing"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"

	"github.com/probed/probed/bench/internal/lateness"
	"github.com/probed/probed/bench/internal/targets"
	"github.com/probed/probed/manager/customprobe"
)

// Probe modes.
const (
	modeInstant = "instant" // in-process exec handler that returns at once
	modeTCP     = "tcp"     // real TCP probes against the target server
	modeHTTP    = "http"    // real HTTP probes against the target server
	modeHung    = "hung"    // HTTP probes, 10% of the pods never answer
	// modeNode: an HTTP readiness and a TCP liveness probe per pod, as the
	// real node's benchmark pods have (bench/node).
	modeNode = "node"
)

const (
	containerName = "c"
	podNamePrefix = "pod-"
)

// scenario is the set of pods both implementations are fed, and the
// kubelet status manager that holds their statuses (shared by both: the
// kubelet's prober reads it directly, probed through statusAdapter).
type scenario struct {
	mode          string
	pods          []*v1.Pod
	status        status.Manager
	hungEvery     int
	rport, lport  int
	oneAddr       string
	periodSeconds int32
	// annotation: the probes are declared in the probed.io/probes
	// annotation instead of the spec, with the period as periodSeconds
	// plus periodMilliseconds (sub-second runs, probed only).
	annotation bool
	period     time.Duration
}

// workerIndex is the index of a (pod, probe type) in the recorder:
// readiness 2i, liveness 2i+1.
func workerIndex(pod int, liveness bool) int {
	if liveness {
		return 2*pod + 1
	}
	return 2 * pod
}

func newScenario(mode string, n int, period time.Duration, annotation bool, rport, lport int, oneAddr string, hungEvery int) *scenario {
	sc := &scenario{mode: mode, hungEvery: hungEvery, rport: rport, lport: lport, oneAddr: oneAddr,
		periodSeconds: int32(period / time.Second), annotation: annotation, period: period}
	sc.status = status.NewManager(&fake.Clientset{}, kubepod.NewBasicPodManager(),
		&statustest.FakePodDeletionSafetyProvider{}, kubeletutil.NewPodStartupLatencyTracker())
	logger := klog.Background()
	startedAt := metav1.NewTime(time.Now().Add(-time.Hour))
	started := true
	sc.pods = make([]*v1.Pod, n)
	for i := 0; i < n; i++ {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:      podNamePrefix + strconv.Itoa(i),
				Namespace: "bench",
				UID:       types.UID("uid-" + strconv.Itoa(i)),
			},
			Spec: v1.PodSpec{
				RestartPolicy: v1.RestartPolicyAlways,
				Containers: []v1.Container{{
					Name:           containerName,
					Image:          "bench",
					ReadinessProbe: sc.probe(false),
					LivenessProbe:  sc.probe(true),
				}},
			},
		}
		if annotation {
			pod.Spec.Containers[0].ReadinessProbe, pod.Spec.Containers[0].LivenessProbe = nil, nil
			pod.Annotations = map[string]string{customprobe.Annotation: sc.annotationProbes()}
		}
		sc.pods[i] = pod
		ip := "127.0.0.1"
		if mode != modeInstant {
			ip = targets.Addr(i)
			if oneAddr != "" {
				ip = oneAddr
			}
		}
		st := v1.PodStatus{
			Phase:  v1.PodRunning,
			PodIP:  ip,
			PodIPs: []v1.PodIP{{IP: ip}},
			ContainerStatuses: []v1.ContainerStatus{{
				Name:        containerName,
				ContainerID: "bench://" + strconv.Itoa(i),
				Started:     &started,
				State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: startedAt}},
			}},
		}
		sc.status.SetPodStatus(logger, pod, st)
	}
	return sc
}

// probe returns the probe spec of one probe type: defaulted as the API
// server would (timeout 1 s, thresholds 1/3), period from the run.
func (sc *scenario) probe(liveness bool) *v1.Probe {
	p := &v1.Probe{
		TimeoutSeconds:   1,
		PeriodSeconds:    sc.periodSeconds,
		SuccessThreshold: 1,
		FailureThreshold: 3,
	}
	port := sc.rport
	kind := "r"
	if liveness {
		port, kind = sc.lport, "l"
	}
	switch sc.mode {
	case modeInstant:
		p.Exec = &v1.ExecAction{Command: []string{"probe", kind}}
	case modeTCP:
		p.TCPSocket = &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}
	case modeNode:
		if liveness {
			p.TCPSocket = &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}
		} else {
			p.HTTPGet = &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(int32(port)), Scheme: v1.URISchemeHTTP}
		}
	case modeHTTP, modeHung:
		p.HTTPGet = &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(int32(port)), Scheme: v1.URISchemeHTTP}
	}
	return p
}

// annotationProbes is the probed.io/probes annotation of a sub-second
// run: the readiness and liveness probes of probe(), with the period as
// periodSeconds plus periodMilliseconds (200 ms: 1 s and -800 ms).
func (sc *scenario) annotationProbes() string {
	ms := sc.period.Milliseconds()
	secs, rest := ms/1000, ms%1000
	if secs == 0 {
		secs, rest = 1, rest-1000
	}
	type entry struct {
		Container          string `json:"container"`
		Type               string `json:"type"`
		PeriodSeconds      int64  `json:"periodSeconds"`
		PeriodMilliseconds int64  `json:"periodMilliseconds,omitempty"`
		TimeoutSeconds     int32  `json:"timeoutSeconds"`
		SuccessThreshold   int32  `json:"successThreshold"`
		FailureThreshold   int32  `json:"failureThreshold"`
		v1.ProbeHandler
	}
	var list []entry
	for _, liveness := range []bool{false, true} {
		p := sc.probe(liveness)
		typ := "readiness"
		if liveness {
			typ = "liveness"
		}
		list = append(list, entry{Container: containerName, Type: typ, PeriodSeconds: secs, PeriodMilliseconds: rest,
			TimeoutSeconds: p.TimeoutSeconds, SuccessThreshold: p.SuccessThreshold, FailureThreshold: p.FailureThreshold, ProbeHandler: p.ProbeHandler})
	}
	b, err := json.Marshal(list)
	if err != nil {
		panic(err) // plain structs
	}
	return string(b)
}

// healthyPod reports whether pod i answers its probes.
func (sc *scenario) healthyPod(i int) bool {
	return sc.hungEvery <= 0 || i%sc.hungEvery != sc.hungEvery-1
}

// statusAdapter gives probed the same status manager the kubelet reads.
type statusAdapter struct{ sm status.Manager }

func (a statusAdapter) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	return a.sm.GetPodStatus(uid)
}

// instantRunner is the in-process exec handler of both implementations: it
// records the call and returns success at once. It has both shapes: the
// kubelet's kubecontainer.CommandRunner and probed's exec.Runner.
type instantRunner struct{ rec *lateness.Recorder }

func (r instantRunner) record(id string, cmd []string) {
	pod, err := strconv.Atoi(id)
	if err != nil || len(cmd) < 2 {
		r.rec.Start(-1)
		return
	}
	r.rec.Start(workerIndex(pod, cmd[1] == "l"))
}

// kubeletRunner adapts instantRunner to kubecontainer.CommandRunner.
type kubeletRunner struct{ instantRunner }

func (r kubeletRunner) RunInContainer(_ context.Context, id kubecontainer.ContainerID, cmd []string, _ time.Duration) ([]byte, error) {
	r.record(id.ID, cmd)
	return nil, nil
}

// probedRunner adapts instantRunner to probed's exec.Runner.
type probedRunner struct{ instantRunner }

func (r probedRunner) RunInContainer(_ context.Context, id string, cmd []string, _ time.Duration) ([]byte, error) {
	if i := strings.Index(id, "://"); i >= 0 {
		id = id[i+3:]
	}
	r.record(id, cmd)
	return nil, nil
}

// failureCounts sums prober_probe_total{result="failed"} and {"unknown"}
// (the kubelet's metric, which probed reproduces with the same labels) over
// the pods keep accepts.
func failureCounts(mfs []*dto.MetricFamily, keep func(pod int) bool) (failed, unknown, successful int64) {
	for _, mf := range mfs {
		if mf.GetName() != "prober_probe_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var result, pod string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "result":
					result = l.GetValue()
				case "pod":
					pod = l.GetValue()
				}
			}
			i, err := strconv.Atoi(strings.TrimPrefix(pod, podNamePrefix))
			if err != nil || (keep != nil && !keep(i)) {
				continue
			}
			v := int64(m.GetCounter().GetValue())
			switch result {
			case "failed":
				failed += v
			case "unknown":
				unknown += v
			case "successful":
				successful += v
			}
		}
	}
	return
}
