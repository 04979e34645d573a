package dialer

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/probed/probed/internal/standin"
	"github.com/probed/probed/runtime/egress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDialerChecksTheResolvedAddress: the egress check runs after name
// resolution, so a name is judged by the address it resolves to —
// `localhost` is 127.0.0.1 (from /etc/hosts; no DNS query is sent), which
// is refused when it is not the pod's IP, and no connection reaches the
// listener; with 127.0.0.1 as the pod's IP the same dial connects.
func TestDialerChecksTheResolvedAddress(t *testing.T) {
	t.Cleanup(NoDNSForTests())
	target := standin.HTTP(t, "127.0.0.1:0", "ok")
	port := strconv.Itoa(target.Port())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	other := egress.WithPolicy(ctx, egress.NewPolicy([]netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil))
	_, err := New(time.Second).DialContext(other, "tcp4", net.JoinHostPort("localhost", port))
	if !egress.IsDenied(err) {
		t.Fatalf("dial localhost with pod IP 127.0.0.2: %v, want refused by the egress policy", err)
	}
	if want := "dial tcp4 127.0.0.1:" + port + ": " + egress.DeniedText; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	target.NoConnection(t)

	own := egress.WithPolicy(ctx, egress.NewPolicy([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil))
	c, err := New(time.Second).DialContext(own, "tcp4", net.JoinHostPort("localhost", port))
	if err != nil {
		t.Fatalf("dial localhost with pod IP 127.0.0.1: %v", err)
	}
	c.Close()

	// Without a policy (manifest mode) nothing is checked.
	c2, err := New(time.Second).DialContext(ctx, "tcp4", net.JoinHostPort("localhost", port))
	if err != nil {
		t.Fatalf("dial without a policy: %v", err)
	}
	c2.Close()
}
