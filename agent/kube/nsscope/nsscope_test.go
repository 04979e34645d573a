package nsscope_test

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/kube/nsscope"
	"github.com/probed/probed/internal/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// Against the real API server, the default scope
// allows a liveness action only in a namespace labelled
// probed.io/liveness-actions=enabled, follows a label added and removed, and
// says how to allow it; an empty selector is refused.
func TestScopeFollowsTheLabel(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	s, err := nsscope.New(c, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	why, err := s.Allows(kubetest.Context(t), ns)
	if err != nil || !strings.Contains(why, "is not selected by --liveness-action-namespaces=probed.io/liveness-actions=enabled") {
		t.Fatalf("unlabelled: %q, %v", why, err)
	}
	label := func(v string) {
		patch := []byte(`{"metadata":{"labels":{"` + nsscope.LivenessActionsLabel + `":` + v + `}}}`)
		if _, err := c.CoreV1().Namespaces().Patch(kubetest.Context(t), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(`"enabled"`)
	kubetest.Eventually(t, "the labelled namespace allowed", func() bool { why, known := s.Known(ns); return known && why == "" })
	label(`null`)
	kubetest.Eventually(t, "the unlabelled namespace refused", func() bool { why, _ := s.Known(ns); return why != "" })
	if why, err := s.Allows(kubetest.Context(t), ns+"-gone"); err != nil || why == "" {
		t.Fatalf("missing namespace: %q, %v", why, err)
	}
	if _, err := nsscope.New(c, ","); err == nil {
		t.Error("an empty selector was accepted")
	}
}
