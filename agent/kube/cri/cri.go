// Package cri is probed's one door to the node's container runtime, through
// the Container Runtime Interface the kubelet uses (k8s.io/cri-client,
// k8s.io/cri-api v1), in cluster mode with --container-runtime-endpoint
// (docs/cluster.md "The container runtime").
//
// A Client is connected once, at start: the runtime's Version names it
// (containerd, cri-o, ...) and a pod's containerStatuses[].containerID
// ("containerd://<id>") maps to a CRI container ID only when its type is
// that name (ContainerID); anything else is an error naming what was found,
// never a guess. probed makes exactly five CRI calls, each counted in
// probed_cri_calls_total{method, code}:
//
//   - Version, once at start, and when ExecSync did not answer (Runner);
//   - ExecSync, for exec probes (Runner, one more exec.Runner beside
//     LocalRunner) and exec preStop hooks (agent/kube/restart);
//   - Exec, the streaming exec that starts a resident exec helper in a
//     container (Stream, for agent/kube/resident with --exec-mode
//     resident): its session runs over the runtime's streaming server;
//   - ContainerStatus, before a liveness restart: only a running
//     container is stopped;
//   - StopContainer, the liveness restart itself.
//
// probed never creates, starts or removes containers or sandboxes, pulls
// images, or attaches or port-forwards; the kubelet restarts a container
// probed stopped, under the pod's restartPolicy.
//
// A pod's status is not proof that a container ID is that pod's (whoever
// writes the status could name another pod's container, and the runtime
// resolves a unique prefix of an ID). So ExecSync, Stream and
// StopContainer act only on a Container, which Resolve makes after the
// runtime's ContainerStatus confirmed it: the full ID, and the labels the
// kubelet gives every container it creates naming the pod's UID and the
// container's name. And what one call may answer is bounded: ExecSync's
// answer is refused by gRPC past tenant.ExecOutputBytes, before it is
// read (cri-client takes up to 16 MiB a call).
package cri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/cri-client/pkg/util"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"
	"k8s.io/utils/lru"

	"github.com/probed/probed/manager/results"
	probeexec "github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/runtime/tenant"
)

// DefaultRequestTimeout bounds one CRI call beyond the time the call itself
// asks for (an exec's timeout, a stop's grace period): 2 minutes, the
// kubelet's --runtime-request-timeout default.
const DefaultRequestTimeout = 2 * time.Minute

// CRI methods probed calls: the values of probed_cri_calls_total's method
// label.
const (
	MethodVersion         = "Version"
	MethodExecSync        = "ExecSync"
	MethodExec            = "Exec"
	MethodContainerStatus = "ContainerStatus"
	MethodStopContainer   = "StopContainer"
)

// Options configure Connect.
type Options struct {
	// Endpoint is the runtime's socket as the kubelet's
	// --container-runtime-endpoint takes it:
	// unix:///run/containerd/containerd.sock, unix:///var/run/crio/crio.sock.
	// Required.
	Endpoint string
	// RequestTimeout bounds each call besides its own time (see
	// DefaultRequestTimeout, the default) and the connection at start.
	RequestTimeout time.Duration
	// Registerer receives probed_cri_calls_total (nil: not registered).
	Registerer prometheus.Registerer
	// Logger receives the runtime's identity at start (default
	// slog.Default()).
	Logger *slog.Logger
}

// Client is a connection to the node's container runtime. Its methods are
// safe for concurrent use.
type Client struct {
	rs internalapi.RuntimeService
	// execConn and execs: ExecSync's own connection, whose answers are
	// refused past tenant.ExecOutputBytes (cri-client's takes 16 MiB).
	execConn *grpc.ClientConn
	execs    runtimeapi.RuntimeServiceClient
	// resolved remembers the containers Resolve confirmed (a container's
	// ID and labels never change): the runtime's full ID → whose.
	resolved *lru.Cache
	endpoint string
	timeout  time.Duration
	version  *runtimeapi.VersionResponse
	calls    *prometheus.CounterVec
	log      *slog.Logger
	// streamSPDY: the runtime's streaming server refused a WebSocket
	// upgrade once; Stream uses SPDY from then on.
	streamSPDY atomic.Bool
}

// Connect dials opts.Endpoint and asks the runtime's Version, which names
// it. Errors: no endpoint, an endpoint that is not a unix socket URL, a
// runtime that does not answer within RequestTimeout or does not speak CRI
// v1, a registration error of the metric.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	if opts.Endpoint == "" {
		return nil, errors.New("cri: no container runtime endpoint")
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Client{
		endpoint: opts.Endpoint,
		timeout:  opts.RequestTimeout,
		log:      opts.Logger,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "probed_cri_calls_total",
			Help: "Calls probed made to the container runtime (CRI), by method and gRPC status code.",
		}, []string{"method", "code"}),
	}
	ctx = quiet(ctx)
	// One plain connection first: cri-client's Build leaves its gRPC
	// connection (and its goroutines) behind when the runtime does not
	// answer, and nothing listening is the common mistake (a wrong path,
	// the socket not mounted).
	addr, dial, err := util.GetAddressAndDialer(opts.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("--container-runtime-endpoint %s: %w", opts.Endpoint, err)
	}
	dctx, cancel := context.WithTimeout(ctx, opts.RequestTimeout)
	conn, err := dial(dctx, addr)
	cancel()
	if err != nil {
		c.count(MethodVersion, status.Error(codes.Unavailable, err.Error()))
		return nil, fmt.Errorf("--container-runtime-endpoint %s: %w", opts.Endpoint, err)
	}
	_ = conn.Close()
	// No tracer provider: probed's spans are its probes', the CRI calls
	// are counted instead.
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(opts.Endpoint).
		WithConnectionTimeout(opts.RequestTimeout).WithTracerProvider(nil).Build(ctx)
	c.count(MethodVersion, err) // Build asks the runtime's Version
	if err != nil {
		return nil, fmt.Errorf("--container-runtime-endpoint %s: %w", opts.Endpoint, err)
	}
	c.rs = rs
	// ExecSync's own connection: the same socket and options as
	// cri-client's, but with a receive limit a flood cannot pass.
	c.execConn, err = grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"), grpc.WithContextDialer(dial),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(execResponseBytes)))
	if err != nil {
		_ = rs.Close(ctx)
		return nil, fmt.Errorf("--container-runtime-endpoint %s: %w", opts.Endpoint, err)
	}
	c.execs = runtimeapi.NewRuntimeServiceClient(c.execConn)
	c.resolved = lru.New(resolvedContainers)
	v, err := rs.Version(ctx, "")
	c.count(MethodVersion, err)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("--container-runtime-endpoint %s: Version: %w", opts.Endpoint, err)
	}
	c.version = v
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(c.calls); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	c.log.Info("container runtime", "endpoint", opts.Endpoint, "runtime", v.RuntimeName, "version", v.RuntimeVersion,
		"criVersion", v.RuntimeApiVersion)
	return c, nil
}

// Close ends the connections.
func (c *Client) Close() error {
	return errors.Join(c.execConn.Close(), c.rs.Close(quiet(context.Background())))
}

// RuntimeName is the runtime's name as its Version reports it
// ("containerd"): the type of the container IDs it serves.
func (c *Client) RuntimeName() string { return c.version.RuntimeName }

// RuntimeVersion is the runtime's own version ("1.6.20~ds1").
func (c *Client) RuntimeVersion() string { return c.version.RuntimeVersion }

// Endpoint is the endpoint the client is connected to.
func (c *Client) Endpoint() string { return c.endpoint }

// RequestTimeout is the bound of one call beyond its own time.
func (c *Client) RequestTimeout() time.Duration { return c.timeout }

// ContainerID maps a container ID of a pod's status ("containerd://<id>",
// the kubelet's form) to the runtime's ID ("<id>"). It refuses an ID
// without a type or an ID, and an ID of another runtime (docker://, cri-o://
// on a containerd node): probed never guesses which runtime runs a
// container.
func (c *Client) ContainerID(statusID string) (string, error) {
	id := results.ParseContainerID(statusID)
	switch {
	case statusID == "":
		return "", errors.New("the container has no ID (not running)")
	case id.Type == "" || id.ID == "":
		return "", fmt.Errorf("container ID %q is not of the form <runtime>://<id>", statusID)
	case id.Type != c.version.RuntimeName:
		return "", fmt.Errorf("container ID %q is of runtime %q, but this node's runtime is %q (--container-runtime-endpoint %s)",
			statusID, id.Type, c.version.RuntimeName, c.endpoint)
	}
	return id.ID, nil
}

// ExecSync runs cmd in container ctr and returns its stdout and stderr.
// timeout is the runtime's own limit for the command, in whole seconds
// (truncated, as cri-client does; 0: none); the call is bounded by ctx and
// by RequestTimeout + timeout (cri-client's bound, the kubelet's). A
// non-zero exit is a k8s.io/utils/exec CodeExitError; a gRPC
// DeadlineExceeded is cri-client's ErrCommandTimedOut, whatever timed out
// (the runtime's limit or the call's own bound); an answer over
// tenant.ExecOutputBytes of output is an *exec.OutputLimitError, refused
// by gRPC before it is read.
func (c *Client) ExecSync(ctx context.Context, ctr Container, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error) {
	stdout, stderr, err = c.execSync(quiet(ctx), ctr.ID, cmd, timeout)
	c.count(MethodExecSync, err)
	return stdout, stderr, err
}

// execResponseBytes is the most an ExecSync answer may be: the output's
// bound and room for the message's framing and exit code.
const execResponseBytes = tenant.ExecOutputBytes + 1<<10

// execSync is cri-client's ExecSync (remote_runtime.go) on the capped
// connection.
func (c *Client) execSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	var cancel context.CancelFunc
	if timeout != 0 {
		ctx, cancel = context.WithTimeout(ctx, c.timeout+timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	resp, err := c.execs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: int64(timeout.Seconds())})
	switch {
	case status.Code(err) == codes.DeadlineExceeded:
		return nil, nil, fmt.Errorf("%w: %q timed out after %s", remote.ErrCommandTimedOut, strings.Join(cmd, " "), timeout)
	case status.Code(err) == codes.ResourceExhausted && strings.Contains(status.Convert(err).Message(), "larger than max"):
		return nil, nil, &probeexec.OutputLimitError{Cmd: cmd, Limit: tenant.ExecOutputBytes}
	case err != nil:
		return nil, nil, err
	case resp.ExitCode != 0:
		return resp.Stdout, resp.Stderr, utilexec.CodeExitError{
			Err:  fmt.Errorf("command '%s' exited with %d: %s", strings.Join(cmd, " "), resp.ExitCode, resp.Stderr),
			Code: int(resp.ExitCode),
		}
	}
	return resp.Stdout, resp.Stderr, nil
}

// Alive reports whether the runtime answers a Version call within 5 s
// (bounded by ctx too): a runtime that does not is hung or gone.
func (c *Client) Alive(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(quiet(ctx), 5*time.Second)
	defer cancel()
	_, err := c.rs.Version(ctx, "")
	c.count(MethodVersion, err)
	return err == nil
}

// ContainerStatus returns the runtime's status of container ctr.
func (c *Client) ContainerStatus(ctx context.Context, ctr Container) (*runtimeapi.ContainerStatus, error) {
	return c.status(ctx, ctr.ID)
}

func (c *Client) status(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	resp, err := c.rs.ContainerStatus(quiet(ctx), id, false)
	c.count(MethodContainerStatus, err)
	if err != nil {
		return nil, err
	}
	return resp.GetStatus(), nil
}

// StopContainer stops container ctr: its stop signal, then SIGKILL after
// gracePeriod seconds (the runtime's StopContainer timeout). The call is
// bounded by ctx and by RequestTimeout + gracePeriod.
func (c *Client) StopContainer(ctx context.Context, ctr Container, gracePeriod int64) error {
	err := c.rs.StopContainer(quiet(ctx), ctr.ID, gracePeriod)
	c.count(MethodStopContainer, err)
	return err
}

// count adds one call of method with err's gRPC code: OK for nil and for a
// command's non-zero exit (the call succeeded), DeadlineExceeded for
// cri-client's ErrCommandTimedOut, else the code of the gRPC status err
// wraps (Unknown for an error without one).
func (c *Client) count(method string, err error) {
	code := codes.OK
	var exit utilexec.ExitError
	switch {
	case err == nil, errors.As(err, &exit):
	case errors.Is(err, remote.ErrCommandTimedOut):
		code = codes.DeadlineExceeded
	default:
		code = status.Code(err)
	}
	c.calls.WithLabelValues(method, code.String()).Inc()
}

// quiet hands cri-client a logger that drops its lines: it logs every
// failed call at error level through klog, probed reports them itself
// (events, its own log, the metric).
func quiet(ctx context.Context) context.Context { return klog.NewContext(ctx, logr.Discard()) }
