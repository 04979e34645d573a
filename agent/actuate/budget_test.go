package actuate_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/runtime"
)

// workloadPods are n pods of ReplicaSet rs in ns with the annotations.
func workloadPods(ns, rs string, n int, annotations map[string]string) []*v1.Pod {
	yes := true
	var out []*v1.Pod
	for i := range n {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", rs, i), UID: types.UID(fmt.Sprintf("%s-%s-%d", ns, rs, i)),
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: types.UID(ns + "-" + rs), Controller: &yes}}},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
		out = append(out, p)
	}
	return out
}

type budgetEnv struct {
	*env
	acts   *acts
	budget *actuate.Budget
	reg    *prometheus.Registry
	mu     sync.Mutex
	pods   []*v1.Pod
}

func newBudgetEnv(t *testing.T, pods []*v1.Pod) *budgetEnv {
	b := &budgetEnv{acts: newActs(), reg: prometheus.NewRegistry(), pods: pods}
	close(b.acts.release)
	var err error
	b.env = newEnv(t, actuate.StepFunc(func(f actuate.Failure) actuate.Plan { return b.budget.Plan(f) }), func(o *actuate.Options) { o.Burst = 100 })
	b.budget, err = actuate.RestartBudget(b.acts, actuate.BudgetOptions{Clock: b.clock, Registerer: b.reg,
		Pods: func() []*v1.Pod { b.mu.Lock(); defer b.mu.Unlock(); return b.pods }})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func failed(pod *v1.Pod) actuate.Failure {
	return actuate.Failure{Pod: pod, Container: "app", ContainerID: "containerd://" + string(pod.UID), Probe: runtime.Liveness}
}

func (b *budgetEnv) heldTotal() float64 {
	n, _ := testutil.GatherAndCount(b.reg, "probed_restarts_held_total")
	if n != 1 {
		return -1
	}
	mfs, _ := b.reg.Gather()
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}

// The storm guard (issue 30 item 2): 4 pods of a ReplicaSet with a budget
// of 1 per 5 minutes fail together: one is restarted, three wait, each
// with one Event and an announcement saying it is held back by the
// restart budget and why — never that it is to be restarted; one more is
// released each time the oldest restart leaves the window.
func TestRestartBudgetAtMostNPerWindow(t *testing.T) {
	pods := workloadPods("ns", "web", 4, map[string]string{actuate.RestartBudgetAnnotation: "1"})
	b := newBudgetEnv(t, pods)
	said := map[string]string{}
	for _, p := range pods {
		said[p.Name] = b.q.Consequence(failed(p))
		b.q.ContainerFailed(failed(p))
	}
	if said["web-0"] != testTexts.Acting {
		t.Errorf("web-0 announced %q", said["web-0"])
	}
	want := "the container is not restarted yet: held back by the restart budget: 1 of ReplicaSet ns/web's 4 pods on this node acted on in the last 5m0s, probed.io/restart-budget=1 allows 1"
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		if said[name] != want {
			t.Errorf("%s announced %q, want %q", name, said[name], want)
		}
	}
	eventually(t, "the first restart", func() bool { return b.acts.get(b.acts.done, "ns") == 1 })
	eventually(t, "three held", func() bool { return b.log.count("held back") == 3 })
	msgs := b.messages()
	if len(msgs) != 3 {
		t.Fatalf("events %q, want one per held failure", msgs)
	}
	for _, m := range msgs {
		if m != "LivenessProbeFailed: Container app failed liveness probe; "+want {
			t.Errorf("event %q", m)
		}
	}
	if got := b.heldTotal(); got != 3 {
		t.Errorf("probed_restarts_held_total %v, want 3", got)
	}
	if held := b.budget.Held(); len(held) != 3 || held[0].Pod != "web-1" || !strings.HasPrefix(held[0].Why, actuate.HeldByBudget) {
		t.Errorf("Held() = %+v", held)
	}

	for i := 2; i <= 4; i++ {
		b.clock.Step(5*time.Minute - time.Second)
		time.Sleep(10 * time.Millisecond)
		if n := b.acts.get(b.acts.done, "ns"); n != i-1 {
			t.Fatalf("%d restarts before the window passed, want %d", n, i-1)
		}
		b.clock.Step(time.Second)
		eventually(t, fmt.Sprintf("restart %d after the window", i), func() bool { return b.acts.get(b.acts.done, "ns") == i })
	}
	if n := len(b.messages()); n != 3 {
		t.Errorf("%d events: a hold is said once per failure", n)
	}
	if got := b.heldTotal(); got != 3 {
		t.Errorf("probed_restarts_held_total %v after the releases, want 3 (each failure once)", got)
	}
	if held := b.budget.Held(); len(held) != 0 {
		t.Errorf("Held() = %+v after every restart", held)
	}
}

// A share of the workload's pods on the node, rounded up (20% of 10: 2);
// another workload, and a pod without the annotation, have rooms of their
// own or none; an invalid annotation acts as without it and says why;
// hostile values of both annotations never hold or panic.
func TestRestartBudgetShareAndHostileValues(t *testing.T) {
	pods := workloadPods("ns", "api", 10, map[string]string{actuate.RestartBudgetAnnotation: "20%", actuate.RestartBudgetWindowAnnotation: "1m"})
	other := workloadPods("ns", "db", 2, map[string]string{actuate.RestartBudgetAnnotation: "1"})
	plain := workloadPods("ns", "plain", 3, nil)
	all := append(append(append([]*v1.Pod{}, pods...), other...), plain...)
	b := newBudgetEnv(t, all)
	acting := 0
	for _, p := range all {
		if b.q.Consequence(failed(p)) == testTexts.Acting {
			acting++
		}
	}
	if acting != 2+1+3 {
		t.Errorf("%d acting, want 2 of api, 1 of db, the 3 without a budget", acting)
	}

	hostile := []string{"-1", "150%", "abc", strings.Repeat("7", 1<<18), "1.5", ""}
	windows := []string{"-5m", "0s", "1ns", "2h", "forever", strings.Repeat("9", 1<<18)}
	for i, val := range hostile {
		p := workloadPods("evil", fmt.Sprintf("bad%d", i), 1, map[string]string{actuate.RestartBudgetAnnotation: val})[0]
		said := b.q.Consequence(failed(p))
		if !strings.HasPrefix(said, testTexts.Acting+", without a restart budget (annotation probed.io/restart-budget: want") || len(said) > 400 {
			t.Errorf("budget %.20q: %.400q", val, said)
		}
	}
	for i, val := range windows {
		p := workloadPods("evil", fmt.Sprintf("win%d", i), 1, map[string]string{actuate.RestartBudgetAnnotation: "1", actuate.RestartBudgetWindowAnnotation: val})[0]
		said := b.q.Consequence(failed(p))
		if !strings.HasPrefix(said, testTexts.Acting+", without a restart budget (annotation probed.io/restart-budget-window: want a duration from 10s to 1h0m0s") || len(said) > 400 {
			t.Errorf("window %.20q: %.400q", val, said)
		}
	}
	// "0": never acted on, held for a window at a time.
	zero := workloadPods("ns", "zero", 1, map[string]string{actuate.RestartBudgetAnnotation: "0"})[0]
	if said := b.q.Consequence(failed(zero)); !strings.Contains(said, "held back by the restart budget: 0 of ReplicaSet ns/zero's 1 pods") {
		t.Errorf("budget 0: %q", said)
	}
}

// A failure whose attempt is refused after all (the namespace lost its
// label) gives its room back.
func TestRestartBudgetRefusedGivesTheRoomBack(t *testing.T) {
	pods := workloadPods("ns", "web", 2, map[string]string{actuate.RestartBudgetAnnotation: "1"})
	var mu sync.Mutex
	refuse := true
	inner := actuate.StepFunc(func(f actuate.Failure) actuate.Plan {
		return actuate.Plan{Decision: actuate.Decision{Do: actuate.Act}, Act: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if refuse {
				refuse = false
				return actuate.Refused("namespace ns is not selected")
			}
			return nil
		}}
	})
	budget, err := actuate.RestartBudget(inner, actuate.BudgetOptions{Pods: func() []*v1.Pod { return pods }})
	if err != nil {
		t.Fatal(err)
	}
	p0 := budget.Plan(failed(pods[0]))
	if p0.Do != actuate.Act {
		t.Fatalf("first: %+v", p0.Decision)
	}
	if p := budget.Plan(failed(pods[1])); p.Do != actuate.Hold {
		t.Fatalf("second while the first holds the room: %+v", p.Decision)
	}
	if err := p0.Act(context.Background()); err == nil {
		t.Fatal("the attempt was not refused")
	}
	if p := budget.Plan(failed(pods[1])); p.Do != actuate.Act {
		t.Fatalf("second after the refusal: %+v", p.Decision)
	}
}
