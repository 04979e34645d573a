package gate

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/manager/results"
)

// probed never writes Ready or any condition of the kubelet's, and the type
// must be a valid condition type.
func TestNewRefusesConditionsNotProbeds(t *testing.T) {
	base := Options{
		Pods:      PodLookupFunc(func(uid types.UID) (*v1.Pod, bool) { return nil, false }),
		Client:    &kubernetes.Clientset{},
		Readiness: results.NewManager(), Startup: results.NewManager(),
	}
	for _, typ := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady, v1.PodInitialized, v1.PodScheduled, "not a/valid/type"} {
		opts := base
		opts.ConditionType = typ
		if _, err := New(opts); err == nil || !strings.Contains(err.Error(), string(typ)) {
			t.Errorf("New with condition type %q: %v, want an error naming it", typ, err)
		}
	}
	w, err := New(base)
	if err != nil {
		t.Fatal(err)
	}
	if w.ConditionType() != DefaultConditionType {
		t.Errorf("default condition type %q, want %q", w.ConditionType(), DefaultConditionType)
	}
	if _, err := New(Options{}); err == nil {
		t.Error("New without Pods, Client and results managers: no error")
	}
}
