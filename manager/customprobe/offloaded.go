package customprobe

import (
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/probed/probed/manager/probespec"
	"github.com/probed/probed/runtime"
)

// OffloadedAnnotation is the pod annotation in which the offload webhook
// records the containers' own probes it moved out of the spec into
// probed's care: a JSON list, one element per moved probe, each the
// v1.Probe exactly as the spec had it, so that the move can be undone
// (the agents read it through manager/podprobes as probes of origin
// offloaded; the webhook and `probed offload` undo it):
//
//	[{"container": "app", "type": "readiness",
//	  "probe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
//	            "periodSeconds": 10, "timeoutSeconds": 1, ...}}]
//
// A tenant may write it as any annotation; it is read with the same rules
// and limits as the probed.io/probes annotation (ReadOffloaded).
const OffloadedAnnotation = "probed.io/offloaded"

// OffloadedPath is the field path of the record:
// metadata.annotations[probed.io/offloaded].
func OffloadedPath() *field.Path {
	return field.NewPath("metadata", "annotations").Key(OffloadedAnnotation)
}

// Offloaded is one element of the probed.io/offloaded record.
type Offloaded struct {
	// Container names a container or restartable init container of the
	// pod.
	Container string `json:"container"`
	// Type is liveness, readiness or startup (runtime.ProbeType.Lower).
	Type string `json:"type"`
	// Probe is the v1.Probe as the container's spec had it, as JSON.
	Probe json.RawMessage `json:"probe"`
}

// EncodeOffloaded returns the record's value for the moved probes, in
// order.
func EncodeOffloaded(moved []Offloaded) (string, error) {
	b, err := json.Marshal(moved)
	return string(b), err
}

// offloadedFields are the keys of a record element.
var offloadedFields = []string{"container", "type", "probe"}

// ReadOffloaded reads pod's probed.io/offloaded record as Read reads the
// probed.io/probes annotation: element by element, each with its probe or
// its errors, and apart the errors of the whole record (longer than
// MaxAnnotationBytes, not a JSON list), with which there are no elements.
// Limits.MaxProbes is not applied here: the record's probes count
// together with the annotation's (podprobes.Offloaded). It returns nil, nil
// when the pod has no record, and for an empty value, "[]" or "null".
//
// An element is an object with exactly the keys container, type and probe
// (strict: unknown and duplicate keys are errors). Its probe is decoded
// strictly into a v1.Probe (a field this probed's v1.Probe does not know
// is an error, so nothing of the spec's probe is silently dropped),
// defaulted and validated as the API server does (Default, Validate), and
// with opts: its host under the egress rule (Options.Egress) and its
// period under Limits.MinPeriod. It is refused, too, when its container
// has a probe of its type in its spec (the kubelet runs that one) or an
// earlier element of the record names the same container and type. Only
// Probe.Container, Probe.Type and Probe.Probe of an Element are set: an
// offloaded probe is a spec probe in meaning, with nothing beyond v1.Probe.
// Field paths look like metadata.annotations[probed.io/offloaded][0].probe.httpGet.host.
func ReadOffloaded(pod *v1.Pod, opts Options) ([]Element, field.ErrorList) {
	root := OffloadedPath()
	items, errs := readList(pod, OffloadedAnnotation, root, "offloaded probes")
	if len(items) == 0 {
		return nil, errs
	}
	p := &parser{pod: pod, podRef: podRef(pod), opts: opts, seen: map[probeKey]int{}}
	out := make([]Element, len(items))
	for i, raw := range items {
		out[i] = p.offloaded(raw, root.Index(i), i)
	}
	return out, nil
}

// offloaded decodes and validates one element of the record.
func (p *parser) offloaded(raw json.RawMessage, path *field.Path, index int) Element {
	el := Element{Index: index}
	obj, errs := decodeObject(raw, path)
	if errs != nil && len(obj.keys) == 0 {
		el.Errs = errs
		return el
	}
	var typeName string
	var haveContainer, haveType, haveProbe bool
	for _, k := range obj.keys {
		v, fp := obj.values[k], path.Child(k)
		var es field.ErrorList
		switch k {
		case "container":
			el.Probe.Container, es = decodeString(v, fp)
			haveContainer = es == nil
		case "type":
			typeName, es = decodeString(v, fp)
			haveType = es == nil
		case "probe":
			es = decodeStrict(v, fp, &el.Probe.Probe)
			haveProbe = es == nil
		default:
			es = field.ErrorList{unknownField(fp, k, offloadedFields)}
		}
		errs = append(errs, es...)
	}
	for _, k := range offloadedFields {
		if _, ok := obj.values[k]; !ok {
			errs = append(errs, field.Required(path.Child(k), ""))
		}
	}
	if haveType {
		if t, err := runtime.ParseProbeType(typeName); err != nil {
			errs = append(errs, field.NotSupported(path.Child("type"), typeName, probeTypeNames))
		} else {
			el.Probe.Type, el.TypeKnown = t, true
		}
	}
	var ctr *v1.Container
	if haveContainer {
		var es field.ErrorList
		ctr, es = p.container(el.Probe.Container, path.Child("container"))
		errs = append(errs, es...)
	}
	if haveProbe && el.TypeKnown {
		pp := path.Child("probe")
		probespec.Default(&el.Probe.Probe)
		errs = append(errs, probespec.Validate(&el.Probe.Probe, el.Probe.Type, pp)...)
		errs = append(errs, p.hosts(&el.Probe.Probe.ProbeHandler, pp)...)
		errs = append(errs, p.opts.Limits.validatePeriods(&el.Probe, pp)...)
	}
	if ctr != nil && el.TypeKnown {
		fp := path.Child("type")
		if runtime.ProbeOf(ctr, el.Probe.Type) != nil {
			errs = append(errs, field.Forbidden(fp, fmt.Sprintf("container %q of pod %s has a %sProbe in its spec, which the kubelet runs; a container has at most one probe of each type",
				el.Probe.Container, p.podRef, el.Probe.Type.Lower())))
		}
		k := probeKey{el.Probe.Container, el.Probe.Type}
		if first, dup := p.seen[k]; dup {
			e := field.Duplicate(fp, typeName)
			e.Detail = fmt.Sprintf("container %q of pod %s already has an offloaded %s probe at index %d", el.Probe.Container, p.podRef, el.Probe.Type.Lower(), first)
			errs = append(errs, e)
		} else {
			p.seen[k] = index
		}
	}
	el.Errs = errs
	if len(errs) == 0 {
		el.Container = ctr
	}
	return el
}
