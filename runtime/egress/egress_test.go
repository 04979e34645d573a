package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// TestPolicyAllows is the rule: a probe connects to its pod's IPs (both
// families of a dual-stack pod) and the operator's ranges, nothing else;
// an IPv4-mapped IPv6 address is the IPv4 address it maps.
func TestPolicyAllows(t *testing.T) {
	dual := NewPolicy(addrs("10.1.2.3", "fd00::3"), nil)
	ranges := NewPolicy(addrs("10.1.2.3"), prefixes("127.0.0.2/32", "192.168.0.0/16", "fd10::/64", "::ffff:172.16.0.0/108"))
	none := NewPolicy(nil, nil)
	cases := []struct {
		name string
		p    *Policy
		ip   string
		want bool
	}{
		{"pod IPv4", dual, "10.1.2.3", true},
		{"pod IPv6", dual, "fd00::3", true},
		{"pod IPv6 with a zone", dual, "fd00::3%eth0", true},
		{"pod IPv4, v4-mapped", dual, "::ffff:10.1.2.3", true},
		{"neighbour IPv4", dual, "10.1.2.4", false},
		{"neighbour IPv6", dual, "fd00::4", false},
		{"loopback", dual, "127.0.0.1", false},
		{"loopback v6", dual, "::1", false},
		{"loopback, v4-mapped", dual, "::ffff:127.0.0.1", false},
		{"metadata", dual, "169.254.169.254", false},
		{"metadata, v4-mapped", dual, "::ffff:169.254.169.254", false},
		{"unspecified (connects to the node)", dual, "0.0.0.0", false},
		{"unspecified v6", dual, "::", false},
		{"allowed /32", ranges, "127.0.0.2", true},
		{"next to the /32", ranges, "127.0.0.3", false},
		{"allowed /16", ranges, "192.168.44.1", true},
		{"allowed /16, v4-mapped", ranges, "::ffff:192.168.44.1", true},
		{"allowed v6 /64", ranges, "fd10::99", true},
		{"outside the v6 /64", ranges, "fd10:0:0:1::1", false},
		{"allowed by a v4-mapped prefix", ranges, "172.16.3.4", true},
		{"pod IP beside ranges", ranges, "10.1.2.3", true},
		{"empty policy", none, "10.1.2.3", false},
		{"nil policy", nil, "169.254.169.254", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p.Allows(netip.MustParseAddr(c.ip)); got != c.want {
				t.Errorf("Allows(%s) = %v, want %v", c.ip, got, c.want)
			}
		})
	}
	if dual.Allows(netip.Addr{}) {
		t.Error("the invalid address is allowed")
	}
}

func TestPolicyCheckAddresses(t *testing.T) {
	p := NewPolicy(addrs("10.1.2.3", "fd00::3"), nil)
	for _, ok := range []string{"10.1.2.3:80", "[fd00::3]:8080", "[::ffff:10.1.2.3]:1"} {
		if err := p.Check(ok); err != nil {
			t.Errorf("Check(%s) = %v", ok, err)
		}
	}
	for _, bad := range []string{"127.0.0.1:80", "[::1]:80", "10.1.2.4:80", "/run/x.sock", "", "localhost:80"} {
		err := p.Check(bad)
		var d *DeniedError
		if !errors.As(err, &d) || d.Address != bad || err.Error() != DeniedText {
			t.Errorf("Check(%q) = %v, want a DeniedError", bad, err)
		}
	}
	if err := (*Policy)(nil).Check("169.254.169.254:80"); err != nil {
		t.Errorf("nil policy: %v", err)
	}
}

func TestRuleCheckHost(t *testing.T) {
	closed := NewRule(nil)
	open := NewRule(prefixes("127.0.0.2/32", "fd10::/64"))
	cases := []struct {
		r    *Rule
		host string
		want string // "" = allowed
	}{
		{nil, "169.254.169.254", ""},
		{closed, "", ""},
		{closed, "127.0.0.2", "probes may connect only to their pod's IP: leave host empty (the operator can allow more with --allow-probe-host)"},
		{closed, "metadata.google.internal", "probes may connect only to their pod's IP"},
		{open, "", ""},
		{open, "127.0.0.2", ""},
		{open, "::ffff:127.0.0.2", ""},
		{open, "[fd10::1]", ""},
		{open, "127.0.0.3", "127.0.0.3 is outside the ranges the operator allows (--allow-probe-host 127.0.0.2/32,fd10::/64)"},
		{open, "169.254.169.254", "outside the ranges"},
		{open, "db.internal", ""}, // a name: checked at dial time
	}
	for _, c := range cases {
		err := c.r.CheckHost(c.host)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("CheckHost(%q) = %v, want nil", c.host, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("CheckHost(%q) = %v, want %q", c.host, err, c.want)
		}
	}
}

func TestParseRule(t *testing.T) {
	r, err := ParseRule([]string{"10.1.2.3/8", " fd00::/64", "", "::ffff:192.168.0.0/112"})
	if err != nil {
		t.Fatal(err)
	}
	got := prefixList(r.Allowed())
	if want := "10.0.0.0/8,fd00::/64,192.168.0.0/16"; got != want {
		t.Errorf("prefixes %s, want %s", got, want)
	}
	_, err = ParseRule([]string{"10.0.0.1"})
	if err == nil || err.Error() != `--allow-probe-host "10.0.0.1": not a CIDR (for one address: 10.0.0.1/32)` {
		t.Errorf("bare IP: %v", err)
	}
	if _, err := ParseRule([]string{"nope"}); err == nil || !strings.Contains(err.Error(), `"nope": not a CIDR`) {
		t.Errorf("garbage: %v", err)
	}
	if r, _ := ParseRule(nil); r == nil || len(r.Allowed()) != 0 {
		t.Errorf("empty: %v", r)
	}
}

func TestContextAndWithhold(t *testing.T) {
	ctx := context.Background()
	if FromContext(ctx) != nil || Restricted(ctx) || WithPolicy(ctx, nil) != ctx {
		t.Fatal("a bare context carries a policy")
	}
	if got := Withhold(ctx, `malformed HTTP response "SSH-2.0-OpenSSH_9.2p1"`); !strings.Contains(got, "SSH-2.0") {
		t.Errorf("unrestricted: %q, want the text as it is", got)
	}
	p := NewRule(nil).Policy(addrs("10.1.2.3")...)
	rctx := WithPolicy(ctx, p)
	if FromContext(rctx) != p || !Restricted(rctx) {
		t.Fatal("the policy did not travel")
	}
	if got := Withhold(rctx, `malformed HTTP response "SSH-2.0-OpenSSH_9.2p1"`); got != WithheldText {
		t.Errorf("restricted: %q", got)
	}
}

// TestWithholdError: under a policy an error keeps its text only when the
// text carries nothing a target chose.
func TestWithholdError(t *testing.T) {
	rctx := WithPolicy(context.Background(), NewPolicy(addrs("10.1.2.3"), nil))
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 80}, Err: errors.New("connect: connection refused")}
	cases := []struct {
		err  error
		want string
	}{
		{refused, "dial tcp 10.1.2.3:80: connect: connection refused"},
		{fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", refused), "dial tcp 10.1.2.3:80: connect: connection refused"},
		{context.DeadlineExceeded, "context deadline exceeded"},
		{fmt.Errorf("wrapped: %w", io.ErrUnexpectedEOF), "unexpected EOF"},
		{io.EOF, "EOF"},
		{tls.RecordHeaderError{Msg: "tls: first record does not look like a TLS handshake"}, "tls: first record does not look like a TLS handshake"},
		{errors.New(`net/http: HTTP/1.x transport connection broken: malformed HTTP response "SSH-2.0-OpenSSH_9.2p1"`), WithheldText},
		{errors.New("WRONGPASS invalid username-password pair"), WithheldText},
	}
	for _, c := range cases {
		if got := WithholdError(rctx, c.err); got.Error() != c.want {
			t.Errorf("WithholdError(%q) = %q, want %q", c.err, got, c.want)
		}
		if got := WithholdError(context.Background(), c.err); got != c.err {
			t.Errorf("without a policy: %v, want the error itself", got)
		}
	}
	if WithholdError(rctx, nil) != nil {
		t.Error("nil became an error")
	}
}
