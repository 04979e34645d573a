package reconciler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/agent/reconciler"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime/bound"
)

// noStatus is a StatusProvider without statuses: the workers exist, their
// runs find no status.
type noStatus struct{}

func (noStatus) GetPodStatus(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false }

// TestHostilePodsWorkedOutOnceAndBounded: many tenants' pods arrive at
// once beside others' — 50 with a 256 KiB annotation of 2,000 elements,
// 50 whose one element names a container of 200 KiB, 20 well-formed —
// under cluster mode's policy (at most 32 probes a pod, no period under
// 1 s). Each pod's annotation is read once, not again on its status
// changes or the periodic pod syncs; every view keeps at most MaxRefusals
// refusals with bounded texts; the well-formed pods' probes get their
// workers through the one road into a real manager, the hostile pods'
// none.
func TestHostilePodsWorkedOutOnceAndBounded(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	policy := podprobes.Policy{
		Annotation: customprobe.Options{Limits: customprobe.Limits{MaxProbes: 32, MaxProbesFlag: "--max-probes-per-pod",
			MinPeriod: time.Second, MinPeriodFlag: "--min-probe-period"}},
		Transforms: []podprobes.Transform{podprobes.LeaveSpecToKubelet},
	}
	m, err := manager.New(manager.Options{Status: noStatus{}, Clock: clk, Probes: policy, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	}()
	r := reconciler.New(reconciler.Options{Manager: m, Listener: &recorder{}, Probes: policy, Clock: clk, SyncFrequency: time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	element := `{"container":"app","type":"readiness","tcpSocket":{"port":1},"plugin":{"name":"k","params":{"x":"` + strings.Repeat("y", 80) + `"}}},`
	many := "[" + strings.TrimSuffix(strings.Repeat(element, (customprobe.MaxAnnotationBytes-2)/len(element)), ",") + "]"
	longName := `[{"container":"` + strings.Repeat("c", 200<<10) + `","type":"readiness","tcpSocket":{"port":1}}]`
	good := `[{"container":"app","type":"readiness","periodSeconds":1,"tcpSocket":{"port":1}},{"container":"app","type":"startup","periodSeconds":5,"tcpSocket":{"port":1}}]`
	newPod := func(name, annotation, status string) *pods.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name, UID: types.UID(name),
			Annotations: map[string]string{customprobe.Annotation: annotation}},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{
				TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(1)}}}}}}}
		return &pods.Pod{Pod: p, Origin: "test", SpecHash: "spec-" + name, StatusHash: status}
	}
	all := func(status string) pods.Update {
		u := pods.Update{Op: pods.Upsert}
		for i := range 50 {
			u.Pods = append(u.Pods, newPod(fmt.Sprintf("many-%03d", i), many, status), newPod(fmt.Sprintf("long-%03d", i), longName, status))
		}
		for i := range 20 {
			u.Pods = append(u.Pods, newPod(fmt.Sprintf("good-%03d", i), good, status))
		}
		return u
	}
	start := customprobe.Reads()
	r.Apply(all("s1"))
	for _, s := range []string{"s2", "s3", "s4"} { // kubelet status writes
		r.Apply(all(s))
	}
	for range 3 { // periodic pod syncs
		clk.Step(time.Minute)
	}
	if n := customprobe.Reads() - start; n != 120 {
		t.Errorf("120 pods' annotations read %d times, want once each", n)
	}

	for _, p := range r.Pods() {
		v, ok := r.Probes(p.Pod.UID)
		if !ok || v != p.Probes {
			t.Fatalf("%s: the reconciler's view is not the pod's", p.Pod.Name)
		}
		if len(v.Refused) > podprobes.MaxRefusals {
			t.Errorf("%s keeps %d refusals", p.Pod.Name, len(v.Refused))
		}
		for _, rf := range v.Refused {
			for _, s := range []string{rf.Container, rf.Field, rf.Reason, rf.Err.Error()} {
				if len(s) > 3*bound.MessageBytes {
					t.Fatalf("%s keeps a refusal text of %d bytes", p.Pod.Name, len(s))
				}
			}
		}
		switch {
		case strings.HasPrefix(p.Pod.Name, "many-"):
			if len(v.Probes) != 0 || len(v.Refused) != 1 || !strings.Contains(v.Refused[0].Reason, "--max-probes-per-pod") {
				t.Fatalf("%s: %d probes, refused %+v", p.Pod.Name, len(v.Probes), v.Refused)
			}
		case strings.HasPrefix(p.Pod.Name, "long-"):
			if len(v.Probes) != 0 || len(v.Refused) != 1 || v.Refused[0].Element != 0 {
				t.Fatalf("%s: %d probes, refused %+v", p.Pod.Name, len(v.Probes), v.Refused)
			}
		default:
			if len(v.Probes) != 2 || len(v.Refused) != 0 {
				t.Fatalf("%s: %d probes, refused %+v", p.Pod.Name, len(v.Probes), v.Refused)
			}
		}
	}
	if st, _ := manager.StatsOf(m); st.Entries != 20*2 {
		t.Errorf("%d workers, want the well-formed pods' 40 (no spec probe: the kubelet's)", st.Entries)
	}
}
