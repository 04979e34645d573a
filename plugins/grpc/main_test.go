package grpc_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a probe leaves a client connection
// (and its goroutines) behind. The only goroutines ignored are those of ants'
// default pool, which ants starts in its package init (imported through the
// runtime package).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	)
}
