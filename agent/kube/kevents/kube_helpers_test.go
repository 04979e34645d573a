package kevents_test

// A minimal stand-in for internal/kubetest (same function names), until
// that package is on main: a real kube-apiserver through
// PROBED_TEST_KUBECONFIG, skipped when unset.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const envKubeconfig = "PROBED_TEST_KUBECONFIG"

func kubeConfig(t *testing.T) *rest.Config {
	t.Helper()
	path := os.Getenv(envKubeconfig)
	if path == "" {
		t.Skipf("%s is not set: no test kube-apiserver", envKubeconfig)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.Timeout = 30 * time.Second
	dialer := &connTracker{}
	cfg.Dial = dialer.DialContext
	t.Cleanup(dialer.closeAll)
	return cfg
}

// clientFor returns a clientset for cfg.
func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// connTracker dials the test's connections and closes them all when it ends
// (a config with a Dial is not shared through client-go's transport cache).
type connTracker struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func (d *connTracker) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	conn, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		conn.Close()
		return nil, net.ErrClosed
	}
	d.conns = append(d.conns, conn)
	return conn, nil
}

func (d *connTracker) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, c := range d.conns {
		c.Close()
	}
}

func kubeContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var unsafeName = regexp.MustCompile(`[^a-z0-9-]+`)

func uniqueName(t *testing.T, prefix string) string {
	name := unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return strings.Trim(prefix+"-"+strings.Trim(name, "-"), "-") + "-" + hex.EncodeToString(b)
}

func namespace(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniqueName(t, "t")}}
	if _, err := c.CoreV1().Namespaces().Create(kubeContext(t), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// counter counts the requests made through a config (rest.Config.WrapTransport).
type counter struct {
	mu   sync.Mutex
	reqs []string // "METHOD path"
}

func (c *counter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			c.mu.Lock()
			c.reqs = append(c.reqs, r.Method+" "+r.URL.Path)
			c.mu.Unlock()
			return rt.RoundTrip(r)
		})
	}
	return cfg
}

// count is the number of requests whose "METHOD path" contains each of parts.
func (c *counter) count(parts ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
next:
	for _, r := range c.reqs {
		for _, p := range parts {
			if !strings.Contains(r, p) {
				continue next
			}
		}
		n++
	}
	return n
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// createRunningPod creates pod (spec.nodeName set) and writes a Running
// status with ready containers, as the kubelet would.
func createRunningPod(t *testing.T, c kubernetes.Interface, pod *v1.Pod) *v1.Pod {
	t.Helper()
	ctx := kubeContext(t)
	created, err := c.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	created.Status.Phase = v1.PodRunning
	created.Status.PodIP = "127.0.0.1"
	created.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: now}}
	for _, ctr := range created.Spec.Containers {
		created.Status.ContainerStatuses = append(created.Status.ContainerStatuses, v1.ContainerStatus{
			Name: ctr.Name, Image: ctr.Image, ImageID: "sha256:1", ContainerID: "containerd://" + ctr.Name + "-1",
			Ready: true, Started: ptrTo(true), State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
		})
	}
	updated, err := c.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return updated
}

func ptrTo[T any](v T) *T { return &v }

// eventually polls cond every 20 ms until it holds or 30 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serviceAccountConfig returns a config authenticated as the ServiceAccount
// ns/name (created), holding exactly rules (a Role in ns bound to it), with
// a TokenRequest token: requests are authorized by RBAC as the agent's are.
func serviceAccountConfig(t *testing.T, admin *rest.Config, ns, name string, rules []rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	c := clientFor(t, admin)
	ctx := kubeContext(t)
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(rules) > 0 {
		if _, err := c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
		}
		if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	hour := int64(3600)
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	return cfg
}
