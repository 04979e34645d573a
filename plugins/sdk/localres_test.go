//go:build linux

package sdk

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/probed/probed/internal/fdtest"
	"github.com/probed/probed/runtime"
)

// TestProbeOutOfDescriptors: a plugin whose own descriptor
// table is full answers a Failure whose Cause is that dial error (socket:
// too many open files) with an error, so the host counts the run errored,
// never a Failure of the target; with descriptors free the same probe
// succeeds.
func TestProbeOutOfDescriptors(t *testing.T) {
	if !fdtest.InChild() {
		fdtest.RunChild(t)
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h := &countingHandler{probe: func(ctx context.Context, _ *runtime.Spec, _ runtime.Target) (runtime.Outcome, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
		if err != nil {
			return runtime.Outcome{Result: runtime.Failure, Output: err.Error(), Cause: err}, nil
		}
		_ = c.Close()
		return runtime.Outcome{Result: runtime.Success}, nil
	}}
	srv, err := NewServer(Plugin{Name: "p", Kinds: []Kind{{Name: "k", Handler: h}}})
	if err != nil {
		t.Fatal(err)
	}
	release := fdtest.Exhaust(t)
	resp, perr := srv.Probe(context.Background(), request(nil))
	release()
	if st, ok := status.FromError(perr); perr == nil || !ok || st.Code() != codes.Unknown ||
		!strings.Contains(st.Message(), "probe not attempted: probed is out of local resources (EMFILE)") {
		t.Fatalf("Probe under a full descriptor table: %v, %v; want an Unknown error naming EMFILE", resp, perr)
	}
	if _, err := srv.Probe(context.Background(), request(nil)); err != nil {
		t.Errorf("Probe with descriptors free: %v", err)
	}
}
