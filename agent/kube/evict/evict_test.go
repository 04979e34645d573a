package evict_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/kube/evict"
	"github.com/probed/probed/runtime"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

func TestParseAction(t *testing.T) {
	for in, want := range map[string]evict.Action{"": evict.ActionEvent, "event": evict.ActionEvent, "evict": evict.ActionEvict} {
		if got, err := evict.ParseAction(in); err != nil || got != want {
			t.Errorf("ParseAction(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := evict.ParseAction("delete"); err == nil || !strings.Contains(err.Error(), "--liveness-action") {
		t.Errorf("ParseAction(delete) error = %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	rec := events.New(10, slog.New(slog.DiscardHandler), nil)
	if _, err := evict.New(evict.Options{}); err == nil {
		t.Error("no recorder: no error")
	}
	if _, err := evict.New(evict.Options{Recorder: rec, Action: evict.ActionEvict}); err == nil {
		t.Error("evict without a client: no error")
	}
	if _, err := evict.New(evict.Options{Recorder: rec, Action: "restart"}); err == nil {
		t.Error("unknown action: no error")
	}
}

// The pods probed never evicts (the kubelet's kubetypes.IsStaticPod,
// IsMirrorPod, IsCriticalPod; the descheduler's DaemonSet rule).
func TestExemption(t *testing.T) {
	now := metav1.Now()
	prio := int32(evict.SystemCriticalPriority)
	cases := []struct {
		name string
		pod  v1.Pod
		want string // substring, "" = may be evicted
	}{
		{"plain", v1.Pod{}, ""},
		{"api source", v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{evict.ConfigSourceAnnotation: "api"}}}, ""},
		{"ReplicaSet", v1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs"}}}}, ""},
		{"DaemonSet", v1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds"}}}}, "DaemonSet"},
		{"static", v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{evict.ConfigSourceAnnotation: "file"}}}, "static"},
		{"mirror", v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{evict.ConfigMirrorAnnotation: "abc", evict.ConfigSourceAnnotation: "api"}}}, "mirror"},
		{"critical priority", v1.Pod{Spec: v1.PodSpec{Priority: &prio}}, "critical"},
		{"critical class", v1.Pod{Spec: v1.PodSpec{PriorityClassName: "system-node-critical"}}, "critical"},
		{"terminating", v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, "terminating"},
	}
	for _, c := range cases {
		got := evict.Exemption(&c.pod)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: Exemption = %q, want %q", c.name, got, c.want)
		}
	}
}

func testPod(container string) *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web", UID: "uid-1"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "sidecar", RestartPolicy: &always}},
			Containers:     []v1.Container{{Name: container}},
		},
	}
}

// Issue 10 §2.5, --liveness-action=event: one Warning Event on the container
// per container instance (K2's failure of a running container), however
// often the failure is reported; a new container ID is a new instance; a
// sidecar's Event is about spec.initContainers{sidecar}.
func TestEventOncePerContainerInstance(t *testing.T) {
	rec := events.New(100, slog.New(slog.DiscardHandler), nil)
	a, err := evict.New(evict.Options{Recorder: rec, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod("app")
	for range 5 {
		a.ContainerFailed(actuate.Failure{Pod: pod, Container: "app", ContainerID: "containerd://a1", Probe: runtime.Liveness})
	}
	a.ContainerFailed(actuate.Failure{Pod: pod, Container: "app", ContainerID: "containerd://a2", Probe: runtime.Liveness})
	a.ContainerFailed(actuate.Failure{Pod: pod, Container: "sidecar", ContainerID: "containerd://s1", Probe: runtime.Startup})
	// The local ring folds the two app instances' identical events into
	// one with count 2.
	got := rec.List()
	if len(got) != 2 {
		t.Fatalf("events = %+v, want 2", got)
	}
	for i, want := range []struct {
		reason, field, msg string
		count              int
	}{
		{evict.ReasonLivenessProbeFailed, "spec.containers{app}", "Container app failed liveness probe; probed does not restart containers (--liveness-action=event)", 2},
		{evict.ReasonStartupProbeFailed, "spec.initContainers{sidecar}", "Container sidecar failed startup probe; probed does not restart containers (--liveness-action=event)", 1},
	} {
		if e := got[i]; e.Type != v1.EventTypeWarning || e.Reason != want.reason || e.FieldPath != want.field || e.Message != want.msg || e.Count != want.count {
			t.Errorf("event %d = %+v, want %+v", i, e, want)
		}
	}
	// Run in event mode owns nothing and returns when its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log sink safe for the actuator's worker and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), substr)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
