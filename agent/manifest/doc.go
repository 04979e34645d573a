// Package manifest reads the pods the probed agent runs from Kubernetes
// manifest files: Pod documents and the pod templates of workloads
// (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob,
// ReplicationController), in YAML (several documents per file, KYAML
// included) or JSON, bare or inside a List.
//
// It stands in for the API server the agent does not have: decoding is as
// strict as `kubectl apply --validate=strict` (case-sensitive keys, unknown
// and duplicate fields are errors), every pod gets the API server's defaults
// for what the prober reads (SetDefaults, spec 1.2) and its validation
// (ValidatePod, spec 1.3), and what the API server accepts but the kubelet
// cannot run, such as a probe port name the container does not declare
// (BR-20), is reported as a warning on the entry.
//
// Errors are *Error values that name the file, the document, the object, the
// container and the field path. A bad document never keeps the other
// documents of a file from loading. Inputs are bounded: files larger than
// Options.MaxFileBytes (8 MiB by default) are refused, and YAML alias bombs
// are refused before they are expanded.
//
// Custom probes declared in the probed.io/probes annotation are validated
// with package customprobe.
package manifest
