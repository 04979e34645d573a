package podsource

import (
	"context"
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/manager/customprobe"
)

// memoryPods is the number of pods BenchmarkCachedPodMemory caches: cluster
// mode's density (100-500 pods a node).
const memoryPods = 500

// deploymentPod is a pod as a Deployment's ReplicaSet creates it on a real
// cluster: labels, owner, the service-account volume, two ports, env,
// resources, security context, two spec probes and the probed.io/probes
// annotation.
func deploymentPod(ns, node string, i int) *v1.Pod {
	hash := "7d9c8b6f5"
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: fmt.Sprintf("web-%s-%05d", hash, i),
			Labels: map[string]string{"app": "web", "pod-template-hash": hash, "app.kubernetes.io/name": "web", "app.kubernetes.io/version": "1.2.3"},
			Annotations: map[string]string{customprobe.Annotation: `[{"container":"app","type":"readiness","periodSeconds":5,"plugin":{"name":"http-match","port":"http","params":{"path":"/ready","body":"ok"}}},` +
				`{"container":"app","type":"liveness","plugin":{"name":"http-match","port":"http","params":{"path":"/healthz"}}}]`},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-" + hash, UID: "3f1c2a9e-8d44-4b8e-9a51-0c2f7d1b6e40", Controller: ptr(true), BlockOwnerDeletion: ptr(true)}},
		},
		Spec: v1.PodSpec{
			NodeName: node, ServiceAccountName: "default",
			Containers: []v1.Container{{
				Name: "app", Image: "registry.example.com/team/web:1.2.3",
				Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
				Env: []v1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "LISTEN", Value: ":8080"},
					{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
				Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("256Mi")},
				},
				VolumeMounts:   []v1.VolumeMount{{Name: "config", MountPath: "/etc/web"}, {Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
				LivenessProbe:  &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}, PeriodSeconds: 10},
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}, PeriodSeconds: 5},
				SecurityContext: &v1.SecurityContext{RunAsNonRoot: ptr(true), ReadOnlyRootFilesystem: ptr(true), AllowPrivilegeEscalation: ptr(false),
					Capabilities: &v1.Capabilities{Drop: []v1.Capability{"ALL"}}},
			}},
			Volumes: []v1.Volume{
				{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "web-config"}}}},
				{Name: "kube-api-access-x7k2p", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr(int64(3607))}},
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
				}}}},
			},
			Tolerations: []v1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
				{Key: "node.kubernetes.io/unreachable", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
			},
		},
	}
}

// kubeletStatus is what the kubelet reports for a running deploymentPod.
func kubeletStatus(s *v1.PodStatus) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	s.Phase = v1.PodRunning
	s.HostIP, s.PodIP = "127.0.0.1", "10.244.1.17"
	s.HostIPs, s.PodIPs = []v1.HostIP{{IP: "127.0.0.1"}}, []v1.PodIP{{IP: "10.244.1.17"}}
	s.StartTime = &now
	for _, t := range []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady, v1.PodScheduled} {
		s.Conditions = append(s.Conditions, v1.PodCondition{Type: t, Status: v1.ConditionTrue, LastTransitionTime: now})
	}
	req := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("128Mi")}
	s.ContainerStatuses = []v1.ContainerStatus{{
		Name: "app", Image: "registry.example.com/team/web:1.2.3",
		ImageID:     "registry.example.com/team/web@sha256:9b2a6c5d0e1f4a3b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b",
		ContainerID: kubetest.ContainerID(), Started: ptr(true), Ready: true,
		State:              v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
		AllocatedResources: req,
		Resources:          &v1.ResourceRequirements{Requests: req, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("256Mi")}},
		VolumeMounts: []v1.VolumeMountStatus{{Name: "config", MountPath: "/etc/web"},
			{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
		User: &v1.ContainerUser{Linux: &v1.LinuxContainerUser{UID: 1000, GID: 1000, SupplementalGroups: []int64{1000}}},
	}}
}

// BenchmarkCachedPodMemory measures the heap one cached pod costs in the
// pod informer, without and with the transform (Trim), for memoryPods pods as a
// ReplicaSet creates them and the kubelet reports them (managedFields of
// both writers included). Run it alone, once:
//
//	PROBED_TEST_KUBECONFIG=DIR/kubeconfig go test -run '^$' -bench CachedPodMemory -benchtime 1x ./agent/kube/podsource/
func BenchmarkCachedPodMemory(b *testing.B) {
	cfg := kubetest.Config(b)
	c := kubetest.ClientFor(b, cfg)
	ns, node := kubetest.Namespace(b), kubetest.NodeName(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for i := range memoryPods {
		pod, err := c.CoreV1().Pods(ns).Create(ctx, deploymentPod(ns, node, i), metav1.CreateOptions{FieldManager: "kube-controller-manager"})
		if err != nil {
			b.Fatal(err)
		}
		kubeletStatus(&pod.Status)
		if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{FieldManager: "kubelet"}); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		full := cachedHeapPerPod(b, c, node, nil)
		trimmed := cachedHeapPerPod(b, c, node, TransformFor("probed.io/ready"))
		b.ReportMetric(full, "B/pod-untransformed")
		b.ReportMetric(trimmed, "B/pod-transformed")
		b.ReportMetric(100*(full-trimmed)/full, "%saved")
	}
}

// cachedHeapPerPod runs a pod informer like Source's (with transform, or
// none) until it has synced the node's pods and returns the live heap it
// added, per pod.
func cachedHeapPerPod(b *testing.B, c kubernetes.Interface, node string, transform cache.TransformFunc) float64 {
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	heap := func() uint64 {
		var ms goruntime.MemStats
		goruntime.GC()
		goruntime.GC()
		goruntime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
	inf := factory.Core().V1().Pods().Informer()
	if transform != nil {
		if err := inf.SetTransform(transform); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) || len(inf.GetStore().List()) != memoryPods {
		b.Fatalf("informer has %d pods, want %d", len(inf.GetStore().List()), memoryPods)
	}
	time.Sleep(200 * time.Millisecond) // let the list's transient buffers go
	after := heap()
	n := len(inf.GetStore().List())
	cancel()
	factory.Shutdown()
	return float64(after-before) / float64(n)
}
