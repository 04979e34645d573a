package egress_test

import (
	"testing"
	"time"

	"github.com/probed/probed/internal/standin"
	"github.com/probed/probed/runtime/egress"
)

// TestDialerRefusesBeforeConnecting: a dial the policy refuses never
// reaches the listener (Control runs before connect), and its error is
// the DeniedError inside Go's dial error.
func TestDialerRefusesBeforeConnecting(t *testing.T) {
	target := standin.HTTP(t, "127.0.0.1:0", "ok")
	deny := standin.PodContext(t, 5*time.Second, "10.1.2.3")
	_, err := egress.Dialer().DialContext(deny, "tcp", target.Addr())
	if !egress.IsDenied(err) || err.Error() != "dial tcp "+target.Addr()+": "+egress.DeniedText {
		t.Fatalf("dial: %v", err)
	}
	target.NoConnection(t)
	allow := standin.PodContext(t, 5*time.Second, "127.0.0.1")
	c, err := egress.Dialer().DialContext(allow, "tcp", target.Addr())
	if err != nil {
		t.Fatalf("allowed dial: %v", err)
	}
	c.Close()
}
