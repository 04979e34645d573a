// Package release takes probed off a cluster without stranding a pod: it
// finds the workloads whose pod template still lists probed's readiness gate
// (their new pods could never turn Ready once probed is gone, so they must
// change first) and, once none does, hands each pod still gated back to the
// kubelet by writing probed's condition one last time.
//
// Why a last write: a readiness gate is in a pod's spec, which cannot change
// on a running pod, and the kubelet reports a pod Ready only when every
// gate's condition is True (KEP-580). With the agent gone nobody maintains
// the condition: a True one stays True whatever the pod's health, a False one
// stays False for good. So for each gated pod left when probed goes,
// release writes the condition with reason ProbedReleased:
//
//   - True when the kubelet still checks the readiness of every container
//     probed checked: each container with a readiness or startup probe of
//     probed's (the annotation's, or an offloaded one) also has a spec
//     readinessProbe (or probed checked none). The pod's
//     Ready is then the kubelet's alone, as if it had no gate.
//   - False otherwise: probed's probe was that container's only readiness
//     check, and True would call Ready a container nobody checks. The pod
//     stays out of its Services until it is replaced (its controller, whose
//     template no longer lists the gate, makes a pod without it): release
//     names those pods.
//
// Terminating pods are left alone. Nothing is written while any workload's
// template lists the gate: the operator changes those first (the gate out,
// the annotation's probes into the spec), while probed still runs and keeps
// the old pods' conditions current through the rollout. Nor while pods are
// offloaded (the offload webhook moved their own probes into probed's
// care, ListOffloaded): the operator takes the namespace's opt-in label off
// and rolls those workloads, whose templates still have the probes, so
// that the kubelet runs them again.
//
// release runs as the operator (a kubeconfig that may list workloads and
// pods in every namespace and patch pods/status), not as the agent: the
// agent's admission policy lets its token write only pods of its own node.
package release

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/agent/kube/offload"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime"
)

// Reason is the reason of the condition release writes.
const Reason = "ProbedReleased"

// FieldManager names release's writes in a pod's managedFields.
const FieldManager = "probed-release"

// Workload is a controller whose pod template lists the gate.
type Workload struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (w Workload) String() string { return w.Kind + " " + w.Namespace + "/" + w.Name }

// Pod is one pod still gated, and what release does (or would do) with it.
type Pod struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// Owner is the pod's controller ("ReplicaSet shop/web-5d4f"), "" for none.
	Owner string `json:"owner,omitempty"`
	// Ready is the condition release writes: True hands readiness to the
	// kubelet; False keeps the pod out of Services until it is replaced.
	Ready bool `json:"ready"`
	// Unchecked lists the containers whose readiness only probed checked
	// (why Ready is false).
	Unchecked []string `json:"unchecked,omitempty"`
	// Written says the condition was written (Options.Write).
	Written bool `json:"written"`
}

// Report is what Run found and did.
type Report struct {
	Gate string `json:"gate"`
	// Templates are the workloads whose pod template lists the gate: while
	// there are any, nothing is written.
	Templates []Workload `json:"templates"`
	// Pods are the pods whose spec lists the gate, terminating ones left out.
	Pods []Pod `json:"pods"`
	// Offload is what the offload webhook left: the namespaces that still
	// opt in and the workloads with offloaded pods (while there are any,
	// nothing is written).
	Offload *OffloadReport `json:"offload"`
}

// Replace returns the pods that stay not ready until replaced.
func (r *Report) Replace() []Pod {
	var out []Pod
	for _, p := range r.Pods {
		if !p.Ready {
			out = append(out, p)
		}
	}
	return out
}

// Options says what Run does.
type Options struct {
	// Gate is the condition type probed owned (--readiness-gate).
	Gate string
	// Namespace limits Run to one namespace ("": all, what an uninstall
	// needs).
	Namespace string
	// Write hands the pods back (writes their condition); without it Run
	// only reports.
	Write bool
	// OffloadNamespaces selects the namespaces that opt in to the offload
	// webhook (its --offload-namespaces); "":
	// offload.DefaultNamespaceSelector.
	OffloadNamespaces string
	// Now stamps lastTransitionTime; nil: time.Now.
	Now func() time.Time
}

// ErrTemplatesGated is returned (with the report) when a workload's template
// lists the gate: uninstalling now would strand that workload's new pods.
type ErrTemplatesGated struct{ Workloads []Workload }

func (e *ErrTemplatesGated) Error() string {
	names := make([]string, len(e.Workloads))
	for i, w := range e.Workloads {
		names[i] = w.String()
	}
	return fmt.Sprintf("%d workloads still list the readiness gate in their pod template (%s): take it out first", len(names), strings.Join(names, ", "))
}

// Run lists every workload and gated pod of the cluster and, with
// opts.Write and no workload template gated, writes each gated pod's last
// condition. Errors of the API server end it; a pod that is gone or
// replaced (UID precondition) is skipped.
func Run(ctx context.Context, c kubernetes.Interface, opts Options) (*Report, error) {
	if opts.Gate == "" {
		return nil, fmt.Errorf("release: no readiness gate")
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	r := &Report{Gate: opts.Gate}
	var err error
	if r.Templates, err = gatedTemplates(ctx, c, opts.Namespace, opts.Gate); err != nil {
		return nil, err
	}
	pods, err := c.CoreV1().Pods(opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("release: list pods: %w", err)
	}
	sel, err := labels.Parse(cmp.Or(opts.OffloadNamespaces, offload.DefaultNamespaceSelector))
	if err != nil {
		return nil, fmt.Errorf("release: offload namespace selector: %w", err)
	}
	if r.Offload, err = listOffloaded(ctx, c, opts.Namespace, sel, pods.Items); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp != nil || !gated(&pod.Spec, opts.Gate) {
			continue
		}
		p := Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Owner: owner(pod)}
		p.Unchecked = uncheckedContainers(pod)
		p.Ready = len(p.Unchecked) == 0
		r.Pods = append(r.Pods, p)
	}
	sort.Slice(r.Pods, func(i, j int) bool {
		return r.Pods[i].Namespace+"/"+r.Pods[i].Name < r.Pods[j].Namespace+"/"+r.Pods[j].Name
	})
	var stop []error
	if len(r.Templates) > 0 {
		stop = append(stop, &ErrTemplatesGated{Workloads: r.Templates})
	}
	if len(r.Offload.Workloads) > 0 {
		stop = append(stop, &ErrOffloaded{Workloads: r.Offload.Workloads})
	}
	if len(stop) > 0 {
		return r, errors.Join(stop...)
	}
	if !opts.Write {
		return r, nil
	}
	for i := range r.Pods {
		p := &r.Pods[i]
		pod, ok := findPod(pods.Items, p.UID)
		if !ok {
			continue
		}
		written, err := write(ctx, c, pod, opts.Gate, p, now())
		if err != nil {
			return r, err
		}
		p.Written = written
	}
	return r, nil
}

func findPod(pods []v1.Pod, uid types.UID) (*v1.Pod, bool) {
	for i := range pods {
		if pods[i].UID == uid {
			return &pods[i], true
		}
	}
	return nil, false
}

// gated says whether a pod spec lists the gate.
func gated(spec *v1.PodSpec, gate string) bool {
	return slices.ContainsFunc(spec.ReadinessGates, func(g v1.PodReadinessGate) bool { return string(g.ConditionType) == gate })
}

// owner names a pod's controller.
func owner(pod *v1.Pod) string {
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return ref.Kind + " " + pod.Namespace + "/" + ref.Name
	}
	return ""
}

// uncheckedContainers lists, in spec order, the containers that have a
// readiness or startup probe of probed's (the annotation's or one the
// offload webhook moved: what decided probed's condition) and no spec
// readinessProbe (nothing of the kubelet's checks their readiness).
// Probes the agent would refuse decided nothing and count for nothing, as
// in the agent (the pod's view under cluster mode's policy, without the
// node's limits).
func uncheckedContainers(pod *v1.Pod) []string {
	view := podprobes.Of(pod, podprobes.Cluster(customprobe.Options{}, ""))
	decided := map[string]bool{}
	for _, p := range view.Probes {
		if p.Type == runtime.Readiness || p.Type == runtime.Startup {
			decided[p.Container.Name] = true
		}
	}
	var out []string
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if decided[c.Name] && c.ReadinessProbe == nil {
				out = append(out, c.Name)
			}
		}
	}
	return out
}

// write patches the pod's gate condition (strategic merge of the status
// subresource, UID precondition: a pod recreated under the name is not
// touched) unless it already says the same; it reports whether it wrote.
func write(ctx context.Context, c kubernetes.Interface, pod *v1.Pod, gate string, p *Pod, now time.Time) (bool, error) {
	status, message := v1.ConditionTrue, "probed was removed: the kubelet's readiness checks decide (probed release)"
	if !p.Ready {
		status = v1.ConditionFalse
		message = fmt.Sprintf("probed was removed, and its probes were the only readiness check of container %s: replace this pod (probed release)", strings.Join(p.Unchecked, ", "))
	}
	transition := metav1.NewTime(now)
	for _, cond := range pod.Status.Conditions {
		if string(cond.Type) != gate {
			continue
		}
		if cond.Status == status && cond.Reason == Reason && cond.Message == message {
			return false, nil
		}
		if cond.Status == status {
			transition = cond.LastTransitionTime
		}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status": map[string]any{"conditions": []v1.PodCondition{{
			Type: v1.PodConditionType(gate), Status: status, Reason: Reason, Message: message, LastTransitionTime: transition,
		}}},
	})
	if err != nil {
		return false, err
	}
	_, err = c.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		if gone(err) {
			return false, nil
		}
		return false, fmt.Errorf("release: write the condition %s of pod %s/%s: %w", gate, pod.Namespace, pod.Name, err)
	}
	return true, nil
}

// gatedTemplates lists the workloads whose pod template lists the gate:
// Deployments, StatefulSets, DaemonSets, ReplicationControllers, CronJobs,
// and ReplicaSets and Jobs that no other controller owns (a Deployment's
// ReplicaSets follow its template; a CronJob's Jobs follow its).
// ReplicaSets scaled to zero are left out: they make no pod.
func gatedTemplates(ctx context.Context, c kubernetes.Interface, ns, gate string) ([]Workload, error) {
	var out []Workload
	add := func(kind string, meta metav1.ObjectMeta, spec *v1.PodSpec) {
		if gated(spec, gate) {
			out = append(out, Workload{Kind: kind, Namespace: meta.Namespace, Name: meta.Name})
		}
	}
	list := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("release: list %s: %w", what, err)
		}
		return nil
	}
	apps := c.AppsV1()
	deployments, err := apps.Deployments(ns).List(ctx, metav1.ListOptions{})
	if err := list("deployments", err); err != nil {
		return nil, err
	}
	for _, d := range deployments.Items {
		add("Deployment", d.ObjectMeta, &d.Spec.Template.Spec)
	}
	statefulSets, err := apps.StatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err := list("statefulsets", err); err != nil {
		return nil, err
	}
	for _, s := range statefulSets.Items {
		add("StatefulSet", s.ObjectMeta, &s.Spec.Template.Spec)
	}
	daemonSets, err := apps.DaemonSets(ns).List(ctx, metav1.ListOptions{})
	if err := list("daemonsets", err); err != nil {
		return nil, err
	}
	for _, d := range daemonSets.Items {
		add("DaemonSet", d.ObjectMeta, &d.Spec.Template.Spec)
	}
	replicaSets, err := apps.ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err := list("replicasets", err); err != nil {
		return nil, err
	}
	for _, rs := range replicaSets.Items {
		if metav1.GetControllerOf(&rs) == nil && !zero(rs.Spec.Replicas) {
			add("ReplicaSet", rs.ObjectMeta, &rs.Spec.Template.Spec)
		}
	}
	controllers, err := c.CoreV1().ReplicationControllers(ns).List(ctx, metav1.ListOptions{})
	if err := list("replicationcontrollers", err); err != nil {
		return nil, err
	}
	for _, rc := range controllers.Items {
		if rc.Spec.Template != nil && !zero(rc.Spec.Replicas) {
			add("ReplicationController", rc.ObjectMeta, &rc.Spec.Template.Spec)
		}
	}
	jobs, err := c.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err := list("jobs", err); err != nil {
		return nil, err
	}
	for _, j := range jobs.Items {
		if metav1.GetControllerOf(&j) == nil && !finished(&j) {
			add("Job", j.ObjectMeta, &j.Spec.Template.Spec)
		}
	}
	cronJobs, err := c.BatchV1().CronJobs(ns).List(ctx, metav1.ListOptions{})
	if err := list("cronjobs", err); err != nil {
		return nil, err
	}
	for _, cj := range cronJobs.Items {
		add("CronJob", cj.ObjectMeta, &cj.Spec.JobTemplate.Spec.Template.Spec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

func zero(replicas *int32) bool { return replicas != nil && *replicas == 0 }

// finished says whether a Job is complete or failed: it makes no more pods.
func finished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == v1.ConditionTrue {
			return true
		}
	}
	return false
}

// gone says a write was refused because the pod is gone or was recreated
// under its name: the UID precondition fails as 409 Conflict, or as 422
// "metadata.uid: field is immutable" on a status patch.
func gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err) ||
		(apierrors.IsInvalid(err) && strings.Contains(err.Error(), "metadata.uid"))
}
