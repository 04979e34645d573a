// Package pods is the seam between where the agent's pods come from and what
// probes them. A Source — the manifest directory (package source) or the API
// server (package kube/podsource) — delivers Updates; the reconciler (package
// reconciler) applies them to the prober manager and tells the mode's status
// owner. The agent never cares which source a pod came from, as the kubelet's
// sources (pkg/kubelet/config: file, http, apiserver) feed one merge point
// with a PodUpdate{Op, Source}.
package pods

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/manager/podprobes"
)

// Op says how an Update's pods relate to the pods the source sent before,
// like the kubelet's config.PodOperation.
type Op int

const (
	// Set: Pods is the complete set of the source's pods; a pod sent
	// before and missing now is gone (the kubelet's SET). The manifest
	// directory sends one Set per scan.
	Set Op = iota
	// Upsert: the pods were added or changed (the kubelet's ADD and
	// UPDATE). An informer sends one per add or update event.
	Upsert
	// Remove: the pods are gone (the kubelet's DELETE/REMOVE).
	Remove
)

func (o Op) String() string {
	switch o {
	case Set:
		return "SET"
	case Upsert:
		return "UPSERT"
	case Remove:
		return "REMOVE"
	}
	return "UNKNOWN"
}

// Pod is one pod as a source delivers it.
type Pod struct {
	// Pod has its UID set and API defaults applied. The reconciler and
	// everything downstream treat it as read-only.
	Pod *v1.Pod
	// Origin says where the pod came from, for logs and the API: a file
	// and document ("web.yaml#2") or "apiserver".
	Origin string
	// SpecHash identifies what the pod's probes are made of: a change
	// under the same UID stops the pod's workers and starts new ones,
	// since a worker keeps the spec it was created with (M2). The
	// manifest directory hashes metadata and spec (a changed static-pod
	// manifest is a new pod); the API server hashes the spec and the
	// probed.io/probes annotation.
	SpecHash string
	// StatusHash identifies the pod's status as the source gave it; a
	// change is handed to the status owner (Listener.PodStatusChanged).
	StatusHash string
	// Probes are the pod's probes, the mode's policy applied
	// (manager/podprobes): worked out once per pod and SpecHash, by the
	// source when it reads them anyway (the manifest directory validates
	// them), else by the reconciler; the reconciler carries them across
	// status changes and hands every listener the pod with them. Every
	// consumer reads them here (or through the reconciler), never from
	// the pod's annotation.
	Probes *podprobes.View
}

// Update is one batch of pods from a source.
type Update struct {
	Op   Op
	Pods []*Pod
}

// Source delivers pods. Implementations: source.Source (manifest
// directory), podsource.Source (API server).
type Source interface {
	// Run calls apply with every change until ctx is done, then returns
	// nil; an error means the source could not start. apply is called
	// from one goroutine at a time. The first call that completes the
	// initial list makes HasSynced true.
	Run(ctx context.Context, apply func(Update)) error
	// HasSynced reports whether the source has delivered its initial
	// complete list of pods.
	HasSynced() bool
}

// Listener is told, after the prober manager, of the pods the reconciler
// applies: in manifest mode the status store (which then generates the
// kubelet's status), in cluster mode the status cache fed by the
// informer. Calls come from the reconciler's goroutine, one at a time.
type Listener interface {
	// PodAdded: a new pod, or a pod whose SpecHash changed (its workers
	// were replaced).
	PodAdded(p *Pod)
	// PodStatusChanged: the same pod with a new StatusHash.
	PodStatusChanged(p *Pod)
	// PodRemoved: the pod is gone; its workers were stopped.
	PodRemoved(p *Pod)
}
