package release

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/agent/kube/offload"
	"github.com/probed/probed/manager/customprobe"
)

// Offloaded is a workload (or a pod of no controller) whose pods the
// offload webhook moved probes of: with probed gone, nobody runs them.
// Rolling it, once its namespace no longer opts in (or the webhook is
// gone), makes pods from its template, which still has the probes: the
// kubelet runs them again and no gate is added.
type Offloaded struct {
	// Kind is Deployment, StatefulSet, DaemonSet, CronJob, ReplicaSet,
	// ReplicationController or Job (the top of the pods' controllers), or
	// Pod for a pod of no controller.
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pods are its offloaded pods' names.
	Pods []string `json:"pods"`
	// Probes are the moved probes ("container/type"), over its pods.
	Probes []string `json:"probes"`
	// Gate is the readiness gate the webhook added to its pods ("" when
	// it added none: only liveness probes moved, or the template has the
	// gate itself).
	Gate string `json:"gate,omitempty"`
	// StillSelected: its namespace still opts in, so a pod made now is
	// offloaded again: take the label off first.
	StillSelected bool `json:"stillSelected"`
	// Roll says what gives the probes back to the kubelet.
	Roll string `json:"roll"`
}

func (o Offloaded) String() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// Restores says what rolling the workload gives back.
func (o Offloaded) Restores() string {
	s := "the kubelet's " + strings.Join(o.Probes, ", ")
	if o.Gate != "" {
		s += ", and no readiness gate " + o.Gate
	}
	return s
}

// OffloadReport is what ListOffloaded found.
type OffloadReport struct {
	// Selector selects the namespaces that opt in (the webhook's
	// --offload-namespaces).
	Selector string `json:"selector"`
	// Namespaces are those it selects now: their new pods are offloaded
	// while the webhook runs.
	Namespaces []string `json:"namespaces"`
	// Workloads have offloaded pods.
	Workloads []Offloaded `json:"workloads"`
}

// ErrOffloaded is returned (with the report) when pods are offloaded:
// uninstalling probed now would leave their probes to nobody.
type ErrOffloaded struct{ Workloads []Offloaded }

func (e *ErrOffloaded) Error() string {
	names := make([]string, len(e.Workloads))
	for i, w := range e.Workloads {
		names[i] = w.String()
	}
	return fmt.Sprintf("%d workloads have pods whose probes the offload webhook moved into probed's care (%s): take the namespace's label off, then roll them", len(names), strings.Join(names, ", "))
}

// ListOffloaded lists the namespaces selector selects (labels.Parse
// syntax; "": offload.DefaultNamespaceSelector) and the workloads with pods
// that carry the offload record, in namespace ("": all), terminating pods
// left out. It reads namespaces, pods, ReplicaSets and Jobs.
func ListOffloaded(ctx context.Context, c kubernetes.Interface, namespace, selector string) (*OffloadReport, error) {
	if selector == "" {
		selector = offload.DefaultNamespaceSelector
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("release: namespace selector %q: %w", selector, err)
	}
	pods, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("release: list pods: %w", err)
	}
	return listOffloaded(ctx, c, namespace, sel, pods.Items)
}

func listOffloaded(ctx context.Context, c kubernetes.Interface, namespace string, sel labels.Selector, pods []v1.Pod) (*OffloadReport, error) {
	r := &OffloadReport{Selector: sel.String()}
	nsList, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("release: list namespaces: %w", err)
	}
	selected := map[string]bool{}
	for _, ns := range nsList.Items {
		if namespace == "" || ns.Name == namespace {
			selected[ns.Name] = true
			r.Namespaces = append(r.Namespaces, ns.Name)
		}
	}
	sort.Strings(r.Namespaces)

	var owners *controllers
	byKey := map[string]*Offloaded{}
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || !offload.Offloaded(pod) {
			continue
		}
		if owners == nil {
			if owners, err = listControllers(ctx, c, namespace); err != nil {
				return nil, err
			}
		}
		kind, name := owners.top(pod)
		key := kind + " " + pod.Namespace + "/" + name
		w := byKey[key]
		if w == nil {
			w = &Offloaded{Kind: kind, Namespace: pod.Namespace, Name: name, StillSelected: selected[pod.Namespace]}
			byKey[key] = w
		}
		w.Pods = append(w.Pods, pod.Name)
		elements, _ := customprobe.ReadOffloaded(pod, customprobe.Options{})
		for _, el := range elements {
			if len(el.Errs) == 0 {
				if p := el.Probe.Container + "/" + el.Probe.Type.Lower(); !slices.Contains(w.Probes, p) {
					w.Probes = append(w.Probes, p)
				}
			}
		}
		if n, ok := offload.ReadNote(pod); ok && n.ReadinessGate != "" {
			w.Gate = n.ReadinessGate
		}
	}
	for _, w := range byKey {
		sort.Strings(w.Pods)
		w.Roll = roll(w)
		r.Workloads = append(r.Workloads, *w)
	}
	sort.Slice(r.Workloads, func(i, j int) bool { return r.Workloads[i].String() < r.Workloads[j].String() })
	return r, nil
}

// roll says how the workload's pods are made again from its template.
func roll(w *Offloaded) string {
	ns := " -n " + w.Namespace
	var s string
	switch w.Kind {
	case "Deployment", "StatefulSet", "DaemonSet":
		s = "kubectl rollout restart " + strings.ToLower(w.Kind) + "/" + w.Name + ns +
			" (a StatefulSet or DaemonSet with updateStrategy OnDelete: delete its pods)"
	case "CronJob":
		s = "its next Jobs' pods keep their probes; to give the running ones back, kubectl delete pod" + ns + " " + strings.Join(w.Pods, " ")
	case "Pod":
		s = "kubectl delete pod" + ns + " " + w.Name + ", then create it again from its manifest"
	default:
		s = "kubectl delete pod" + ns + " " + strings.Join(w.Pods, " ") + " (its " + w.Kind + " makes new ones)"
	}
	if w.StillSelected {
		s = "kubectl label namespace " + w.Namespace + " " + offload.NamespaceLabel + "- first (else the new pods are offloaded again), then " + s
	}
	return s
}

// controllers resolve a pod's controller to the top of its chain: a
// Deployment's ReplicaSet to the Deployment, a CronJob's Job to the
// CronJob.
type controllers struct {
	replicaSets map[string]*metav1.OwnerReference // ns/name → its controller
	jobs        map[string]*metav1.OwnerReference
}

func listControllers(ctx context.Context, c kubernetes.Interface, namespace string) (*controllers, error) {
	out := &controllers{replicaSets: map[string]*metav1.OwnerReference{}, jobs: map[string]*metav1.OwnerReference{}}
	rs, err := c.AppsV1().ReplicaSets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("release: list replicasets: %w", err)
	}
	for i := range rs.Items {
		out.replicaSets[rs.Items[i].Namespace+"/"+rs.Items[i].Name] = metav1.GetControllerOf(&rs.Items[i])
	}
	jobs, err := c.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("release: list jobs: %w", err)
	}
	for i := range jobs.Items {
		out.jobs[jobs.Items[i].Namespace+"/"+jobs.Items[i].Name] = metav1.GetControllerOf(&jobs.Items[i])
	}
	return out, nil
}

// top is the kind and name of the top of the pod's controllers, or Pod and
// its own name.
func (cs *controllers) top(pod *v1.Pod) (kind, name string) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return "Pod", pod.Name
	}
	var up *metav1.OwnerReference
	switch {
	case ref.Kind == "ReplicaSet" && ref.APIVersion == appsv1.SchemeGroupVersion.String():
		up = cs.replicaSets[pod.Namespace+"/"+ref.Name]
	case ref.Kind == "Job" && ref.APIVersion == batchv1.SchemeGroupVersion.String():
		up = cs.jobs[pod.Namespace+"/"+ref.Name]
	}
	if up != nil {
		return up.Kind, up.Name
	}
	return ref.Kind, ref.Name
}
