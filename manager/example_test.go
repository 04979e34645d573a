package manager_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
)

// statuses is the StatusProvider: the pods' statuses, as the kubelet's
// status manager keeps them. Every run reads it, and a probe runs only while
// its container is reported running, with a container ID, and (for
// liveness and readiness) started, which UpdatePodStatus fills in.
type statuses struct {
	mu sync.Mutex
	m  map[types.UID]v1.PodStatus
}

func (s *statuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[uid]
	return st, ok
}

func (s *statuses) set(uid types.UID, st v1.PodStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[uid] = st
}

func Example_readme() {
	ctx := context.Background()
	// The service to probe: GET /ready answers 200.
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer app.Close()
	addr := netip.MustParseAddrPort(app.Listener.Addr().String())

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "0d8c4b3e-5b6a-4f7e-9a51-3c2f1e0d9b7a"},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "app",
			ReadinessProbe: &v1.Probe{
				ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(int32(addr.Port()))}},
				PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
			},
		}}},
	}

	st := &statuses{m: map[types.UID]v1.PodStatus{}}
	readiness := results.NewManager()
	m, err := manager.New(manager.Options{Status: st, Readiness: readiness})
	if err != nil {
		log.Fatal(err)
	}

	// Trap 1: without a running container that has a container ID (and
	// Started, from UpdatePodStatus) nothing is probed; the manager logs
	// it once per pod.
	status := v1.PodStatus{Phase: v1.PodRunning, PodIP: addr.Addr().String(), ContainerStatuses: []v1.ContainerStatus{{
		Name:        "app",
		ContainerID: "containerd://4f1e2d3c",
		State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}}}
	m.UpdatePodStatus(ctx, pod, &status) // fills Started and Ready
	st.set(pod.UID, status)
	m.AddPod(ctx, pod)

	// Trap 2: a results manager's Updates must be drained, until Close
	// returns: a full channel blocks the probes.
	ready := make(chan struct{})
	markReady := sync.OnceFunc(func() { close(ready) })
	stop := make(chan struct{})
	var drained sync.WaitGroup
	drained.Add(1)
	go func() {
		defer drained.Done()
		for {
			select {
			case u := <-readiness.Updates():
				fmt.Printf("%s/%s readiness: %v\n", pod.Namespace, pod.Name, u.Result)
				if u.Result == results.Success {
					markReady()
				}
			case <-stop:
				return
			}
		}
	}()
	<-ready
	if err := m.Close(ctx); err != nil {
		log.Fatal(err)
	}
	close(stop)
	drained.Wait()
	// Output:
	// shop/web readiness: Failure
	// shop/web readiness: Success
}
