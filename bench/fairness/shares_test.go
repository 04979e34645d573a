package fairness

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/kube/limits"
	probedruntime "github.com/probed/probed/runtime"
)

// sharedPod is a pod of namespace ns.
func sharedPod(ns, name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
}

// everySecond is n probes of period 1 s.
func everySecond(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Second
	}
	return out
}

// BenchmarkBudgetShare is the review's budget case at the CLI's defaults
// (--max-probe-rate 1000): a namespace's 32 pods of 32 probes at 1 s
// (1,024 runs/s asked) come first, then 10 pods of 2 probes each in
// another namespace. It admits them through the real limits.Admission, first
// come, first served but for the fair share among namespaces waiting at
// once (--namespace-probe-rate-share 1: no namespace cap) and with the
// default share of 0.25, and reports the
// victims admitted (of 10) and the runs a second each namespace holds
// (ns/op is the 42 admissions of one case).
func BenchmarkBudgetShare(b *testing.B) {
	for _, share := range []float64{1, 0.25} {
		b.Run(fmt.Sprintf("share=%v", share), func(b *testing.B) {
			var admitted int
			var hungryRate, victimRate float64
			for range b.N {
				room := limits.New(limits.Options{MaxRate: 1000, MaxRateFlag: "--max-probe-rate", NamespaceShare: share,
					NamespaceShareFlag: "--namespace-probe-rate-share", Recorder: events.New(1000, slog.New(slog.DiscardHandler), nil),
					Logger: slog.New(slog.DiscardHandler)})
				hungryRate, victimRate, admitted = 0, 0, 0
				for i := range 32 {
					if room.Admit(sharedPod("hungry", fmt.Sprintf("hungry-%02d", i)), everySecond(32)) {
						hungryRate += 32
					}
				}
				for i := range 10 {
					if room.Admit(sharedPod("victims", fmt.Sprintf("victim-%d", i)), everySecond(2)) {
						admitted++
						victimRate += 2
					}
				}
			}
			b.ReportMetric(float64(admitted), "victims-admitted")
			b.ReportMetric(hungryRate, "hungry-runs/s")
			b.ReportMetric(victimRate, "victim-runs/s")
		})
	}
}

// BenchmarkRestartFairness is the review's restart case on the real
// actuate.Queue and the real clock, with the agent's defaults (8 restart
// workers, the node's bucket of 3 then one per 10 s): 15 failures in a
// namespace the scope refuses, then 9 in a selected namespace whose
// restarts each hold their worker as a 3,600 s grace period and preStop
// would (here: until the case ends), then one failure of a victim in
// another selected namespace. It reports the time from the victim's
// failure to the start of its restart, alone and beside the others (the
// review measured 121.5 s before the scope was checked ahead of the
// node's tokens, and 25 s and up to an hour while the long restarts held
// every worker), and the workers the hostile namespace holds.
func BenchmarkRestartFairness(b *testing.B) {
	for _, hostile := range []bool{false, true} {
		name := "victim alone"
		if hostile {
			name = "beside the hostile restarts"
		}
		b.Run(name, func(b *testing.B) {
			var waits []time.Duration
			var held int64
			for range b.N {
				w, h := restartWait(b, hostile)
				waits = append(waits, w)
				held = h
			}
			sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
			b.ReportMetric(float64(waits[len(waits)-1].Microseconds())/1000, "victim-wait-max-ms")
			b.ReportMetric(float64(held), "hostile-workers")
		})
	}
}

// restartWait runs one case of BenchmarkRestartFairness: the victim's
// wait, and the workers the hostile namespace held when the victim's
// restart started.
func restartWait(b *testing.B, hostile bool) (time.Duration, int64) {
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	step := actuate.StepFunc(func(f actuate.Failure) actuate.Plan {
		switch f.Pod.Namespace {
		case "unlabelled":
			return actuate.Plan{Decision: actuate.Decision{Do: actuate.Refuse, Why: "namespace unlabelled is not selected"}}
		case "hostile":
			// A restart that waits out an hour of grace and preStop: it
			// holds its worker until the case ends.
			return actuate.Plan{Decision: actuate.Decision{Do: actuate.Act}, Act: func(ctx context.Context) error {
				<-ctx.Done()
				return nil
			}}
		}
		return actuate.Plan{Decision: actuate.Decision{Do: actuate.Act}, Act: func(context.Context) error {
			close(started)
			return nil
		}}
	})
	q, err := actuate.New(actuate.Options{Step: step, Recorder: events.New(1000, slog.New(slog.DiscardHandler), nil),
		Workers: 8, Logger: slog.New(slog.DiscardHandler),
		Texts: actuate.Texts{Acting: "the container is to be restarted", Not: "the container is not restarted", Work: "restart"}})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = q.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	fail := func(ns, name string) {
		q.ContainerFailed(actuate.Failure{Pod: sharedPod(ns, name), Container: "app", ContainerID: "containerd://" + ns + "-" + name,
			Probe: probedruntime.Liveness})
	}
	if hostile {
		for i := range 15 {
			fail("unlabelled", fmt.Sprintf("refused-%02d", i))
		}
		for i := range 9 {
			fail("hostile", fmt.Sprintf("long-grace-%d", i))
		}
		// The hostile namespace's restarts have taken what they may.
		deadline := time.Now().Add(5 * time.Second)
		for q.WorkersOf("hostile") < 2 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	begin := time.Now()
	fail("victims", "victim")
	select {
	case <-started:
	case <-time.After(150 * time.Second):
		b.Fatalf("the victim's restart did not start within 150 s (hostile namespace holds %d workers)", q.WorkersOf("hostile"))
	}
	return time.Since(begin), q.WorkersOf("hostile")
}
