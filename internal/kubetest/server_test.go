package kubetest_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/internal/kubetest"
)

// TestPrivateServerRestartKeepsObjects: env.sh apiserver-stop makes the
// private server refuse requests, apiserver-start brings it back on the same
// address and credentials (the kubeconfig stays valid), and what was stored
// before is still there (etcd kept running).
func TestPrivateServerRestartKeepsObjects(t *testing.T) {
	kubetest.PrivateServer(t)
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	before, err := c.CoreV1().Namespaces().Get(kubetest.Context(t), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubetest.StopAPIServer(t)
	if _, err := c.CoreV1().Namespaces().Get(kubetest.Context(t), ns, metav1.GetOptions{}); err == nil {
		t.Fatal("the stopped API server answered")
	}
	kubetest.StartAPIServer(t)
	after, err := c.CoreV1().Namespaces().Get(kubetest.Context(t), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if after.UID != before.UID {
		t.Errorf("namespace %s: UID %s before the restart, %s after", ns, before.UID, after.UID)
	}
}
