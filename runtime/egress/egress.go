// Package egress holds the rule of where a probe may connect in cluster
// mode, the one place it lives (no SSRF from the node).
//
// In cluster mode the probed.io/probes annotation is written by a tenant and
// the agent runs with the node's network (hostNetwork): a probe that could
// name any host would let the tenant send requests from the node to its
// loopback services, to other pods and to the cloud metadata address, past
// every NetworkPolicy. So there a probe connects only to its own pod's IPs
// (all of status.podIPs, both families of a dual-stack pod) and to the
// ranges the operator allows (--allow-probe-host). The kubelet has no such
// rule for spec probes; Pod Security "baseline" refuses their host field
// since v1.34 (kubernetes/kubernetes#99425, KEP-4940), and the annotation
// must not walk around that.
//
// The rule is checked where the connection is made, after name resolution
// (Control, a net.Dialer ControlContext hook that runs before connect(2)),
// so names, DNS rebinding, HTTP redirects and plugins' own connections are
// covered alike; validation (Rule.CheckHost) only refuses early what the
// dial would refuse anyway.
//
// A run's Policy travels in its context (WithPolicy, FromContext). No policy
// means unrestricted: manifest mode and the library's default stay
// kubelet-exact. Under a policy, handlers also show nothing a target sent
// beyond its status code (Withhold): an error text that echoes a target's
// bytes (an SSH banner read as an HTTP status line, a redirect's Location, a
// gRPC server's status message) would carry them into Events the tenant
// can read.
//
// The package imports nothing of the project.
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
	"syscall"
)

// Flag names the operator's setting in error texts and docs.
const Flag = "--allow-probe-host"

// Rule is the operator's part of the egress rule: the ranges a probe may
// reach besides its pod's IPs. A nil *Rule means unrestricted (manifest
// mode). Immutable after NewRule.
type Rule struct {
	allow []netip.Prefix
}

// NewRule returns the rule allowing the given prefixes besides each pod's
// own IPs; none: only the pod's IPs. Prefixes are masked ("10.1.2.3/8" is
// 10.0.0.0/8) and an IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) is
// taken as the IPv4 prefix it maps (10.0.0.0/8), since the checked
// addresses are unmapped too.
func NewRule(allow []netip.Prefix) *Rule {
	r := &Rule{allow: make([]netip.Prefix, 0, len(allow))}
	for _, p := range allow {
		if p.IsValid() {
			r.allow = append(r.allow, normalPrefix(p))
		}
	}
	return r
}

// ParseRule parses CIDRs ("10.0.0.0/8", "fd00::/64") into a Rule. It fails
// on the first value that is not a CIDR, naming it and the flag.
func ParseRule(cidrs []string) (*Rule, error) {
	var allow []netip.Prefix
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			hint := ""
			if ip, ierr := netip.ParseAddr(s); ierr == nil {
				hint = fmt.Sprintf(" (for one address: %s/%d)", ip, ip.BitLen())
			}
			return nil, fmt.Errorf("%s %q: not a CIDR%s", Flag, s, hint)
		}
		allow = append(allow, p)
	}
	return NewRule(allow), nil
}

// Allowed returns the operator's prefixes (masked); the caller must not
// modify the slice.
func (r *Rule) Allowed() []netip.Prefix {
	if r == nil {
		return nil
	}
	return r.allow
}

// CheckHost is the validation of a probe's host field (httpGet.host,
// tcpSocket.host) under r. An empty host (the pod's IP, spec P7) is always
// fine. Without allowed ranges any host is refused: a probe may connect
// only to its pod's IP. With them, an IP literal must lie in one; a DNS name
// is accepted here and its addresses are checked at dial time (Control).
// The error says why, for a field.Forbidden; nil r allows everything.
func (r *Rule) CheckHost(host string) error {
	if r == nil || host == "" {
		return nil
	}
	if len(r.allow) == 0 {
		return fmt.Errorf("probes may connect only to their pod's IP: leave host empty (the operator can allow more with %s)", Flag)
	}
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if err != nil {
		return nil // a name: its addresses are checked when the probe dials
	}
	if !r.contains(ip.Unmap()) {
		return fmt.Errorf("%s is outside the ranges the operator allows (%s %s); probes may connect only to their pod's IP and those ranges",
			ip, Flag, prefixList(r.allow))
	}
	return nil
}

func (r *Rule) contains(ip netip.Addr) bool {
	for _, p := range r.allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Policy returns the policy of one run: r's ranges plus podIPs (the pod's
// status.podIP and status.podIPs; unparsable entries are skipped). A nil r
// returns nil, unrestricted.
func (r *Rule) Policy(podIPs ...netip.Addr) *Policy {
	if r == nil {
		return nil
	}
	p := &Policy{allow: r.allow, pods: make([]netip.Addr, 0, len(podIPs))}
	for _, ip := range podIPs {
		if ip.IsValid() {
			p.pods = append(p.pods, ip.WithZone("").Unmap())
		}
	}
	return p
}

// Policy is where the connections of one probe run may go: its pod's IPs
// and the operator's ranges. A nil *Policy allows everything. Immutable.
type Policy struct {
	pods  []netip.Addr
	allow []netip.Prefix
}

// NewPolicy returns the policy allowing podIPs and the prefixes allow:
// NewRule(allow).Policy(podIPs...). Plugins rebuild the host's policy with
// it (plugins/sdk).
func NewPolicy(podIPs []netip.Addr, allow []netip.Prefix) *Policy {
	return NewRule(allow).Policy(podIPs...)
}

// PodIPs returns the pod's IPs the policy allows; the caller must not
// modify the slice.
func (p *Policy) PodIPs() []netip.Addr {
	if p == nil {
		return nil
	}
	return p.pods
}

// Allowed returns the operator's prefixes; the caller must not modify the
// slice.
func (p *Policy) Allowed() []netip.Prefix {
	if p == nil {
		return nil
	}
	return p.allow
}

// Allows reports whether a connection to ip may be made: ip (an
// IPv4-mapped IPv6 address counts as the IPv4 address it maps, a zone is
// ignored) is one of the pod's IPs or lies in an allowed prefix. A nil p
// allows everything; an invalid ip is refused.
func (p *Policy) Allows(ip netip.Addr) bool {
	if p == nil {
		return true
	}
	if !ip.IsValid() {
		return false
	}
	ip = ip.WithZone("").Unmap()
	for _, pod := range p.pods {
		if pod == ip {
			return true
		}
	}
	for _, pre := range p.allow {
		if pre.Contains(ip) {
			return true
		}
	}
	return false
}

// Check returns nil when p allows a connection to address ("IP:port", as a
// net.Dialer's ControlContext receives it), else a *DeniedError. An address
// that holds no IP (a unix socket path) is refused under a policy.
func (p *Policy) Check(address string) error {
	if p == nil {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	var ip netip.Addr
	if err == nil {
		ip = ap.Addr()
	} else if host, _, serr := net.SplitHostPort(address); serr == nil {
		ip, _ = netip.ParseAddr(host)
	}
	if !p.Allows(ip) {
		return &DeniedError{Address: address}
	}
	return nil
}

// DeniedError is a connection the policy refused. A net.Dialer whose
// ControlContext is Control returns it wrapped in a *net.OpError, so the
// probe's text is `dial tcp 127.0.0.2:18500: refused by probed's egress
// policy (...)`. Handlers report it as a Failure of the probe (the tenant's
// probe tried to reach what it may not), never as an error of the prober.
type DeniedError struct {
	// Address is the IP:port the connection would have gone to.
	Address string
}

// DeniedText is the text of every DeniedError.
const DeniedText = "refused by probed's egress policy (probes may connect only to their pod's IP; " + Flag + ")"

func (e *DeniedError) Error() string { return DeniedText }

// IsDenied reports whether err is or wraps a *DeniedError.
func IsDenied(err error) bool {
	var d *DeniedError
	return errors.As(err, &d)
}

type policyKey struct{}

// WithPolicy returns ctx carrying p, the policy of the run (nil p: ctx
// unchanged, unrestricted).
func WithPolicy(ctx context.Context, p *Policy) context.Context {
	if p == nil {
		return ctx
	}
	return context.WithValue(ctx, policyKey{}, p)
}

// FromContext returns the policy ctx carries, nil when none (unrestricted).
func FromContext(ctx context.Context) *Policy {
	p, _ := ctx.Value(policyKey{}).(*Policy)
	return p
}

// Control is a net.Dialer ControlContext hook: it refuses, before the
// socket connects, an address the policy of ctx does not allow. It runs
// after name resolution, once per address tried, so it sees the IP that
// would really be connected to. Without a policy in ctx it allows
// everything. Use it (or Dialer) for every connection a probe makes.
func Control(ctx context.Context, _ string, address string, _ syscall.RawConn) error {
	return FromContext(ctx).Check(address)
}

// Dialer returns a net.Dialer whose connections obey the policy of the
// context they are dialled with (ControlContext: Control). Plugins dial
// their targets with it (plugins/sdk.Dialer); an http.Transport passes the
// request's context values to its DialContext, so redirects are checked
// too.
func Dialer() *net.Dialer {
	return &net.Dialer{ControlContext: Control}
}

// WithheldText stands, under a policy, for what a target sent (Withhold).
const WithheldText = "(withheld: in cluster mode probed shows nothing a target sent but its status code)"

// Withhold is the rule for bytes a target sent in texts that reach events
// and logs: s unchanged when ctx carries no policy (manifest mode: the
// kubelet's exact texts), else WithheldText. Handlers call it on every part
// of an output or error that a target chose (a malformed answer quoted by
// Go, a redirect's Location, a server's status message); the status code
// is not such a part.
func Withhold(ctx context.Context, s string) string {
	if FromContext(ctx) == nil {
		return s
	}
	return WithheldText
}

// WithholdError is Withhold for an error whose text may quote a target: err
// unchanged when ctx carries no policy; else err itself when its text
// carries nothing a target chose — a deadline or cancellation, a
// connection error (*net.OpError: the addresses dialled and an errno, or
// this policy's refusal), a TLS record or alert error —, io.EOF or
// io.ErrUnexpectedEOF for an answer cut short, and for anything else (a
// malformed answer Go quotes, a server's error reply) an error whose text
// is WithheldText. The original error is for the caller's Outcome.Cause,
// which is never shown.
func WithholdError(ctx context.Context, err error) error {
	if err == nil || FromContext(ctx) == nil {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, io.ErrUnexpectedEOF):
		return io.ErrUnexpectedEOF
	case errors.Is(err, io.EOF):
		return io.EOF
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return op
	}
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		return errors.New(rh.Msg)
	}
	var alert tls.AlertError
	if errors.As(err, &alert) {
		return alert
	}
	return errors.New(WithheldText)
}

// Restricted reports whether ctx carries a policy (cluster mode).
func Restricted(ctx context.Context) bool { return FromContext(ctx) != nil }

// normalPrefix masks p and maps an IPv4-mapped IPv6 prefix to IPv4.
func normalPrefix(p netip.Prefix) netip.Prefix {
	a := p.Addr().WithZone("")
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return netip.PrefixFrom(a, p.Bits()).Masked()
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
