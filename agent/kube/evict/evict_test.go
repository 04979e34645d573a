package evict_test

import (
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/kube/evict"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

func TestNewErrors(t *testing.T) {
	rec := events.New(10, slog.New(slog.DiscardHandler), nil)
	c, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := evict.New(evict.Options{Client: c}); err == nil {
		t.Error("no recorder: no error")
	}
	if _, err := evict.New(evict.Options{Recorder: rec}); err == nil {
		t.Error("no client: no error")
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
