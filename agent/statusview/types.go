package statusview

import (
	"time"

	"github.com/probed/probed/agent/guards"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/output"
	"github.com/probed/probed/agent/source"
)

// The kind and apiVersion of the Status document.
const (
	StatusKind = "ProbedStatus"
	APIVersion = output.APIVersion
)

// Status is the document `probed status -o json|yaml` prints: the pods of
// one agent (after the -n filter) and, when the agent serves GET
// /manifests, its rejected and skipped manifest documents. Fields are never
// renamed or removed within an apiVersion; new ones may be added.
type Status struct {
	Kind       string `json:"kind"`       // StatusKind
	APIVersion string `json:"apiVersion"` // APIVersion
	// Server is the agent's API base URL the status was read from.
	Server string `json:"server"`
	// Namespace is the -n filter; "" (absent) for all namespaces.
	Namespace string `json:"namespace,omitempty"`
	// Pods in the agent's order; [] when there are none.
	Pods []Pod `json:"pods"`
	// Manifests is the agent's GET /manifests as it serves it
	// (source.Report: docs/operations.md, "GET /manifests"), its rejected
	// documents after the -n filter (those whose pod is in the namespace
	// or unknown); absent when the agent does not serve it.
	Manifests *source.Report `json:"manifests,omitempty"`
	// Guards is the agent's GET /guards (cluster mode: the pods the
	// readiness panic threshold keeps ready, the failures the restart
	// budget holds back), after the -n filter; absent when the agent does
	// not serve it.
	Guards *guards.Report `json:"guards,omitempty"`
}

// Pod is one pod's row.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	PodIP     string `json:"podIP,omitempty"`
	// Phase is status.phase (Pending, Running, Succeeded, Failed).
	Phase string `json:"phase"`
	// Status is kubectl's STATUS column (StatusOf): the phase, a
	// container's waiting or terminated reason (CrashLoopBackOff, Error,
	// ExitCode:N), Terminating; a running pod that is not ready is
	// Running, as kubectl shows it (READY says so).
	Status string `json:"status"`
	// Ready is the pod's Ready condition.
	Ready bool `json:"ready"`
	// Containers counts the containers and sidecars (restartable init
	// containers); ReadyContainers and StartedContainers those ready and
	// started, as the READY and STARTED columns show them.
	Containers        int   `json:"containers"`
	ReadyContainers   int   `json:"readyContainers"`
	StartedContainers int   `json:"startedContainers"`
	Restarts          int32 `json:"restarts"`
	// StartTime is status.startTime, UTC; absent when not started.
	StartTime *time.Time `json:"startTime,omitempty"`
	// Probes are the pod's probes, sorted by container and type; [] when
	// none has run.
	Probes []Probe `json:"probes"`
	// Refused are the probes the pod declares that probed does not run,
	// one per reason (GET /pods/{namespace}/{name}/probes' refused); absent
	// when none.
	Refused []history.Refused `json:"refused,omitempty"`
	// LastFailure is the newest failed or errored run over the pod's probes.
	LastFailure *Failure `json:"lastFailure,omitempty"`
}

// Probe is one probe of a container.
type Probe struct {
	Container string `json:"container"`
	Type      string `json:"type"`    // liveness, readiness or startup
	Handler   string `json:"handler"` // http, tcp, exec, grpc or a plugin kind
	// Origin is where the probe is declared: spec (the container's own)
	// or annotation (probed.io/probes); absent from an agent that does not
	// say.
	Origin string `json:"origin,omitempty"`
	// ExecMode is how an exec probe runs (history.Probe.ExecMode):
	// resident, execsync, ...; absent for other kinds.
	ExecMode string `json:"execMode,omitempty"`
	// LastResult is the newest run's result: success, warning, failure,
	// unknown or errored; absent before the first run.
	LastResult string     `json:"lastResult,omitempty"`
	LastRun    *time.Time `json:"lastRun,omitempty"`
	// LastFailure is the probe's newest failed or errored run.
	LastFailure *Failure `json:"lastFailure,omitempty"`
}

// Failure is a failed or errored probe run.
type Failure struct {
	Container string    `json:"container"`
	Type      string    `json:"type"`
	Result    string    `json:"result"` // failure, unknown or errored
	Message   string    `json:"message,omitempty"`
	Time      time.Time `json:"time"`
}
