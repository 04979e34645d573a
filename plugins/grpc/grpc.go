// Package grpc is the built-in gRPC probe handler (spec §5.4, rules G1–G2):
// one grpc.health.v1.Health/Check call per attempt on a fresh connection to
// the pod IP.
package grpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/plugins/internal/dialer"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// New returns the gRPC probe handler.
//
// Prepare builds the dial options once per worker (G1): user agent
// runtime.KubeProbeUserAgent (grpc-go appends " grpc-go/<version>"), the
// probe dialer (plugins/internal/dialer) bounded by the probe timeout, and
// transport security from grpc.mode: absent or "Plaintext" → plaintext (the
// kubelet default), "TLS" → TLS without certificate verification. Prepare
// fails (every run errored, P5) when the spec has no grpc action, the port is
// outside 1–65535 (`invalid port number: N`) or the mode is unknown.
//
// Each Probe opens its own connection (no reuse across runs, like the
// kubelet) and always closes it. See Probe for the verdicts.
func New() runtime.Handler { return handler{} }

type handler struct{}

func (handler) Prepare(spec *runtime.Spec) (runtime.Prober, error) {
	if spec == nil || spec.Probe == nil || spec.Probe.GRPC == nil {
		return nil, errors.New("grpc probe: the probe has no grpc action")
	}
	g := spec.Probe.GRPC
	if g.Port <= 0 || g.Port > 65535 {
		return nil, fmt.Errorf("invalid port number: %d", g.Port)
	}
	var creds credentials.TransportCredentials
	switch {
	case g.Mode == nil || *g.Mode == v1.GRPCProbeModePlaintext:
		creds = insecure.NewCredentials()
	case *g.Mode == v1.GRPCProbeModeTLS:
		// The API's definition of mode TLS: "TLS without certificate
		// verification" (GRPCContainerProbeTLS, KEP-4939).
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})
	default:
		return nil, fmt.Errorf("grpc probe: unsupported mode %q (want %q or %q)", *g.Mode, v1.GRPCProbeModePlaintext, v1.GRPCProbeModeTLS)
	}
	service := ""
	if g.Service != nil {
		service = *g.Service
	}
	timeout := spec.Timeout()
	return &prober{
		port:    strconv.Itoa(int(g.Port)),
		service: service,
		timeout: timeout,
		dialer:  dialer.New(timeout),
		untimed: dialer.New(0),
		opts: []ggrpc.DialOption{
			ggrpc.WithUserAgent(runtime.KubeProbeUserAgent),
			ggrpc.WithTransportCredentials(creds),
		},
	}, nil
}

type prober struct {
	port    string
	service string
	timeout time.Duration
	dialer  *net.Dialer
	// untimed dials attempts whose deadline runs on an injected clock
	// (runtime.OnInjectedClock): the context alone bounds the connect.
	untimed *net.Dialer
	opts    []ggrpc.DialOption // without the dialer, which is per attempt
}

// dialErrors keeps the last error of one attempt's dials: grpc-go retries a
// failed connect until the deadline and reports only the deadline, so the
// attempt keeps the cause itself (the Failure's Cause, which lets the
// runtime tell a prober out of descriptors from a target that is down).
type dialErrors struct {
	mu   sync.Mutex
	last error
}

func (d *dialErrors) set(err error) {
	d.mu.Lock()
	d.last = err
	d.mu.Unlock()
}

func (d *dialErrors) get() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// dialOptions returns the prober's options plus d, recording its errors in
// errs. grpc-go dials with a context of its own connection, not the
// attempt's, so the attempt's egress policy (nil: none) is put on it here:
// every connection the attempt makes is checked against it.
func (p *prober) dialOptions(d *net.Dialer, policy *egress.Policy, errs *dialErrors) []ggrpc.DialOption {
	return append(p.opts[:len(p.opts):len(p.opts)], ggrpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := d.DialContext(egress.WithPolicy(ctx, policy), "tcp", addr)
		if err != nil {
			errs.set(err)
		}
		return c, err
	}))
}

// Probe checks t.PodIP:port (joined IPv6-safely) once. Connect and RPC share
// one deadline: the probe timeout (P3), or ctx's deadline if earlier; when
// ctx's deadline runs on an injected clock (runtime.OnInjectedClock), that
// deadline alone, so the verdict at the injected clock's timeout is the
// kubelet's at its timeout. The
// error is nil for every verdict; the texts are the kubelet's (G2):
//
//   - SERVING → Success "service healthy";
//   - another serving status → Failure `service unhealthy (responded with "NOT_SERVING")`;
//   - not connected by the deadline (refused, unreachable, not speaking
//     gRPC, TLS mismatch: the connection is retried until then) → Failure
//     `timeout: failed to connect service "<addr>" within <timeout>: context deadline exceeded`;
//   - the client cannot be created → Failure `error: failed to connect service at "<addr>": <err>`;
//   - Unimplemented → Failure `error: this server does not implement the grpc health protocol (grpc.health.v1.Health): <msg>`;
//   - DeadlineExceeded → Failure `timeout: health rpc did not complete within <timeout>`;
//   - any other RPC error → Failure `error: health rpc probe failed: <err>`.
//
// <timeout> is the probe timeout printed as a Go duration ("1s").
// A connect failure carries the last dial error as the Outcome's Cause: when
// it shows the prober out of its own resources (socket: too many open
// files), the runtime makes the run errored (runtime.ClassifyAttempt).
// Under an egress policy (cluster mode, runtime/egress) every connection
// goes only where it allows (a refused one is never made: the attempt
// fails to connect by its deadline, the policy's refusal as the Cause),
// and the texts carry nothing the server sent but codes: the status
// message in the Unimplemented and other RPC errors is
// egress.WithheldText.
// Outcome.StatusCode is the serving status number when the server answered
// (SERVING = 1), else 0. Exception (not in the kubelet, whose context is
// never cancelled): when ctx is cancelled before its deadline, Probe returns
// Unknown and an error wrapping context.Canceled (errored), not a Failure.
func (p *prober) Probe(ctx context.Context, t runtime.Target) (runtime.Outcome, error) {
	d := p.untimed
	if !runtime.OnInjectedClock(ctx) {
		d = p.dialer
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}

	addr := net.JoinHostPort(t.PodIP, p.port)
	// passthrough: the address goes to the dialer as it is, as with the
	// kubelet's (blocking) Dial; no name resolution.
	var dialErrs dialErrors
	conn, err := ggrpc.NewClient("passthrough:///"+addr, p.dialOptions(d, egress.FromContext(ctx), &dialErrs)...)
	if err != nil {
		return failure(fmt.Sprintf("error: failed to connect service at %q: %v", addr, err)), nil
	}
	defer func() { _ = conn.Close() }()

	if err := waitReady(ctx, conn); err != nil {
		if cancelled(ctx) {
			return canceled(addr, ctx.Err())
		}
		out := failure(fmt.Sprintf("error: failed to connect service at %q: %v", addr, err))
		if errors.Is(err, context.DeadlineExceeded) {
			out = failure(fmt.Sprintf("timeout: failed to connect service %q within %v: %v", addr, p.timeout, err))
		}
		out.Cause = dialErrs.get()
		return out, nil
	}

	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: p.service})
	if err != nil {
		if cancelled(ctx) {
			return canceled(addr, ctx.Err())
		}
		if st, ok := status.FromError(err); ok {
			switch st.Code() {
			case codes.Unimplemented:
				return failure(fmt.Sprintf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", egress.Withhold(ctx, st.Message()))), nil
			case codes.DeadlineExceeded:
				return failure(fmt.Sprintf("timeout: health rpc did not complete within %v", p.timeout)), nil
			}
			if egress.Restricted(ctx) {
				// The status message is the server's (or a transport
				// error quoting what it sent); its code is kept.
				return failure(fmt.Sprintf("error: health rpc probe failed: rpc error: code = %s desc = %s", st.Code(), egress.Withhold(ctx, st.Message()))), nil
			}
		}
		return failure(fmt.Sprintf("error: health rpc probe failed: %v", egress.Withhold(ctx, err.Error()))), nil
	}
	code := int(resp.GetStatus())
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return runtime.Outcome{
			Result:     runtime.Failure,
			Output:     fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String()),
			StatusCode: code,
		}, nil
	}
	return runtime.Outcome{Result: runtime.Success, Output: "service healthy", StatusCode: code}, nil
}

// waitReady blocks until conn is Ready, as the kubelet's blocking dial does:
// transient failures are retried (with grpc-go's backoff) until ctx ends,
// then ctx's error is returned. A connection that became Ready just as the
// deadline passed counts as not connected, as with a blocking dial.
func waitReady(ctx context.Context, conn *ggrpc.ClientConn) error {
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Idle:
			conn.Connect()
		case connectivity.Ready:
			return ctx.Err()
		case connectivity.Shutdown:
			return errors.New("grpc: the client connection is closing")
		}
		if !conn.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}

func cancelled(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled)
}

func canceled(addr string, err error) (runtime.Outcome, error) {
	return runtime.Outcome{Result: runtime.Unknown}, fmt.Errorf("grpc probe of %q cancelled: %w", addr, err)
}

func failure(msg string) runtime.Outcome {
	return runtime.Outcome{Result: runtime.Failure, Output: msg}
}
