// Package actuate is the seam between a liveness or startup probe's failure
// and what is done about it (spec K1, K2). In manifest mode the agent plays
// the container runtime: the store's simulator kills and restarts the
// container and runs --on-restart (package actuate/restart is not needed:
// store.Restart carries it). In cluster mode the kubelet owns containers:
// the actuator records an Event and, with --liveness-action=evict, evicts
// the pod (package kube/evict).
package actuate

import (
	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime"
)

// Failure is a liveness or startup probe's Failure result of a running
// container: the kubelet would kill it (K2).
type Failure struct {
	// Pod is the pod as the agent knows it (read-only).
	Pod *v1.Pod
	// Container is the container's name; ContainerID the failed
	// instance ("containerd://…").
	Container   string
	ContainerID string
	// Probe is runtime.Liveness or runtime.Startup.
	Probe runtime.ProbeType
}

// Actuator acts on failures. ContainerFailed is called once per failed
// container instance and result change, from the agent's results
// goroutine: it must not block (queue slow work).
type Actuator interface {
	ContainerFailed(f Failure)
}
