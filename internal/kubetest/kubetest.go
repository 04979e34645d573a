// Package kubetest connects tests to a real kube-apiserver and etcd (started by
// test/kube/env.sh; there is no controller-manager, scheduler or kubelet) and
// does for them what the missing parts would: it creates pods bound to a node
// and writes their status as the kubelet does.
//
// The server is found through one variable, PROBED_TEST_KUBECONFIG (the
// kubeconfig `env.sh start` writes), never KUBECONFIG: a developer's real
// cluster is never used by accident. When the variable is unset, every
// helper calls t.Skip, so `go test ./...` stays green without a server.
//
// The server outlives each test and nothing is ever garbage-collected
// (namespaces never finish deleting without the namespace controller): each
// test takes a fresh namespace (Namespace) and a fresh node name (NodeName),
// so that a node's pods are the pods of that test only.
//
// Requests records what a component sends through its own config and stages
// an API server outage only that component sees; GrantRole gives a
// ServiceAccount exactly some rules, for tests of too few rights.
package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// EnvKubeconfig names the environment variable holding the path of the test
// server's kubeconfig (admin: user admin in system:masters).
const EnvKubeconfig = "PROBED_TEST_KUBECONFIG"

// Timeout bounds each call a helper makes to the server (through Context;
// the rest.Config itself has no timeout, which would cut watches).
const Timeout = 30 * time.Second

// Config returns the admin rest.Config of the test server, or skips the test
// when PROBED_TEST_KUBECONFIG is unset. A bad kubeconfig fails the test.
//
// Every connection made through the returned config (and its copies) is
// closed when the test ends, so goleak sees no transport goroutines left:
// stop what uses the config (informers, agents) in an earlier t.Cleanup or
// before the test returns. Client-side rate limiting is off (QPS 1000, burst
// 2000): tests create hundreds of pods.
func Config(t testing.TB) *rest.Config {
	t.Helper()
	path := os.Getenv(EnvKubeconfig)
	if path == "" {
		t.Skipf("%s is not set: no test kube-apiserver (start one with test/kube/env.sh start DIR)", EnvKubeconfig)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("%s=%s: %v", EnvKubeconfig, path, err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	dialer := &connTracker{}
	cfg.Dial = dialer.DialContext
	t.Cleanup(dialer.closeAll)
	return cfg
}

// connTracker dials TCP connections and closes them all at the end of the
// test. Setting rest.Config.Dial also keeps client-go from sharing the
// transport between tests (its transport cache skips configs with a Dial).
type connTracker struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func (d *connTracker) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	conn, err := (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext(ctx, network, address)
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
	d.conns = nil
}

// Client returns an admin clientset of the test server (see Config).
func Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	return ClientFor(t, Config(t))
}

// ClientFor returns a clientset for cfg, failing the test on error.
func ClientFor(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	return c
}

// Context returns a context that ends with the test, bounded by Timeout.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

var unsafeName = regexp.MustCompile(`[^a-z0-9-]+`)

// uniqueName is prefix, the test's name in DNS-label form and a random
// suffix, at most 63 characters.
func uniqueName(t testing.TB, prefix string) string {
	name := unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	b := make([]byte, 4)
	rand.Read(b)
	return strings.Trim(prefix+"-"+strings.Trim(name, "-"), "-") + "-" + hex.EncodeToString(b)
}

// Namespace creates a fresh namespace for the test (named after it, with a
// random suffix) and returns its name. It is never deleted: without a
// namespace controller deletion never finishes.
func Namespace(t testing.TB) string {
	t.Helper()
	c := Client(t)
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   uniqueName(t, "t"),
		Labels: map[string]string{"probed.io/test": "true"},
	}}
	if _, err := c.CoreV1().Namespaces().Create(Context(t), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns.Name, err)
	}
	// On a server with ServiceAccount admission (the real node's), a pod is refused until its
	// ServiceAccount exists; the controller-manager makes "default" a moment after the namespace.
	ensureServiceAccount(t, c, ns.Name, "default")
	return ns.Name
}

// ensureServiceAccount creates the ServiceAccount ns/name unless it exists.
func ensureServiceAccount(t testing.TB, c kubernetes.Interface, ns, name string) {
	t.Helper()
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(Context(t), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create service account %s/%s: %v", ns, name, err)
	}
}

// LabelNamespace adds labels to the namespace ns (e.g. the
// probed.io/liveness-actions=enabled that allows evictions there).
func LabelNamespace(t testing.TB, ns string, labels map[string]string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Client(t).CoreV1().Namespaces().Patch(Context(t), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("label namespace %s: %v", ns, err)
	}
}

// NodeName returns a node name no other test uses. No Node object is created
// (nothing needs one: pods are bound by spec.nodeName).
func NodeName(t testing.TB) string { return uniqueName(t, "node") }

// ServiceAccountConfig returns a rest.Config authenticated as the
// ServiceAccount ns/name (created when missing), through a token from the
// TokenRequest API (one hour): requests made with it are authorized by RBAC
// exactly as the agent's in-cluster requests are
// (system:serviceaccount:NS:NAME, groups system:serviceaccounts and
// system:serviceaccounts:NS). The token is bound to no object, so it carries
// no node (see PodBoundConfig). Its connections are closed with the test.
func ServiceAccountConfig(t testing.TB, ns, name string) *rest.Config {
	t.Helper()
	return tokenConfig(t, ns, name, nil)
}

// tokenConfig creates the ServiceAccount ns/name when missing and returns a
// config with a one-hour token of it from the TokenRequest API, bound to
// bound when not nil.
func tokenConfig(t testing.TB, ns, name string, bound *authenticationv1.BoundObjectReference) *rest.Config {
	t.Helper()
	admin := Config(t)
	c := ClientFor(t, admin)
	ctx := Context(t)
	ensureServiceAccount(t, c, ns, name)
	hour := int64(3600)
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour, BoundObjectRef: bound},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request for service account %s/%s: %v", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(admin) // server, CA, dialer; no admin credentials
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// GrantRole gives the ServiceAccount ns/name exactly rules in ns: a Role
// ns/name and a RoleBinding ns/name to it. For tests of what a component
// does with too few rights (AgentConfig gives the rights of deploy/kubernetes).
// RBAC takes a moment to see a new binding: wait for what the rules allow.
func GrantRole(t testing.TB, ns, name string, rules []rbacv1.PolicyRule) {
	t.Helper()
	c := Client(t)
	ctx := Context(t)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Role %s/%s: %v", ns, name, err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create RoleBinding %s/%s: %v", ns, name, err)
	}
}

// GrantClusterRole gives the ServiceAccount ns/name exactly rules across
// the cluster: a ClusterRole and a ClusterRoleBinding both named
// name-ns (cluster-scoped: named after the test's namespace so that tests
// never share them), for rights a namespaced Role cannot give (listing
// namespaces). It returns once the server authorizes the first rule.
func GrantClusterRole(t testing.TB, ns, name string, rules []rbacv1.PolicyRule) {
	t.Helper()
	c := Client(t)
	ctx := Context(t)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + ns}, Rules: rules}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterRole %s: %v", role.Name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterRoleBinding %s: %v", binding.Name, err)
	}
	if len(rules) > 0 {
		waitAuthorized(t, c, "system:serviceaccount:"+ns+":"+name, []authorizationv1.ResourceAttributes{firstAttributes(rules[0])})
	}
}

// WriteKubeconfig writes cfg (server, CA, bearer token) as a kubeconfig file
// in a temporary directory of the test and returns its path: for a probed
// process started with --kubeconfig FILE under that identity. Its
// connections are the process's own, not closed with the test.
func WriteKubeconfig(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthority:     cfg.TLSClientConfig.CAFile,
		CertificateAuthorityData: cfg.TLSClientConfig.CAData,
	}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return path
}

// Eventually polls cond every 20 ms until it holds, failing the test with
// "timed out waiting for WHAT" after Timeout: for what the server (an
// informer, RBAC, a component's worker) does a moment later.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
