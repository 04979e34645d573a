// Package nodetest connects tests and benchmarks to the real node of
// test/node/env.sh: a kubelet v1.37.2 with its own kube-apiserver, etcd and
// containerd on this machine. The node is found through one variable,
// PROBED_TEST_NODE (the directory `env.sh start` prints); without it Load
// skips the test.
//
// Pods run there for real: the kubelet starts their containers (the probe
// target, internal/probetarget, from the image the script imported), runs
// their spec probes and writes their status. Every pod is hostNetwork (the
// node has no CNI plugin), so its ports are the node's: TargetPod takes ports
// from FreePorts, and the pod's IP is the node's (Node.IP).
package nodetest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/internal/kubetest"
)

// EnvNode names the environment variable holding the node's directory.
const EnvNode = "PROBED_TEST_NODE"

// Node is the running node, as test/node/env.sh start recorded it in
// DIR/node.env.
type Node struct {
	Dir           string
	Name          string // the Node object's name, the kubelet's --hostname-override
	IP            string // the node's InternalIP: every (hostNetwork) pod's IP
	Kubeconfig    string // the admin kubeconfig of the node's API server
	CRIEndpoint   string // unix://… of the node's containerd
	Image         string // the probe target's image
	State         string // a directory of the host pods may mount (hostPath) to share state with the test
	KubeletPID    int
	KubeletPort   int // the kubelet's API on 127.0.0.1 (HTTPS; the admin token is authorized)
	ContainerdPID int
	// APIServerPID and EtcdPID are the node's own control plane
	// (DIR/kube/pids).
	APIServerPID, EtcdPID int
	// CRISocket is the path of containerd's socket (CRIEndpoint without
	// unix://), for a hostPath and ctr.
	CRISocket string
	// APIHost and APIPort are the API server's address on the node's
	// loopback: what an in-cluster client on the node (hostNetwork) is
	// given instead of the kubernetes Service, which nothing serves here
	// (no kube-proxy; the chart's apiServer value).
	APIHost string
	APIPort int
	// Kubectl and Helm are the binaries of test/kube/env.sh build.
	Kubectl, Helm string
}

// Load returns the node, or skips the test when PROBED_TEST_NODE is unset.
// It points PROBED_TEST_KUBECONFIG at the node's API server for the rest of
// the test (t.Setenv: the test must not be parallel), so kubetest's helpers
// (Client, Namespace, AgentConfigForNode, …) work on the node's cluster.
//
// The node is the test's alone: Load fails when pods run on it already (a
// test or benchmark that did not clean up), and when the test ends it
// deletes every pod bound to the node since and waits until the kubelet has
// removed them — the test's own and those it made through others (the
// agent's pod of kubetest.AgentConfigForNode, whose image the node cannot
// pull), so that no sandbox of one test costs the next one CPU or a port.
func Load(t testing.TB) *Node {
	t.Helper()
	dir := os.Getenv(EnvNode)
	if dir == "" {
		t.Skipf("%s is not set: no real node (start one with test/node/env.sh start DIR)", EnvNode)
	}
	n, err := read(dir)
	if err != nil {
		t.Fatalf("%s=%s: %v", EnvNode, dir, err)
	}
	if err := syscall.Kill(n.KubeletPID, 0); err != nil {
		t.Fatalf("%s=%s: the kubelet (PID %d) is not running: %v", EnvNode, dir, n.KubeletPID, err)
	}
	t.Setenv(kubetest.EnvKubeconfig, n.Kubeconfig)
	c := kubetest.Client(t)
	if left := n.pods(t, c); len(left) > 0 {
		t.Fatalf("node %s runs %d pods already (%s/%s, ...): a test needs the node to itself", n.Name, len(left), left[0].Namespace, left[0].Name)
	}
	t.Cleanup(func() {
		for _, pod := range n.pods(t, c) {
			deletePod(t, c, &pod)
		}
	})
	return n
}

// pods lists the pods bound to the node.
func (n *Node) pods(t testing.TB, c kubernetes.Interface) []v1.Pod {
	t.Helper()
	list, err := c.CoreV1().Pods("").List(kubetest.Context(t), metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	if err != nil {
		t.Fatalf("list the pods of node %s: %v", n.Name, err)
	}
	return list.Items
}

// read parses DIR/node.env (KEY=VALUE lines).
func read(dir string) (*Node, error) {
	f, err := os.Open(filepath.Join(dir, "node.env"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n := &Node{Dir: dir}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		var err error
		switch k {
		case "NODE":
			n.Name = v
		case "NODE_IP":
			n.IP = v
		case "KUBECONFIG":
			n.Kubeconfig = v
		case "CRI_ENDPOINT":
			n.CRIEndpoint = v
		case "IMAGE":
			n.Image = v
		case "STATE":
			n.State = v
		case "KUBELET_PID":
			n.KubeletPID, err = strconv.Atoi(v)
		case "KUBELET_PORT":
			n.KubeletPort, err = strconv.Atoi(v)
		case "CONTAINERD_PID":
			n.ContainerdPID, err = strconv.Atoi(v)
		case "CRI_SOCKET":
			n.CRISocket = v
		case "API_HOST":
			n.APIHost = v
		case "API_PORT":
			n.APIPort, err = strconv.Atoi(v)
		case "KUBECTL":
			n.Kubectl = v
		case "HELM":
			n.Helm = v
		}
		if err != nil {
			return nil, fmt.Errorf("node.env: %s: %w", k, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if b, err := os.ReadFile(filepath.Join(dir, "kube", "pids")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, pid, ok := strings.Cut(line, " "); ok {
				switch name {
				case "kube-apiserver":
					n.APIServerPID, _ = strconv.Atoi(pid)
				case "etcd":
					n.EtcdPID, _ = strconv.Atoi(pid)
				}
			}
		}
	}
	if n.Name == "" || n.IP == "" || n.Kubeconfig == "" || n.CRIEndpoint == "" || n.Image == "" {
		return nil, fmt.Errorf("node.env is incomplete: %+v", *n)
	}
	return n, nil
}

// ImportImage imports the image archive (an OCI layout or docker-save tar)
// into the node's containerd, in the k8s.io namespace the kubelet reads, as
// `ctr images import` does: what an operator does to load an image into a
// node with no registry. It returns the names imported.
func (n *Node) ImportImage(t testing.TB, archive string) []string {
	t.Helper()
	if n.CRISocket == "" {
		t.Fatalf("node.env has no CRI_SOCKET: a node started by an older test/node/env.sh")
	}
	out, err := exec.Command("ctr", "--address", n.CRISocket, "--namespace", "k8s.io", "images", "import", archive).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images import %s: %v\n%s", archive, err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		// "unpacking NAME (sha256:...)...done"
		if rest, ok := strings.CutPrefix(line, "unpacking "); ok {
			if name, _, ok := strings.Cut(rest, " "); ok {
				names = append(names, name)
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("ctr images import %s imported nothing:\n%s", archive, out)
	}
	return names
}

// TagImage gives the node's image src the name dst too (ctr images tag).
func (n *Node) TagImage(t testing.TB, src, dst string) {
	t.Helper()
	if out, err := exec.Command("ctr", "--address", n.CRISocket, "--namespace", "k8s.io", "images", "tag", "--force", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("ctr images tag %s %s: %v\n%s", src, dst, err, out)
	}
}

// FreePorts returns n TCP ports nothing listens on now (the pods are
// hostNetwork: their ports are the node's).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out
}

// Target is how a TargetPod's container runs the probe target.
type Target struct {
	HTTP, TCP int    // ports; TCP 0 for none
	State     string // host directory mounted at /state (-state), "" for none
	ReadyFile string // -ready-file inside the container, "" for none
}

// Base is the URL of the target's HTTP server on node n.
func (tg Target) Base(n *Node) string {
	return "http://" + net.JoinHostPort(n.IP, strconv.Itoa(tg.HTTP))
}

// TargetPod returns the Pod ns/name on node n with one container "app" that
// runs the probe target as tg says: hostNetwork, the node's image (never
// pulled), a termination grace period of 5 s. Callers add probes,
// annotations and readiness gates before kubetest.CreatePod.
func (n *Node) TargetPod(ns, name string, tg Target) *v1.Pod {
	args := []string{"-http", strconv.Itoa(tg.HTTP)}
	if tg.TCP != 0 {
		args = append(args, "-tcp", strconv.Itoa(tg.TCP))
	}
	if tg.ReadyFile != "" {
		args = append(args, "-ready-file", tg.ReadyFile)
	}
	grace := int64(5)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PodSpec{
			NodeName:                      n.Name,
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{
				Name: "app", Image: n.Image, ImagePullPolicy: v1.PullNever,
				Command: []string{"/bin/probe-target"}, Args: args,
			}},
		},
	}
	if tg.State != "" {
		pod.Spec.Containers[0].Args = append(pod.Spec.Containers[0].Args, "-state", "/state")
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "state", MountPath: "/state"}}
		pod.Spec.Volumes = []v1.Volume{{Name: "state", VolumeSource: v1.VolumeSource{
			HostPath: &v1.HostPathVolumeSource{Path: tg.State}}}}
	}
	return pod
}

// StateDir returns a new directory of the test under the node's state
// directory, for a pod's hostPath (removed when the test ends).
func (n *Node) StateDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(n.State, "t-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// deletePod deletes pod (UID precondition) and waits up to 60 s until it
// is gone; a pod already gone is fine.
func deletePod(t testing.TB, c kubernetes.Interface, pod *v1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	err := c.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return
	}
	if err != nil {
		t.Errorf("delete pod %s/%s: %v", pod.Namespace, pod.Name, err)
		return
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && got.UID != pod.UID) {
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("pod %s/%s still there 60 s after its deletion: %v", pod.Namespace, pod.Name, err)
	}
}
