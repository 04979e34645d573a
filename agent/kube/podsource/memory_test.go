package podsource

import (
	"encoding/json"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
)

// withAPIDefaults sets what the API server's defaulting adds to a
// deploymentPod (the fields a stored pod has and its managedFields list).
func withAPIDefaults(p *v1.Pod) {
	s := &p.Spec
	s.RestartPolicy, s.DNSPolicy, s.SchedulerName = v1.RestartPolicyAlways, v1.DNSClusterFirst, v1.DefaultSchedulerName
	s.TerminationGracePeriodSeconds, s.ServiceAccountName, s.DeprecatedServiceAccount = ptr(int64(30)), "default", "default"
	s.SecurityContext, s.EnableServiceLinks, s.Priority = &v1.PodSecurityContext{}, ptr(true), ptr(int32(0))
	s.PreemptionPolicy = ptr(v1.PreemptLowerPriority)
	for i := range s.Containers {
		c := &s.Containers[i]
		c.TerminationMessagePath, c.TerminationMessagePolicy, c.ImagePullPolicy = "/dev/termination-log", v1.TerminationMessageReadFile, v1.PullIfNotPresent
		for j := range c.Ports {
			c.Ports[j].Protocol = v1.ProtocolTCP
		}
		for _, pr := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			pr.TimeoutSeconds, pr.SuccessThreshold, pr.FailureThreshold = 1, 1, 3
			pr.HTTPGet.Scheme = v1.URISchemeHTTP
		}
	}
	p.Status.QOSClass = v1.PodQOSBurstable
}

// withManagedFields adds the two managedFields entries a ReplicaSet's pod
// has once the kubelet reported its status: kube-controller-manager owning
// metadata and spec, the kubelet owning the status (subresource status),
// computed with the API server's own machinery (the pod schema client-go
// ships and structured-merge-diff's field sets).
func withManagedFields(b testing.TB, p *v1.Pod) {
	tc := applyconfigurations.NewTypeConverter(scheme.Scheme)
	fieldsOf := func(obj *v1.Pod) *metav1.FieldsV1 {
		obj.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		typed, err := tc.ObjectToTyped(obj)
		if err != nil {
			b.Fatal(err)
		}
		set, err := typed.ToFieldSet()
		if err != nil {
			b.Fatal(err)
		}
		raw, err := set.ToJSON()
		if err != nil {
			b.Fatal(err)
		}
		// What the API server strips before it records a field set
		// (managedfields' stripMeta): type and identity fields.
		var m map[string]map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			b.Fatal(err)
		}
		delete(m, "f:apiVersion")
		delete(m, "f:kind")
		for _, f := range []string{"f:name", "f:namespace", "f:uid", "f:creationTimestamp", "f:resourceVersion", "f:generation"} {
			delete(m["f:metadata"], f)
		}
		if len(m["f:metadata"]) == 0 {
			delete(m, "f:metadata")
		}
		if obj.Spec.Containers == nil { // the status entry owns the status only
			m = map[string]map[string]any{"f:status": m["f:status"]}
		}
		if raw, err = json.Marshal(m); err != nil {
			b.Fatal(err)
		}
		return &metav1.FieldsV1{Raw: raw}
	}
	spec := p.DeepCopy()
	spec.Status = v1.PodStatus{}
	status := &v1.Pod{Status: p.Status}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	p.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", FieldsV1: fieldsOf(spec)},
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", FieldsV1: fieldsOf(status), Subresource: "status"},
	}
}

// BenchmarkDecodedPodHeap is the server-free counterpart of
// BenchmarkCachedPodMemory: memoryPods pods as a ReplicaSet creates them
// and the kubelet reports them (API defaults and both managedFields entries
// included), decoded from JSON as the informer decodes them, kept alive,
// without and with Trim. It reports the live heap per pod:
//
//	go test -run '^$' -bench DecodedPodHeap -benchtime 1x ./agent/kube/podsource/
func BenchmarkDecodedPodHeap(b *testing.B) {
	raw := make([][]byte, memoryPods)
	for i := range raw {
		p := deploymentPod("team-web", "node-a", i)
		p.UID = "0b6f8c1e-2d3a-4f5b-8c7d-9e0f1a2b3c4d"
		p.ResourceVersion, p.CreationTimestamp = "123456", metav1.Now()
		withAPIDefaults(p)
		kubeletStatus(&p.Status)
		withManagedFields(b, p)
		var err error
		if raw[i], err = json.Marshal(p); err != nil {
			b.Fatal(err)
		}
	}
	heapOf := func(transform bool) float64 {
		heap := func() uint64 {
			var ms goruntime.MemStats
			goruntime.GC()
			goruntime.GC()
			goruntime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		before := heap()
		cache := make([]*v1.Pod, len(raw))
		for i := range raw {
			p := &v1.Pod{}
			if err := json.Unmarshal(raw[i], p); err != nil {
				b.Fatal(err)
			}
			if transform {
				p = Trim(p, "probed.io/ready")
			}
			cache[i] = p
		}
		after := heap()
		goruntime.KeepAlive(cache)
		return float64(after-before) / float64(len(cache))
	}
	for b.Loop() {
		b.ReportMetric(float64(len(raw[0])), "B-json/pod")
		full, trimmed := heapOf(false), heapOf(true)
		b.ReportMetric(full, "B/pod-untransformed")
		b.ReportMetric(trimmed, "B/pod-transformed")
		b.ReportMetric(100*(full-trimmed)/full, "%saved")
	}
}

// TestManagedFieldsAreRealistic guards the benchmark's input: the computed
// managedFields name lists' elements by key, as the API server's do.
func TestManagedFieldsAreRealistic(t *testing.T) {
	p := deploymentPod("ns", "node", 0)
	withAPIDefaults(p)
	kubeletStatus(&p.Status)
	withManagedFields(t, p)
	spec, status := string(p.ManagedFields[0].FieldsV1.Raw), string(p.ManagedFields[1].FieldsV1.Raw)
	for _, want := range []string{`"k:{\"name\":\"app\"}"`, `"f:livenessProbe"`, `"k:{\"mountPath\":\"/etc/web\"}"`} {
		if !strings.Contains(spec, want) {
			t.Errorf("spec field set lacks %s: %s", want, spec)
		}
	}
	if !strings.Contains(status, `"f:containerStatuses"`) || strings.Contains(status, `"f:spec"`) {
		t.Errorf("status field set: %s", status)
	}
}
