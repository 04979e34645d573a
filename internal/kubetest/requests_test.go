package kubetest_test

import (
	"errors"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/probed/probed/internal/kubetest"
)

// TestRequestsCountsAndStagesAnOutage: Requests records the requests of the
// config it wraps (method, path, query, code); SetDown cuts its open watch
// and refuses new requests with a refused dial (what the reflector retries
// on) while the test's own client keeps working; SetDown(false) lets
// requests through again.
func TestRequestsCountsAndStagesAnOutage(t *testing.T) {
	var requests kubetest.Requests
	c := kubetest.ClientFor(t, requests.Wrap(kubetest.Config(t)))
	admin := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	ctx := kubetest.Context(t)

	if _, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 7}); err != nil {
		t.Fatal(err)
	}
	if n := requests.Count("GET", "/api/v1/namespaces/"+ns+"/pods"); n != 1 {
		t.Fatalf("%d pod lists recorded, want 1: %+v", n, requests.All())
	}
	if r := requests.All()[0]; r.Code != 200 || r.Query != "limit=7" || r.Err != nil {
		t.Fatalf("recorded %+v, want code 200, query limit=7", r)
	}

	w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	requests.SetDown(true)
	for ev := range w.ResultChan() { // the cut watch ends quietly, as on a dropped connection
		if ev.Type == watch.Error {
			t.Fatalf("cut watch reported %+v, want a quiet end", ev.Object)
		}
	}
	_, err = c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if !errors.Is(err, kubetest.ErrOutage) || !utilnet.IsConnectionRefused(err) {
		t.Fatalf("list while down: %v, want a refused connection", err)
	}
	if _, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the test's own client during the outage: %v", err)
	}
	all := requests.All()
	if last := all[len(all)-1]; last.Code != 0 || !errors.Is(last.Err, kubetest.ErrOutage) {
		t.Fatalf("refused request recorded as %+v, want code 0 and ErrOutage", last)
	}
	requests.SetDown(false)
	if _, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("list after the outage: %v", err)
	}
}

// TestGrantRoleGivesExactlyTheRules: a ServiceAccount granted pods get may
// get pods in its namespace and nothing else.
func TestGrantRoleGivesExactlyTheRules(t *testing.T) {
	ns := kubetest.Namespace(t)
	kubetest.GrantRole(t, ns, "reader", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}})
	c := kubetest.ClientFor(t, kubetest.ServiceAccountConfig(t, ns, "reader"))
	ctx := kubetest.Context(t)
	var err error
	for range 200 { // RBAC sees a new binding a moment after it is created
		if _, err = c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil || !apierrors.IsForbidden(err) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("list pods as the granted ServiceAccount: %v", err)
	}
	if _, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list secrets: %v, want forbidden", err)
	}
}
