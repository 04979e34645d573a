package podsource

// A minimal stand-in for internal/kubetest (same names, the subset these
// tests use) until that package is on main: a real kube-apiserver found
// through PROBED_TEST_KUBECONFIG, skipped when it is unset.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const envKubeconfig = "PROBED_TEST_KUBECONFIG"

const kubeTimeout = 30 * time.Second

// kubeConfig returns the admin rest.Config of the test server (skipping the
// test without one) and the dialer all its connections go through.
func kubeConfig(t testing.TB) (*rest.Config, *testDialer) {
	t.Helper()
	path := os.Getenv(envKubeconfig)
	if path == "" {
		t.Skipf("%s is not set: no test kube-apiserver (start one with test/kube/env.sh start DIR)", envKubeconfig)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("%s=%s: %v", envKubeconfig, path, err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.Timeout = kubeTimeout
	d := &testDialer{}
	cfg.Dial = d.DialContext
	t.Cleanup(d.closeAll)
	return cfg, d
}

// testDialer dials TCP connections, can refuse new ones and cut the open
// ones (an API server outage as a client sees it), and closes them all at
// the end of the test (goleak).
type testDialer struct {
	mu    sync.Mutex
	conns []net.Conn
	down  bool
}

func (d *testDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	down := d.down
	d.mu.Unlock()
	if down {
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	conn, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.conns = append(d.conns, conn)
	return conn, nil
}

// setDown cuts every open connection and refuses new ones (down) or
// accepts them again.
func (d *testDialer) setDown(down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = down
	if down {
		for _, c := range d.conns {
			c.Close()
		}
		d.conns = nil
	}
}

func (d *testDialer) closeAll() { d.setDown(true) }

func clientFor(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	return c
}

func kubeContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), kubeTimeout)
	t.Cleanup(cancel)
	return ctx
}

var unsafeName = regexp.MustCompile(`[^a-z0-9-]+`)

func uniqueName(t testing.TB, prefix string) string {
	name := unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return strings.Trim(prefix+"-"+strings.Trim(name, "-"), "-") + "-" + hex.EncodeToString(b)
}

// namespace creates a fresh namespace (never deleted: no namespace
// controller runs).
func namespace(t testing.TB, c kubernetes.Interface) string {
	t.Helper()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniqueName(t, "t"), Labels: map[string]string{"probed.io/test": "true"}}}
	if _, err := c.CoreV1().Namespaces().Create(kubeContext(t), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns.Name, err)
	}
	return ns.Name
}

func nodeName(t testing.TB) string { return uniqueName(t, "node") }

// newPod returns a pod bound to node (no scheduler runs) with one container
// per name.
func newPod(ns, name, node string, containers ...string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.PodSpec{NodeName: node}}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: c, Image: "registry.invalid/probed-test:1"})
	}
	return pod
}

func createPod(t testing.TB, c kubernetes.Interface, pod *v1.Pod) *v1.Pod {
	t.Helper()
	created, err := c.CoreV1().Pods(pod.Namespace).Create(kubeContext(t), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return created
}

func containerID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "containerd://" + hex.EncodeToString(b)
}

// updateStatus writes the pod's status through the status subresource as
// the kubelet does (no kubelet runs): mutate changes the status read from
// the server.
func updateStatus(t testing.TB, c kubernetes.Interface, ns, name string, mutate func(*v1.PodStatus)) *v1.Pod {
	t.Helper()
	ctx := kubeContext(t)
	pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	mutate(&pod.Status)
	updated, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status of pod %s/%s: %v", ns, name, err)
	}
	return updated
}

// setRunning writes the status the kubelet reports once every container
// runs: phase Running, pod IP 127.0.0.1, a new container ID, running since
// now, started true, ready false.
func setRunning(t testing.TB, c kubernetes.Interface, ns, name string) *v1.Pod {
	t.Helper()
	return updateStatus(t, c, ns, name, func(s *v1.PodStatus) {
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		s.Phase = v1.PodRunning
		s.HostIP, s.PodIP = "127.0.0.1", "127.0.0.1"
		s.HostIPs, s.PodIPs = []v1.HostIP{{IP: "127.0.0.1"}}, []v1.PodIP{{IP: "127.0.0.1"}}
		s.StartTime = &now
		s.ContainerStatuses = nil
		s.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: "ContainersNotReady", LastTransitionTime: now}}
		pod, err := c.CoreV1().Pods(ns).Get(kubeContext(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ctr := range pod.Spec.Containers {
			s.ContainerStatuses = append(s.ContainerStatuses, v1.ContainerStatus{
				Name: ctr.Name, Image: ctr.Image, ImageID: "registry.invalid/probed-test@sha256:" + strings.Repeat("0", 64),
				ContainerID: containerID(), Started: ptr(true),
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
			})
		}
	})
}

// restartContainer writes what the kubelet reports after restarting a
// container: a new container ID, restartCount+1, running since now.
func restartContainer(t testing.TB, c kubernetes.Interface, ns, name, container string) string {
	t.Helper()
	id := containerID()
	updateStatus(t, c, ns, name, func(s *v1.PodStatus) {
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		for i := range s.ContainerStatuses {
			cs := &s.ContainerStatuses[i]
			if cs.Name == container {
				cs.LastTerminationState = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", ContainerID: cs.ContainerID, FinishedAt: now}}
				cs.ContainerID, cs.RestartCount = id, cs.RestartCount+1
				cs.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}
				cs.Started, cs.Ready = ptr(true), false
			}
		}
	})
	return id
}
