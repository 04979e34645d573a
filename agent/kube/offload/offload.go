// Package offload moves a pod's own probes into probed's care, and back:
// the mutation the offload webhook (`probed webhook`, package
// agent/kube/webhook) applies to a pod created in a namespace that opted
// in, and its undo.
//
// Move takes each container's (and restartable init container's)
// readinessProbe, startupProbe and livenessProbe out of the spec, so the
// kubelet runs none of them, records each unchanged in the pod's
// probed.io/offloaded annotation (customprobe.OffloadedAnnotation), where
// the node agents read them as probes of origin offloaded
// (podprobes.Offloaded) with the kubelet's semantics, and adds probed's
// readiness gate when a readiness or startup probe moved, so that the
// pod's Ready follows probed's verdict. It moves only what the node agents
// will run, decided by the agents' own rules rather than a copy of them:
//
//   - liveness and startup probes only where the agents restart containers
//     (Config.Restarts: --liveness-action=restart and a namespace selected
//     by --liveness-action-namespaces), since the kubelet's meaning of a
//     failed liveness probe is a restart;
//   - of the rest, only what the agents' policy (Config.Policy, the
//     podprobes.Cluster the agents apply: exec only with the container
//     runtime, the egress rule for a host, the shortest period, the per-pod
//     limit) accepts when Move reads the moved pod's view as an agent
//     would;
//   - a startup probe only with every other probe of its container: the
//     kubelet holds its own probes of a container until its startup probe
//     succeeds, and would not wait for probed's.
//
// What stays is left to the kubelet, in the spec, and the pod's
// probed.io/offload annotation (NoteAnnotation) says which and why, with
// whether the gate was added. Move is idempotent: it first undoes any
// earlier move (Undo: the record's probes back into the spec, the note and
// the gate it added removed), so a reinvocation, a re-created pod that
// carries the record, or a record a tenant wrote by hand all end as one
// move of the pod's own probes; a record whose elements do not decode or
// validate restores nothing. Nothing is moved in part: when the record and
// the note would make the pod's annotations larger than the API server
// allows, every probe stays.
package offload

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/manager/probespec"
	"github.com/probed/probed/runtime"
)

const (
	// NamespaceLabel is the namespace label that opts a namespace in.
	NamespaceLabel = "probed.io/offload"
	// DefaultNamespaceSelector selects the namespaces labelled
	// probed.io/offload=enabled.
	DefaultNamespaceSelector = NamespaceLabel + "=enabled"
	// NoteAnnotation is the pod annotation in which Move says what it did
	// beyond the record: the readiness gate it added and the probes it
	// left to the kubelet, with why (Note, as JSON).
	NoteAnnotation = "probed.io/offload"
	// RecordAnnotation is the record of the moved probes.
	RecordAnnotation = customprobe.OffloadedAnnotation
)

// Config is what the node agents do, as the webhook is told (its flags are
// the agents').
type Config struct {
	// Policy is the agents' policy (podprobes.Cluster with their egress
	// rule, per-pod limits and, without the container runtime, exec
	// probes refused).
	Policy podprobes.Policy
	// ReadinessGate is the agents' condition type (--readiness-gate).
	ReadinessGate v1.PodConditionType
	// Restarts says why liveness and startup probes of a namespace stay
	// with the kubelet, "" when the agents restart containers there. Nil:
	// they stay everywhere.
	Restarts func(namespace string) (why string)
}

// Note is the value of NoteAnnotation.
type Note struct {
	// ReadinessGate is the condition type Move added to
	// spec.readinessGates; "" when it added none (no readiness or startup
	// probe moved, or the pod listed it already).
	ReadinessGate string `json:"readinessGate,omitempty"`
	// Left are the probes left to the kubelet, grouped by reason.
	Left []Left `json:"leftToKubelet,omitempty"`
}

// Left is one reason some probes stay with the kubelet.
type Left struct {
	// Probes are "container/type" (type liveness, readiness or startup).
	Probes []string `json:"probes"`
	Reason string   `json:"reason"`
}

// Result is what Move did.
type Result struct {
	// Moved are the moved probes, "container/type", in record order.
	Moved []string
	// Note is what the note annotation says (also when it was too large
	// to write: then Moved is empty and Note.Left says why).
	Note Note
}

// probeRef is one spec probe of the pod.
type probeRef struct {
	container *v1.Container
	path      *field.Path // the probe's field in the spec
	t         runtime.ProbeType
}

func (r probeRef) key() string { return r.container.Name + "/" + r.t.Lower() }

// Move returns a copy of pod with its probes moved into probed's care
// under cfg, and what it did; pod is not changed. A pod with no probe of
// its own comes back as Undo returns it.
func Move(pod *v1.Pod, cfg Config) (*v1.Pod, Result) {
	base := Undo(pod)
	refs := specProbes(base)
	if len(refs) == 0 {
		return base, Result{}
	}
	left := map[string]string{} // key → why
	if why := restarts(cfg, base.Namespace); why != "" {
		for _, r := range refs {
			if r.t != runtime.Readiness {
				left[r.key()] = why
			}
		}
	}
	// The agents' own rules decide the rest: read the moved pod as an
	// agent would, leave what its view refuses, again until nothing more
	// is left (each round only adds to left; the second finds the
	// startup probes whose container keeps another probe).
	for round := 0; ; round++ {
		if round > len(refs) {
			// Not reached: left only grows. Move nothing rather than loop.
			for _, r := range refs {
				left[r.key()] = "the node agents' rules did not settle on a set of probes to run"
			}
			break
		}
		moving := without(refs, left)
		if len(moving) == 0 {
			break
		}
		trial := apply(base, moving)
		view := podprobes.Of(trial, cfg.Policy)
		changed := false
		for i, r := range moving {
			if p := view.Find(r.container.Name, r.t); p != nil && p.Origin == runtime.OriginOffloaded {
				continue
			}
			left[r.key()] = refusal(view, i, r)
			changed = true
		}
		for _, r := range moving {
			if r.t != runtime.Startup || left[r.key()] != "" {
				continue
			}
			for _, other := range refs {
				if other.container == r.container && left[other.key()] != "" {
					left[r.key()] = fmt.Sprintf("its container's %s probe stays with the kubelet, which holds its probes until its own startup probe succeeds", other.t.Lower())
					changed = true
					break
				}
			}
		}
		if !changed {
			break
		}
	}

	moving := without(refs, left)
	out := apply(base, moving)
	res := Result{}
	for _, r := range moving {
		res.Moved = append(res.Moved, r.key())
		if r.t != runtime.Liveness && cfg.ReadinessGate != "" && res.Note.ReadinessGate == "" && !gated(out, cfg.ReadinessGate) {
			out.Spec.ReadinessGates = append(out.Spec.ReadinessGates, v1.PodReadinessGate{ConditionType: cfg.ReadinessGate})
			res.Note.ReadinessGate = string(cfg.ReadinessGate)
		}
	}
	res.Note.Left = group(refs, left)
	if writeNote(out, res.Note) == nil {
		return out, res
	}
	// Too large to write whole: keep every probe in the spec and say so
	// in a note as short as it gets, if even that fits.
	res = Result{Note: Note{Left: []Left{{Probes: keys(refs),
		Reason: fmt.Sprintf("the record of the moved probes would make the pod's annotations larger than %d bytes", apivalidation.TotalAnnotationSizeLimitB)}}}}
	if writeNote(base, res.Note) != nil {
		delete(base.Annotations, NoteAnnotation)
	}
	return base, res
}

// Undo returns a copy of pod as it was before Move: each valid element of
// its probed.io/offloaded record back in its container's spec (unless the
// spec has a probe of that type: the spec wins), the record and the note
// removed, and the readiness gate the note says Move added taken out of
// spec.readinessGates. Elements that do not decode or validate are
// dropped. A pod with neither record nor note comes back as a plain copy.
func Undo(pod *v1.Pod) *v1.Pod {
	out := pod.DeepCopy()
	_, hasRecord := out.Annotations[RecordAnnotation]
	noteValue, hasNote := out.Annotations[NoteAnnotation]
	if !hasRecord && !hasNote {
		return out
	}
	elements, _ := customprobe.ReadOffloaded(out, customprobe.Options{})
	for i := range elements {
		if el := &elements[i]; len(el.Errs) == 0 && el.Container != nil {
			p := el.Probe.Probe
			runtime.SetProbe(el.Container, el.Probe.Type, &p)
		}
	}
	var note Note
	if hasNote && json.Unmarshal([]byte(noteValue), &note) == nil && note.ReadinessGate != "" {
		out.Spec.ReadinessGates = slices.DeleteFunc(out.Spec.ReadinessGates, func(g v1.PodReadinessGate) bool {
			return string(g.ConditionType) == note.ReadinessGate
		})
		if len(out.Spec.ReadinessGates) == 0 {
			out.Spec.ReadinessGates = nil
		}
	}
	delete(out.Annotations, RecordAnnotation)
	delete(out.Annotations, NoteAnnotation)
	if len(out.Annotations) == 0 {
		out.Annotations = nil
	}
	return out
}

// KeepMoved returns a copy of pod, an update of a pod Move moved, without
// the spec probes its record holds unchanged: `kubectl apply` of the pod's
// manifest, client-side or server-side, puts the moved probes back into
// the update (the manifest has them, the pod has not), and a pod's spec
// may not change, so the update would be refused. A probe that differs
// from the record stays (the update then changes the spec, which the API
// server refuses as it would without the webhook); the record, the note
// and the gates are the update's.
func KeepMoved(pod *v1.Pod) *v1.Pod {
	out := pod.DeepCopy()
	var record []customprobe.Offloaded
	if json.Unmarshal([]byte(out.Annotations[RecordAnnotation]), &record) != nil {
		return out
	}
	refs := specProbes(out)
	for _, el := range record {
		var p v1.Probe
		if json.Unmarshal(el.Probe, &p) != nil {
			continue
		}
		probespec.Default(&p)
		for _, r := range refs {
			if r.container.Name == el.Container && r.t.Lower() == el.Type && apiequality.Semantic.DeepEqual(runtime.ProbeOf(r.container, r.t), &p) {
				runtime.SetProbe(r.container, r.t, nil)
			}
		}
	}
	return out
}

// Offloaded reports whether pod carries a record of moved probes.
func Offloaded(pod *v1.Pod) bool {
	_, ok := pod.Annotations[RecordAnnotation]
	return ok
}

// ReadNote returns the pod's note, false when it has none or it does not
// decode.
func ReadNote(pod *v1.Pod) (Note, bool) {
	var n Note
	v, ok := pod.Annotations[NoteAnnotation]
	return n, ok && json.Unmarshal([]byte(v), &n) == nil
}

// restarts is cfg.Restarts's verdict for namespace.
func restarts(cfg Config, namespace string) string {
	if cfg.Restarts == nil {
		return "liveness restarts are not enabled for the node agents"
	}
	return cfg.Restarts(namespace)
}

// specProbes lists the pod's own probes in the view's order (containers,
// then restartable init containers; startup, readiness, liveness).
func specProbes(pod *v1.Pod) []probeRef {
	var out []probeRef
	add := func(c *v1.Container, path *field.Path) {
		for _, t := range [...]runtime.ProbeType{runtime.Startup, runtime.Readiness, runtime.Liveness} {
			if runtime.ProbeOf(c, t) != nil {
				out = append(out, probeRef{container: c, path: path.Child(t.Lower() + "Probe"), t: t})
			}
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i], field.NewPath("spec", "containers").Index(i))
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; runtime.IsRestartable(c) {
			add(c, field.NewPath("spec", "initContainers").Index(i))
		}
	}
	return out
}

// without returns refs less those in left.
func without(refs []probeRef, left map[string]string) []probeRef {
	var out []probeRef
	for _, r := range refs {
		if left[r.key()] == "" {
			out = append(out, r)
		}
	}
	return out
}

// apply returns a copy of base with the probes of moving (base's own
// refs) out of the spec and in the record, in order.
func apply(base *v1.Pod, moving []probeRef) *v1.Pod {
	out := base.DeepCopy()
	if len(moving) == 0 {
		return out
	}
	record := make([]customprobe.Offloaded, 0, len(moving))
	for _, r := range moving {
		c := counterpart(base, out, r.container)
		raw, err := json.Marshal(runtime.ProbeOf(c, r.t))
		if err != nil {
			continue // a v1.Probe always marshals
		}
		record = append(record, customprobe.Offloaded{Container: c.Name, Type: r.t.Lower(), Probe: raw})
		runtime.SetProbe(c, r.t, nil)
	}
	value, _ := customprobe.EncodeOffloaded(record)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[RecordAnnotation] = value
	return out
}

// counterpart is the container of out (a deep copy of base) at c's place
// in base.
func counterpart(base, out *v1.Pod, c *v1.Container) *v1.Container {
	for i := range base.Spec.Containers {
		if &base.Spec.Containers[i] == c {
			return &out.Spec.Containers[i]
		}
	}
	for i := range base.Spec.InitContainers {
		if &base.Spec.InitContainers[i] == c {
			return &out.Spec.InitContainers[i]
		}
	}
	panic("offload: a container not of the pod")
}

// refusal says why the view did not take the moved probe r, the i-th
// element of the trial's record: its refusals' reasons with their fields
// mapped back into the spec (metadata.annotations[probed.io/offloaded][i].probe.exec
// → spec.containers[0].readinessProbe.exec), or the refusal of the whole
// record.
func refusal(v *podprobes.View, i int, r probeRef) string {
	prefix := customprobe.OffloadedPath().Index(i).Child("probe").String()
	var reasons []string
	for _, rf := range v.Refused {
		if rf.Origin != runtime.OriginOffloaded || (rf.Element != i && rf.Element != -1) {
			continue
		}
		if rf.Element == -1 {
			// The whole record's (too many probes): one reason for all.
			reasons = append(reasons, rf.Reason)
			continue
		}
		where := r.path.String()
		if rest, ok := strings.CutPrefix(rf.Field, prefix); ok {
			where += rest
		}
		reasons = append(reasons, where+": "+rf.Reason)
	}
	if len(reasons) == 0 {
		return "the node agents would not run it"
	}
	return strings.Join(reasons, "; ")
}

// group lists the left probes by reason, in the order of refs.
func group(refs []probeRef, left map[string]string) []Left {
	var out []Left
	at := map[string]int{}
	for _, r := range refs {
		why := left[r.key()]
		if why == "" {
			continue
		}
		i, ok := at[why]
		if !ok {
			i = len(out)
			at[why] = i
			out = append(out, Left{Reason: why})
		}
		out[i].Probes = append(out[i].Probes, r.key())
	}
	return out
}

func keys(refs []probeRef) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.key()
	}
	return out
}

// gated reports whether the pod lists the condition type as a gate.
func gated(pod *v1.Pod, t v1.PodConditionType) bool {
	return slices.ContainsFunc(pod.Spec.ReadinessGates, func(g v1.PodReadinessGate) bool { return g.ConditionType == t })
}

// writeNote sets the pod's note (none when it says nothing) and checks the
// annotations' size; on error the pod's annotations are over the limit.
func writeNote(pod *v1.Pod, n Note) error {
	if n.ReadinessGate != "" || len(n.Left) > 0 {
		b, err := json.Marshal(n)
		if err != nil {
			return err
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[NoteAnnotation] = string(b)
	}
	return apivalidation.ValidateAnnotationsSize(pod.Annotations)
}
