package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Stream runs cmd in container id (a CRI ID) as a streaming exec, the
// session `kubectl exec -i` opens through the kubelet: CRI Exec (counted
// as MethodExec) returns a URL of the runtime's streaming server, which
// runs the process as ExecSync would (the container's user, capabilities,
// seccomp and AppArmor profiles, cgroup and namespaces, environment and
// working directory) with its stdin, stdout and stderr carried over SPDY
// (client-go's remotecommand, the kubelet's protocol: pkg/kubelet/cri/
// streaming). Stream returns when the process ends: nil for exit 0, a
// k8s.io/utils/exec CodeExitError for another exit status, else the
// runtime's or the connection's error (the process could not start, the
// container is gone). Cancelling ctx closes the connection; the runtime
// then closes the process's stdin (containerd 1.6: seen), which is how a
// resident helper learns that probed went away. stdin reaching EOF closes
// the process's stdin the same way.
//
// The URL must be plain http (containerd's default, stream_server_address
// on the node's loopback, enable_tls_streaming off): probed has no trust
// anchor for a runtime's self-signed streaming certificate.
func (c *Client) Stream(ctx context.Context, id string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error {
	ctx = quiet(ctx)
	resp, err := c.rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: cmd, Stdin: true, Stdout: true, Stderr: true})
	c.count(MethodExec, err)
	if err != nil {
		return fmt.Errorf("exec in container %s: %w", id, err)
	}
	u, err := url.Parse(resp.GetUrl())
	if err != nil {
		return fmt.Errorf("exec in container %s: the runtime's streaming URL: %w", id, err)
	}
	if u.Scheme != "http" {
		return fmt.Errorf("exec in container %s: %w (%s://)", id, ErrStreamScheme, u.Scheme)
	}
	ex, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u)
	if err != nil {
		return fmt.Errorf("exec in container %s: %w", id, err)
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// ErrStreamScheme: the runtime's streaming server is not plain http on
// the node (containerd with enable_tls_streaming, a runtime that redirects
// elsewhere).
var ErrStreamScheme = errors.New("the container runtime's streaming server is not plain http (probed needs containerd's default: stream_server_address on the node's loopback, enable_tls_streaming = false)")
