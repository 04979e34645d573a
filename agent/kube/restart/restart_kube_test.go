package restart_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/kube/restart"
	"github.com/probed/probed/internal/kubetest"
)

// The default namespace rule, against the real API server: only a
// namespace labelled probed.io/liveness-actions=enabled allows restarts; the
// refusal says how to allow them.
func TestLabelledNamespaces(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	allowed := restart.LabelledNamespaces(c)
	why, err := allowed(context.Background(), ns)
	if err != nil || !strings.Contains(why, "is not labelled probed.io/liveness-actions=enabled") {
		t.Fatalf("unlabelled: %q, %v", why, err)
	}
	patch := []byte(`{"metadata":{"labels":{"` + restart.LivenessActionsLabel + `":"enabled"}}}`)
	if _, err := c.CoreV1().Namespaces().Patch(kubetest.Context(t), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if why, err := allowed(context.Background(), ns); why != "" || err != nil {
		t.Fatalf("labelled: %q, %v", why, err)
	}
	if why, err := allowed(context.Background(), ns+"-gone"); err != nil || !strings.Contains(why, "does not exist") {
		t.Fatalf("missing: %q, %v", why, err)
	}
}
