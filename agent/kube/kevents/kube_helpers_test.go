package kevents_test

// Small helpers of this package's tests; the API server side (config,
// namespaces, pods, identities, request counting) is internal/kubetest.

import (
	"testing"
	"time"
)

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
