package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"

	"k8s.io/apimachinery/pkg/util/httpstream"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Stream runs cmd in container ctr as a streaming exec, the
// session `kubectl exec -i` opens through the kubelet: CRI Exec (counted
// as MethodExec) returns a URL of the runtime's streaming server, which
// runs the process as ExecSync would (the container's user, capabilities,
// seccomp and AppArmor profiles, cgroup and namespaces, environment and
// working directory) with its stdin, stdout and stderr carried over a
// WebSocket (client-go's remotecommand, the channel.k8s.io protocols v5
// and v4 the kubelet's streaming server speaks), or over SPDY where the
// runtime refuses the WebSocket upgrade (then a second Exec: a URL serves
// one request). WebSocket first because SPDY's header compression holds
// about 1 MB per session for its life (bench/cri measured 860–950 kB of
// heap per session, 80 % of it zlib), and a resident helper's session
// lasts as long as its container.
//
// Stream returns when the process ends: nil for exit 0, a
// k8s.io/utils/exec CodeExitError for another exit status, else the
// runtime's or the connection's error (the process could not start, the
// container is gone). Cancelling ctx closes the connection; the runtime
// then closes the process's stdin (containerd 1.6, both protocols: seen),
// which is how a resident helper learns that probed went away. stdin
// reaching EOF closes the process's stdin only where the protocol can say
// so (v5, SPDY); on v4 it does nothing.
//
// The URL must be plain http (containerd's default, stream_server_address
// on the node's loopback, enable_tls_streaming off): probed has no trust
// anchor for a runtime's self-signed streaming certificate.
func (c *Client) Stream(ctx context.Context, ctr Container, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error {
	id := ctr.ID
	ctx = quiet(ctx)
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr}
	spdy := c.streamSPDY.Load()
	u, err := c.execURL(ctx, id, cmd)
	if err != nil {
		return err
	}
	if !spdy {
		ex, err := remotecommand.NewWebSocketExecutorForProtocols(&rest.Config{}, "GET", u.String(),
			remotecommandconsts.StreamProtocolV5Name, remotecommandconsts.StreamProtocolV4Name)
		if err != nil {
			return fmt.Errorf("exec in container %s: %w", id, err)
		}
		err = ex.StreamWithContext(ctx, opts)
		if !httpstream.IsUpgradeFailure(err) {
			return err
		}
		c.streamSPDY.Store(true)
		c.log.Info("container runtime: the streaming server refused a WebSocket, using SPDY", "err", err)
		if u, err = c.execURL(ctx, id, cmd); err != nil {
			return err
		}
	}
	ex, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u)
	if err != nil {
		return fmt.Errorf("exec in container %s: %w", id, err)
	}
	return ex.StreamWithContext(ctx, opts)
}

// execURL asks the runtime for a streaming exec of cmd in container id.
func (c *Client) execURL(ctx context.Context, id string, cmd []string) (*url.URL, error) {
	resp, err := c.rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: cmd, Stdin: true, Stdout: true, Stderr: true})
	c.count(MethodExec, err)
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	u, err := url.Parse(resp.GetUrl())
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: the runtime's streaming URL: %w", id, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("exec in container %s: %w (%s://)", id, ErrStreamScheme, u.Scheme)
	}
	return u, nil
}

// ErrStreamScheme: the runtime's streaming server is not plain http on
// the node (containerd with enable_tls_streaming, a runtime that redirects
// elsewhere).
var ErrStreamScheme = errors.New("the container runtime's streaming server is not plain http (probed needs containerd's default: stream_server_address on the node's loopback, enable_tls_streaming = false)")
