// Package podprobes works out, once per pod and spec change, which probes
// of a pod probed runs and which it refuses, and why: the one view of a
// pod's probes that every consumer reads — the prober manager, the
// readiness-gate writer, the limits, the actuators, the status page and
// `probed check` — as the kubelet's pod sources hand every consumer the
// same pod.
//
// A pod declares probes in two places: each container's own
// livenessProbe, readinessProbe and startupProbe (the spec: the API server
// or the manifest decoder has defaulted and validated them) and the
// elements of its probed.io/probes annotation, which Of reads through
// package customprobe — decoded strictly, defaulted and validated, here
// and nowhere else. Of puts both into a View, each probe with its Origin
// and the field path of its declaration, each refused one with its
// container, type, field and reason, and applies the mode's Policy: the
// options the annotation is read with (plugin kinds, the egress rule, the
// per-pod limits) and then its Transforms, functions over the view run in
// order. Cluster mode's transforms (Cluster) leave the spec's probes to
// the kubelet, add the spec probes the offload webhook moved into
// probed's care (Offloaded: the pod's probed.io/offloaded record, read
// with the annotation's rules and limits, origin offloaded) and refuse
// exec probes without the container runtime.
//
// A View is bounded whatever a tenant writes: the annotation is at most
// customprobe.MaxAnnotationBytes and is read once; at most MaxRefusals
// refusals are kept (the others are counted), their texts cut to
// bound.MessageBytes; an accepted probe is at most one per container and
// probe type and origin. Nothing in a View points at what it was read from
// but the pod's own containers and spec probes, which the workers made
// from the view keep anyway (M2). A View is not changed once Of returns:
// consumers share it.
package podprobes

import (
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
)

// MaxRefusals bounds the refusals a View keeps; the rest are counted
// (View.RefusedMore). A tenant's annotation of 256 KiB of broken elements
// would otherwise keep hundreds of thousands of errors per pod.
const MaxRefusals = 100

// Probe is one probe probed runs for the pod.
type Probe struct {
	// Origin says where it was declared.
	Origin runtime.Origin
	// Field is the path of its declaration in the pod:
	// spec.containers[0].readinessProbe,
	// spec.initContainers[1].startupProbe (a sidecar's),
	// metadata.annotations[probed.io/probes][2],
	// metadata.annotations[probed.io/offloaded][0].probe.
	Field *field.Path
	// Element is its 0-based index in its origin's list (the annotation's
	// or the offload record's); -1 for a spec probe.
	Element int
	// Container is the probed container (a regular container or a
	// restartable init container) of the pod the view was worked out
	// from, or of one with the same spec.
	Container *v1.Container
	Type      runtime.ProbeType
	// Kind is the handler kind: http, tcp, exec, grpc or a plugin kind.
	Kind string
	// Probe holds the timing fields (API defaults applied) and, for a
	// built-in kind, the handler. A spec probe's is the container's own.
	Probe *v1.Probe
	// Plugin is a plugin probe's handler; nil for a built-in kind.
	Plugin *runtime.PluginAction
	// Milliseconds are an annotation probe's millisecond offsets; nil:
	// whole seconds (every spec probe).
	Milliseconds *runtime.Milliseconds
	// Extension is what an annotation probe has beyond v1.Probe (periods
	// by state, expect); nil for a spec probe.
	Extension *runtime.Extension
}

// Timing returns the probe's period, timeout and initial delay as
// durations, periods by state included (runtime.TimingOf).
func (p *Probe) Timing() runtime.Timing {
	t := runtime.TimingOf(p.Probe, p.Milliseconds)
	if p.Extension != nil {
		t = t.WithPeriods(&p.Extension.Periods)
	}
	return t
}

// Spec is the runtime's spec of the probe for pod (the pod whose workers
// run it).
func (p *Probe) Spec(pod *v1.Pod) runtime.Spec {
	return runtime.Spec{Kind: p.Kind, ProbeType: p.Type, Origin: p.Origin, Pod: pod, Container: p.Container,
		Probe: p.Probe, Plugin: p.Plugin, Milliseconds: p.Milliseconds, Extension: p.Extension}
}

// Refusal is one reason a declared probe does not run: one per error, so a
// probe with two errors has two refusals.
type Refusal struct {
	// Origin says where the refused probe was declared.
	Origin runtime.Origin
	// Element is the refused element's 0-based index in its origin's list
	// (the annotation's or the offload record's); -1 for an error of the whole list (longer than
	// its bound, not a list, more probes than the node runs) and for a
	// spec probe.
	Element int
	// Container is the container the probe names, as written (cut to
	// bound.MessageBytes); "" when it is not known.
	Container string
	// Type is the probe type when TypeKnown (it decoded).
	Type      runtime.ProbeType
	TypeKnown bool
	// Field is the path of the offending field; Reason says what is wrong
	// with it (field.Error's ErrorBody: `Forbidden: ...`). Both are cut to
	// bound.MessageBytes.
	Field, Reason string
	// Err is the error as the texts of Events and manifest errors quote
	// it (Field, BadValue and Detail cut alike).
	Err *field.Error
}

// View is a pod's probes as probed sees them, its mode's policy applied.
type View struct {
	// Probes are the probes probed runs, the spec's first (containers,
	// then sidecars, in the order startup, readiness, liveness — the
	// kubelet's AddPod), then the annotation's in its order, then what
	// transforms added.
	Probes []Probe
	// Refused are the refusals, by origin and element, at most
	// MaxRefusals; RefusedMore counts those left out.
	Refused     []Refusal
	RefusedMore int
}

// Transform is a function over a view, run by Of after the pod's probes
// are read (Policy.Transforms): it may drop probes (Drop), refuse them
// with a reason (Refuse), or add probes of another origin (Add) and the
// refusals of those it cannot add (AddRefusal). It must not keep the view.
type Transform func(pod *v1.Pod, v *View)

// Policy is a mode's rule of which of a pod's probes are probed's.
type Policy struct {
	// Annotation is how the probed.io/probes annotation is read: the
	// plugin kinds known (manifest mode), the egress rule and the per-pod
	// limits (cluster mode).
	Annotation customprobe.Options
	// Transforms run in order over the view.
	Transforms []Transform
}

// Of works out the view of pod's probes under policy: the containers'
// spec probes and the annotation's (customprobe.Read), then policy's
// transforms in order. A nil pod has an empty view.
func Of(pod *v1.Pod, policy Policy) *View {
	v := &View{}
	if pod == nil {
		return v
	}
	v.addSpec(pod)
	v.addAnnotation(pod, policy.Annotation)
	for _, t := range policy.Transforms {
		t(pod, v)
	}
	sort.SliceStable(v.Refused, func(i, j int) bool {
		a, b := &v.Refused[i], &v.Refused[j]
		if a.Origin != b.Origin {
			return a.Origin < b.Origin
		}
		return a.Element < b.Element
	})
	return v
}

// specFields names each probe type's field of a container spec.
var specFields = [...]string{runtime.Liveness: "livenessProbe", runtime.Readiness: "readinessProbe", runtime.Startup: "startupProbe"}

// addSpec adds the containers' own probes, in the kubelet's AddPod order.
func (v *View) addSpec(pod *v1.Pod) {
	add := func(c *v1.Container, path *field.Path) {
		for _, t := range [...]runtime.ProbeType{runtime.Startup, runtime.Readiness, runtime.Liveness} {
			if p := runtime.ProbeOf(c, t); p != nil {
				v.Probes = append(v.Probes, Probe{Origin: runtime.OriginSpec, Field: path.Child(specFields[t]), Element: -1, Container: c,
					Type: t, Kind: runtime.KindOf(p), Probe: p})
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
}

// addAnnotation reads the annotation: its valid elements become probes,
// its errors refusals.
func (v *View) addAnnotation(pod *v1.Pod, opts customprobe.Options) {
	elements, errs := customprobe.Read(pod, opts)
	for _, e := range errs {
		v.refuse(Refusal{Origin: runtime.OriginAnnotation, Element: -1}, e)
	}
	root := customprobe.Path()
	for i := range elements {
		el := &elements[i]
		if len(el.Errs) > 0 || el.Container == nil {
			for _, e := range el.Errs {
				v.refuse(Refusal{Origin: runtime.OriginAnnotation, Element: el.Index, Container: el.Probe.Container,
					Type: el.Probe.Type, TypeKnown: el.TypeKnown}, e)
			}
			continue
		}
		// A copy of its own: a pointer into elements would keep every
		// element (and its errors) as long as the view.
		cp := el.Probe
		p := Probe{Origin: runtime.OriginAnnotation, Field: root.Index(el.Index), Element: el.Index, Container: el.Container, Type: cp.Type,
			Kind: cp.Kind(), Probe: &cp.Probe, Milliseconds: cp.Offsets(), Extension: cp.Extension()}
		if cp.Plugin.Name != "" {
			p.Plugin = &cp.Plugin
		}
		v.Probes = append(v.Probes, p)
	}
}

// refuse keeps r with err, cut, unless MaxRefusals are kept already.
func (v *View) refuse(r Refusal, err *field.Error) {
	if len(v.Refused) >= MaxRefusals {
		v.RefusedMore++
		return
	}
	e := *err
	e.Field = bound.Cut(e.Field, bound.MessageBytes)
	e.Detail = bound.Cut(e.Detail, bound.MessageBytes)
	if s, ok := e.BadValue.(string); ok {
		e.BadValue = bound.Cut(s, bound.MessageBytes)
	}
	r.Container = bound.Cut(r.Container, bound.MessageBytes)
	r.Field, r.Reason, r.Err = e.Field, e.ErrorBody(), &e
	v.Refused = append(v.Refused, r)
}

// Drop removes the probes drop says to leave out; they are not refused
// (e.g. the kubelet runs them).
func (v *View) Drop(drop func(p *Probe) bool) {
	kept := v.Probes[:0]
	for i := range v.Probes {
		if !drop(&v.Probes[i]) {
			kept = append(kept, v.Probes[i])
		}
	}
	clear(v.Probes[len(kept):])
	v.Probes = kept
}

// Refuse refuses the probes for which refusal returns an error, with that
// error (its field should be under the probe's Field).
func (v *View) Refuse(refusal func(p *Probe) *field.Error) {
	v.Drop(func(p *Probe) bool {
		err := refusal(p)
		if err == nil {
			return false
		}
		v.refuse(Refusal{Origin: p.Origin, Element: p.Element, Container: p.Container.Name, Type: p.Type, TypeKnown: true}, err)
		return true
	})
}

// Add adds a probe (a Transform's: another origin's).
func (v *View) Add(p Probe) { v.Probes = append(v.Probes, p) }

// AddRefusal adds a refusal of a probe that is not in the view (a
// Transform's: an element of another origin that does not decode), with
// err as its field and reason; bounded and cut as every refusal.
func (v *View) AddRefusal(r Refusal, err *field.Error) { v.refuse(r, err) }

// Find returns the probe of the container and type, or nil (also for a
// nil view).
func (v *View) Find(container string, t runtime.ProbeType) *Probe {
	if v == nil {
		return nil
	}
	for i := range v.Probes {
		if p := &v.Probes[i]; p.Type == t && p.Container.Name == container {
			return p
		}
	}
	return nil
}

// Errors returns the refusals' errors in order and, when some were left
// out, one more that counts them: the texts of an Event or of a manifest's
// errors.
func (v *View) Errors() field.ErrorList {
	if v == nil {
		return nil
	}
	out := make(field.ErrorList, 0, len(v.Refused)+1)
	for i := range v.Refused {
		out = append(out, v.Refused[i].Err)
	}
	if v.RefusedMore > 0 {
		out = append(out, field.Invalid(customprobe.Path(), "", fmt.Sprintf("%d more errors not shown", v.RefusedMore)))
	}
	return out
}

// LongestTimeout is the longest timeout of the view's probes
// (runtime.TimingOf, millisecond offsets included), at least one second.
func (v *View) LongestTimeout() time.Duration {
	longest := time.Second
	if v == nil {
		return longest
	}
	for i := range v.Probes {
		longest = max(longest, v.Probes[i].Timing().Timeout)
	}
	return longest
}

// LeaveSpecToKubelet is cluster mode's Transform: the kubelet runs the
// containers' own probes, so they leave the view (neither probed's nor
// refused).
func LeaveSpecToKubelet(_ *v1.Pod, v *View) {
	v.Drop(func(p *Probe) bool { return p.Origin == runtime.OriginSpec })
}

// RefuseExec returns the Transform that refuses every exec probe of the
// view, a field.Forbidden of its exec field with reason: cluster mode
// without the container runtime.
func RefuseExec(reason string) Transform {
	return func(_ *v1.Pod, v *View) {
		v.Refuse(func(p *Probe) *field.Error {
			if p.Plugin != nil || p.Probe.Exec == nil {
				return nil
			}
			return field.Forbidden(p.Field.Child("exec"), reason)
		})
	}
}

// Offloaded returns cluster mode's Transform that adds the probes the
// offload webhook moved out of the containers' specs, as its
// probed.io/offloaded record on the pod has them
// (customprobe.ReadOffloaded, under opts: the egress rule and the per-pod
// limits of the annotation), each of origin runtime.OriginOffloaded, with
// Field its probe's path (metadata.annotations[probed.io/offloaded][i].probe)
// and nothing beyond v1.Probe (a spec probe's meaning: the kubelet's
// thresholds and Event texts). What does not decode or validate is
// refused; so is an element whose container and type already have a probe
// in the view (the annotation's: a container has one probe of each type),
// and the whole record when its probes and the annotation's together are
// more than opts.Limits.MaxProbes (a pod is never probed in part): a record
// a tenant wrote by hand buys no more than the annotation does.
func Offloaded(opts customprobe.Options) Transform {
	return func(pod *v1.Pod, v *View) {
		elements, errs := customprobe.ReadOffloaded(pod, opts)
		for _, e := range errs {
			v.refuse(Refusal{Origin: runtime.OriginOffloaded, Element: -1}, e)
		}
		if len(elements) == 0 {
			return
		}
		root := customprobe.OffloadedPath()
		if max := opts.Limits.MaxProbes; max > 0 {
			n := len(elements)
			for i := range v.Probes {
				if v.Probes[i].Origin == runtime.OriginAnnotation {
					n++
				}
			}
			if n > max {
				e := field.TooMany(root, n, max)
				e.Detail = fmt.Sprintf("this node runs at most %d probes of one pod (%s); none of this pod's %d offloaded probes run", max, opts.Limits.MaxProbesFlag, len(elements))
				if n > len(elements) {
					e.Detail += fmt.Sprintf(" (%d more are in %s)", n-len(elements), customprobe.Annotation)
				}
				v.refuse(Refusal{Origin: runtime.OriginOffloaded, Element: -1}, e)
				return
			}
		}
		for i := range elements {
			el := &elements[i]
			r := Refusal{Origin: runtime.OriginOffloaded, Element: el.Index, Container: el.Probe.Container, Type: el.Probe.Type, TypeKnown: el.TypeKnown}
			if len(el.Errs) > 0 || el.Container == nil {
				for _, e := range el.Errs {
					v.refuse(r, e)
				}
				continue
			}
			path := root.Index(el.Index)
			if other := v.Find(el.Container.Name, el.Probe.Type); other != nil {
				e := field.Duplicate(path.Child("type"), el.Probe.Type.Lower())
				e.Detail = fmt.Sprintf("container %q already has a %s probe at %s; a container has at most one probe of each type",
					el.Container.Name, el.Probe.Type.Lower(), other.Field)
				v.refuse(r, e)
				continue
			}
			// A copy of its own, as the annotation's (addAnnotation).
			cp := el.Probe.Probe
			v.Add(Probe{Origin: runtime.OriginOffloaded, Field: path.Child("probe"), Element: el.Index, Container: el.Container,
				Type: el.Probe.Type, Kind: runtime.KindOf(&cp), Probe: &cp})
		}
	}
}

// Cluster returns cluster mode's policy, which the node agent applies to
// every pod and the offload webhook to every pod it would move probes of
// (it moves only what the agents then run): the probed.io/probes
// annotation read under annotation's options (the egress rule, the
// per-pod limits); the containers' own probes left to the kubelet
// (LeaveSpecToKubelet); the offload record's probes added under the same
// options (Offloaded); and, when execRefused is not "", every exec probe
// of the view refused with that reason (RefuseExec: no container runtime),
// the offloaded ones included.
func Cluster(annotation customprobe.Options, execRefused string) Policy {
	p := Policy{Annotation: annotation, Transforms: []Transform{LeaveSpecToKubelet, Offloaded(annotation)}}
	if execRefused != "" {
		p.Transforms = append(p.Transforms, RefuseExec(execRefused))
	}
	return p
}
