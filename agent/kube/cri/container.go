package cri

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	probeexec "github.com/probed/probed/plugins/exec"
)

// Labels the kubelet gives every container it creates
// (pkg/kubelet/types/labels.go): Resolve checks them against the pod and
// container a status names.
const (
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
)

// resolvedContainers bounds the containers Resolve remembers (least
// recently used out): a node's containers, with room.
const resolvedContainers = 4096

// ErrNotThePods says that a container ID a pod's status names is not that
// pod's container: not a full ID, or the runtime's labels of the container
// name another pod or container. probed refuses to act on it.
var ErrNotThePods = errors.New("not the pod's container")

// Container is a container the runtime confirmed as a pod's (Resolve): its
// full ID, whose labels name the pod's UID and the container's name.
// ExecSync, Stream, ContainerStatus and StopContainer take a Container,
// not an ID, so that every call site shows where its container was
// resolved: the agent's code gets one only from Resolve (a stand-in
// runtime of a test makes its own).
type Container struct {
	// ID is the runtime's full ID of the container.
	ID string
	// StatusID is its ID as the pod's status has it ("containerd://<id>").
	StatusID string
}

// owner is whose a resolved container is, as its labels say.
type owner struct {
	podUID    types.UID
	container string
}

// Resolve maps the container ID of a pod's status ("containerd://<id>",
// ContainerID's rules) to the runtime's container, and confirms that it is
// want's: the runtime's ContainerStatus must know it under that very ID
// (the runtime resolves a unique prefix of an ID to the container it
// begins: a 12-character prefix is refused) and its labels must name
// want's pod UID (io.kubernetes.pod.uid) and container name
// (io.kubernetes.container.name), as the kubelet labels every container it
// creates. A confirmed container is remembered (its ID and labels never
// change), so the check costs one ContainerStatus per container.
//
// Errors: ContainerID's; ErrNotThePods, wrapped with what did not match
// (never the labels of another pod's container); the runtime's error of
// ContainerStatus (NotFound: the container is gone).
func (c *Client) Resolve(ctx context.Context, statusID string, want probeexec.PodContainer) (Container, error) {
	id, err := c.ContainerID(statusID)
	if err != nil {
		return Container{}, err
	}
	if o, ok := c.resolved.Get(id); ok {
		return c.confirm(id, statusID, o.(owner), want)
	}
	st, err := c.status(ctx, id)
	switch {
	case status.Code(err) == codes.NotFound:
		return Container{}, fmt.Errorf("container %s: %w", statusID, err)
	case err != nil:
		return Container{}, fmt.Errorf("container %s: ContainerStatus: %w", statusID, err)
	case st.GetId() != id:
		// The runtime found a container whose ID begins with id.
		return Container{}, fmt.Errorf("container ID %s is not a container's full ID (the runtime completes prefixes; probed acts only on full IDs): %w",
			statusID, ErrNotThePods)
	}
	o := owner{podUID: types.UID(st.GetLabels()[LabelPodUID]), container: st.GetLabels()[LabelContainerName]}
	if o.podUID != "" && o.container != "" {
		c.resolved.Add(id, o)
	}
	return c.confirm(id, statusID, o, want)
}

// confirm checks the labels of container id against want.
func (c *Client) confirm(id, statusID string, o owner, want probeexec.PodContainer) (Container, error) {
	if want.PodUID == "" || want.Container == "" {
		return Container{}, fmt.Errorf("container %s: no pod named to check it against: %w", statusID, ErrNotThePods)
	}
	if o.podUID != want.PodUID || o.container != want.Container {
		return Container{}, fmt.Errorf("container %s is not container %s of pod %s/%s (pod UID %s): the runtime's labels of it say otherwise: %w",
			statusID, want.Container, want.Namespace, want.Pod, want.PodUID, ErrNotThePods)
	}
	return Container{ID: id, StatusID: statusID}, nil
}
