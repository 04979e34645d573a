// Package customprobe reads the probes a pod declares in its probed.io/probes
// annotation: probes probed runs besides (manifest mode) or instead of
// (cluster mode, where the kubelet runs the spec's probes) the containers'
// own. It also holds the API server's defaults and validation of a v1.Probe
// (Default, Validate), the one copy of those rules.
//
// The annotation's value is a JSON list. Each element mirrors a v1.Probe,
// with v1.Probe's own field names, plus the container and the probe type:
//
//	[{"container": "app",            // required: a container (or restartable init container) of the pod
//	  "type": "readiness",           // required: liveness, readiness or startup
//	  "initialDelaySeconds": 0,      // optional, seconds, default 0
//	  "timeoutSeconds": 1,           // optional, seconds, default 1
//	  "periodSeconds": 1,            // optional, seconds, default 10
//	  "periodMilliseconds": -800,    // optional, -999..999, added to periodSeconds (here: 200 ms)
//	  "timeoutMilliseconds": 0,      // optional, -999..999, added to timeoutSeconds
//	  "initialDelayMilliseconds": 0, // optional, -999..999, added to initialDelaySeconds
//	  "unhealthyPeriodSeconds": 0,   // optional, with unhealthyPeriodMilliseconds: the period while
//	  "unhealthyPeriodMilliseconds": 250, // the verdict is not Success (no default; >= 100 ms)
//	  "transitionPeriodSeconds": 1,  // optional, with transitionPeriodMilliseconds: the period while
//	                                 // results count toward a threshold that would change the verdict
//	  "successThreshold": 1,         // optional, default 1; must be 1 for liveness and startup
//	  "failureThreshold": 3,         // optional, default 3
//	  "terminationGracePeriodSeconds": 30, // optional, seconds, > 0; not on readiness
//	  // exactly one handler:
//	  "httpGet": {"path": "/ready", "port": 8080,   // v1.HTTPGetAction, and optionally
//	    "expect": {"status": [200], "bodyRegex": "ok"}, // checks on the answer (runtime/expect)
//	    "keepAlive": true},          // keep the connection between runs (plugins/http; default: the node's)
//	  "tcpSocket": {"port": "redis"},               // v1.TCPSocketAction
//	  "grpc": {"port": 9090, "service": "health"},  // v1.GRPCAction
//	  "exec": {"command": ["cat", "/tmp/ready"]},   // v1.ExecAction; in cluster mode with the container runtime only
//	  "plugin": {                    // a kind a plugin serves
//	    "name": "http-match",        // required: the probe kind
//	    "port": 8080,                // optional: a number 1-65535 or a port name of the container
//	    "params": {"path": "/ready", "body": "ok"}}}] // optional: string values only
//
// Timing fields and the built-in handlers have the meaning, defaults and
// validation of v1.Probe (spec 1.2, 1.3). The millisecond fields, which
// v1.Probe lacks, are offsets added to the defaulted seconds fields as in
// upstream's sub-second probe proposal (kubernetes/kubernetes#107958,
// KEP-3066; ValidateMilliseconds). The periods by state
// (ValidateStatePeriods) and httpGet.expect/tcpSocket.expect
// (runtime/expect) are what an annotation probe has beyond v1.Probe
// (Probe.Extension): expect is taken out of the handler's object before
// the rest is decoded into the v1 type, so a spec probe can never carry
// it. The built-in handlers are decoded strictly (an unknown or
// misspelled field is an error). A named port is
// resolved at run time like an httpGet port (spec 1.4); a name the container
// does not declare is not a parse error, the probe then errors on every run,
// as the kubelet does for built-in probes (BR-20).
//
// The offload webhook's record of the spec probes it moved into probed's
// care, the probed.io/offloaded annotation, is read here too
// (ReadOffloaded): each element a container's v1.Probe as the spec had it,
// read with the same defaults, validation, egress rule and limits.
package customprobe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	"github.com/probed/probed/internal/suggest"
	"github.com/probed/probed/manager/probespec"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/expect"
)

// Annotation is the pod annotation that holds the custom probes.
const Annotation = "probed.io/probes"

// MaxAnnotationBytes bounds the annotation's value: 256 KiB, the API server's
// limit for all annotations of an object together.
const MaxAnnotationBytes = 256 << 10

// Probe is one annotation probe of one container.
type Probe struct {
	// Container is the name of the probed container.
	Container string
	// Type is the probe type (liveness, readiness or startup).
	Type runtime.ProbeType
	// Probe carries the timing fields (initialDelaySeconds, timeoutSeconds,
	// periodSeconds, successThreshold, failureThreshold in seconds or
	// counts, terminationGracePeriodSeconds) and, for a built-in handler,
	// that handler, API defaults applied. For a plugin probe its handler
	// fields are empty.
	Probe v1.Probe
	// Plugin is the handler of a plugin probe: the plugin kind, its port
	// and its parameters. Its Name is empty for a built-in handler.
	Plugin runtime.PluginAction
	// Milliseconds are the periodMilliseconds, timeoutMilliseconds and
	// initialDelayMilliseconds offsets (zero: whole seconds).
	Milliseconds runtime.Milliseconds
	// Periods are the unhealthy and transition periods (zero: none).
	Periods runtime.StatePeriods
	// Expect is httpGet.expect or tcpSocket.expect; nil: none.
	Expect *expect.Expect
	// KeepAlive is httpGet.keepAlive; nil: not set (the node's default).
	KeepAlive *bool
}

// Extension returns what the probe has beyond v1.Probe (never nil: it
// marks the probe as an annotation probe, runtime.Spec.Extension).
func (p *Probe) Extension() *runtime.Extension {
	return &runtime.Extension{Periods: p.Periods, Expect: p.Expect, KeepAlive: p.KeepAlive}
}

// Offsets returns the probe's millisecond offsets, or nil when it has none
// (the form runtime.Spec.Milliseconds takes).
func (p *Probe) Offsets() *runtime.Milliseconds {
	if p.Milliseconds.IsZero() {
		return nil
	}
	return &p.Milliseconds
}

// Timing returns the probe's period, timeout and initial delay as
// durations, millisecond offsets included (runtime.TimingOf).
func (p *Probe) Timing() runtime.Timing {
	return runtime.TimingOf(&p.Probe, p.Offsets()).WithPeriods(&p.Periods)
}

// Kind is the probe's handler kind: the plugin kind, or the built-in kind
// of its v1.Probe handler (runtime.KindOf).
func (p *Probe) Kind() string {
	if p.Plugin.Name != "" {
		return p.Plugin.Name
	}
	return runtime.KindOf(&p.Probe)
}

// Options tune Parse.
type Options struct {
	// KnownKind reports whether a plugin kind is served; nil: every kind
	// is accepted (its runs are errored until a plugin serves it).
	KnownKind func(kind string) bool
	// Egress, when set, is cluster mode's rule of where probes connect
	// (runtime/egress, Rule.CheckHost): httpGet.host and tcpSocket.host
	// are refused (field.Forbidden, naming the reason and
	// --allow-probe-host) unless the operator allows ranges; then an IP
	// literal outside them is refused and a name is accepted, its
	// addresses checked when the probe dials. Nil: any host (manifest
	// mode: the API's rules).
	Egress *egress.Rule

	// Limits an operator sets on what one pod may ask of the node (cluster
	// mode); each names the flag that sets it in its errors.
	// A pod over MaxProbes has none of its annotation probes run; a probe
	// under MinPeriod is refused like any invalid element.
	Limits Limits
}

// Limits bound the annotation probes of one pod. Zero values set no bound.
type Limits struct {
	// MaxProbes bounds the elements of one pod's annotation; a longer list
	// is refused whole (field.TooMany on the annotation), so that a pod is
	// never probed in part.
	MaxProbes int
	// MinPeriod is the shortest period (periodSeconds plus
	// periodMilliseconds) a probe may have; at least MinPeriod (100 ms).
	MinPeriod time.Duration
	// MaxProbesFlag and MinPeriodFlag name the settings in the errors
	// (e.g. "--max-probes-per-pod"), so the tenant sees what to ask the
	// operator for.
	MaxProbesFlag, MinPeriodFlag string
}

var probeTypeNames = []string{"liveness", "readiness", "startup"}

// Parse decodes, defaults and validates the probed.io/probes annotation of
// pod. It returns nil, nil when the pod is nil or has no such annotation, and
// also when the value is empty, "[]" or "null".
//
// Decoding is strict: the value must be a JSON list of objects, keys match
// case-sensitively, and unknown or duplicate keys are errors. Validation
// rejects a missing or unknown container (regular init containers may not be
// probed; restartable init containers, restartPolicy: Always, may), a type
// other than liveness/readiness/startup, a missing plugin or plugin name, a
// built-in kind name (exec, http, tcp, grpc), a kind knownKind does not know
// (when knownKind is not nil), a port that is neither 0 (no port), 1-65535 nor
// a valid IANA_SVC_NAME, a params value that is not a string, a probe type the
// container already has in its spec or twice in the annotation, and the
// timing rules of ValidateTiming and ValidateMilliseconds, and with Options
// a host field the egress rule does not allow (Egress) and the per-pod
// limits (Limits). Field paths look like
// metadata.annotations[probed.io/probes][0].plugin.name.
//
// An element with errors is left out of the result; the others are returned
// alongside the errors, in annotation order. A value that is not a JSON list
// yields no probes at all.
//
// The agent reads a pod's annotation once per pod and spec change, through
// manager/podprobes (which calls Read); Parse is the same rules for a
// library user who wants the probes and errors alone.
func Parse(pod *v1.Pod, knownKind func(string) bool) ([]Probe, field.ErrorList) {
	return ParseWith(pod, Options{KnownKind: knownKind})
}

// ParseWith is Parse with options.
func ParseWith(pod *v1.Pod, opts Options) ([]Probe, field.ErrorList) {
	elements, errs := Read(pod, opts)
	var out []Probe
	for i := range elements {
		errs = append(errs, elements[i].Errs...)
		if len(elements[i].Errs) == 0 {
			out = append(out, elements[i].Probe)
		}
	}
	return out, errs
}

// Element is one element of the annotation's list as Read found it.
type Element struct {
	// Index is its 0-based position in the list.
	Index int
	// Probe is the probe, defaulted, when Errs is empty. Otherwise it holds
	// what decoded: Container as written (when it was a string), Type when
	// TypeKnown.
	Probe Probe
	// Container is the pod's container Probe.Container names (a regular
	// container or a restartable init container), nil when there is none
	// or the name did not decode.
	Container *v1.Container
	// TypeKnown: the element's type decoded to liveness, readiness or
	// startup, and Probe.Type is it.
	TypeKnown bool
	// Errs are the element's errors, each naming its field
	// (metadata.annotations[probed.io/probes][N]...); empty: valid.
	Errs field.ErrorList
}

// Read applies Parse's rules element by element: the elements of the
// list in order, each with its probe or its errors, and, apart, the errors
// of the whole annotation (longer than MaxAnnotationBytes, not a JSON list,
// more elements than Limits.MaxProbes), with which there are no elements.
// It returns nil, nil when the pod is nil or has no annotation, and for an
// empty value, "[]" or "null".
func Read(pod *v1.Pod, opts Options) ([]Element, field.ErrorList) {
	items, errs := readList(pod, Annotation, Path(), "probe objects")
	if len(items) == 0 {
		return nil, errs
	}
	root := Path()
	if max := opts.Limits.MaxProbes; max > 0 && len(items) > max {
		e := field.TooMany(root, len(items), max)
		e.Detail = fmt.Sprintf("this node runs at most %d probes of one pod's annotation (%s); none of this pod's %d run", max, opts.Limits.MaxProbesFlag, len(items))
		return nil, field.ErrorList{e}
	}
	p := &parser{pod: pod, podRef: podRef(pod), opts: opts, seen: map[probeKey]int{}}
	out := make([]Element, len(items))
	for i, raw := range items {
		out[i] = p.entry(raw, root.Index(i), i)
	}
	return out, nil
}

// readList reads the pod's annotation key (whose path is root) as a JSON
// list: nil, nil when the pod is nil or has no such annotation, and for an
// empty value, "[]" or "null"; an error of the whole annotation when it is
// longer than MaxAnnotationBytes or not a JSON list of what.
func readList(pod *v1.Pod, key string, root *field.Path, what string) ([]json.RawMessage, field.ErrorList) {
	if pod == nil {
		return nil, nil
	}
	value, ok := pod.Annotations[key]
	if !ok {
		return nil, nil
	}
	reads.Add(1)
	trimmed := bytes.TrimSpace([]byte(value))
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return nil, nil
	}
	if len(value) > MaxAnnotationBytes {
		return nil, field.ErrorList{field.TooLong(root, "", MaxAnnotationBytes)}
	}
	var items []json.RawMessage
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(trimmed, &items); err != nil {
		return nil, field.ErrorList{field.Invalid(root, shorten(value), "must be a JSON list of "+what+": "+jsonMessage(err))}
	}
	return items, nil
}

// reads counts the annotations readList has read (Reads).
var reads atomic.Uint64

// Reads returns how many annotations Read (and so Parse) and ReadOffloaded
// have read in this process. Tests count with it that the agent reads a pod's annotation once
// per pod and spec change.
func Reads() uint64 { return reads.Load() }

// Path is the field path of the annotation:
// metadata.annotations[probed.io/probes].
func Path() *field.Path { return field.NewPath("metadata", "annotations").Key(Annotation) }

type probeKey struct {
	container string
	t         runtime.ProbeType
}

type parser struct {
	pod    *v1.Pod
	podRef string
	opts   Options
	seen   map[probeKey]int // first annotation index of each (container, type)
}

// entry decodes and validates one element of the list.
func (p *parser) entry(raw json.RawMessage, path *field.Path, index int) Element {
	probe, ctr, typeOK, errs := p.element(raw, path, index)
	return Element{Index: index, Probe: probe, Container: ctr, TypeKnown: typeOK, Errs: errs}
}

// element decodes and validates one element: the probe, its container,
// whether its type decoded, and its errors.
func (p *parser) element(raw json.RawMessage, path *field.Path, index int) (Probe, *v1.Container, bool, field.ErrorList) {
	var out Probe
	var errs field.ErrorList
	obj, es := decodeObject(raw, path)
	if es != nil {
		return out, nil, false, es
	}
	var typeName string
	var haveContainer, haveType bool
	var handlers []string // handler fields given, in document order
	handlerDecoded := true
	for _, k := range obj.keys {
		v := obj.values[k]
		fp := path.Child(k)
		switch k {
		case "container":
			out.Container, es = decodeString(v, fp)
			haveContainer = es == nil
		case "type":
			typeName, es = decodeString(v, fp)
			haveType = es == nil
		case "initialDelaySeconds":
			out.Probe.InitialDelaySeconds, es = decodeInt32(v, fp)
		case "timeoutSeconds":
			out.Probe.TimeoutSeconds, es = decodeInt32(v, fp)
		case "periodSeconds":
			out.Probe.PeriodSeconds, es = decodeInt32(v, fp)
		case "initialDelayMilliseconds":
			out.Milliseconds.InitialDelay, es = decodeInt32(v, fp)
		case "timeoutMilliseconds":
			out.Milliseconds.Timeout, es = decodeInt32(v, fp)
		case "periodMilliseconds":
			out.Milliseconds.Period, es = decodeInt32(v, fp)
		case "unhealthyPeriodSeconds":
			out.Periods.UnhealthySeconds, es = decodeInt32(v, fp)
		case "unhealthyPeriodMilliseconds":
			out.Periods.UnhealthyMilliseconds, es = decodeInt32(v, fp)
		case "transitionPeriodSeconds":
			out.Periods.TransitionSeconds, es = decodeInt32(v, fp)
		case "transitionPeriodMilliseconds":
			out.Periods.TransitionMilliseconds, es = decodeInt32(v, fp)
		case "successThreshold":
			out.Probe.SuccessThreshold, es = decodeInt32(v, fp)
		case "failureThreshold":
			out.Probe.FailureThreshold, es = decodeInt32(v, fp)
		case "terminationGracePeriodSeconds":
			var g int64
			g, es = decodeInt(v, fp, 64)
			if es == nil {
				out.Probe.TerminationGracePeriodSeconds = &g
			}
		case "plugin":
			out.Plugin, es = p.plugin(v, fp)
			handlers = append(handlers, k)
		case "httpGet":
			out.Probe.HTTPGet = &v1.HTTPGetAction{}
			out.Expect, es = decodeWithExpect(v, fp, out.Probe.HTTPGet, &out.KeepAlive)
			handlers = append(handlers, k)
			handlerDecoded = handlerDecoded && es == nil
		case "tcpSocket":
			out.Probe.TCPSocket = &v1.TCPSocketAction{}
			out.Expect, es = decodeWithExpect(v, fp, out.Probe.TCPSocket, nil)
			handlers = append(handlers, k)
			handlerDecoded = handlerDecoded && es == nil
		case "grpc":
			out.Probe.GRPC = &v1.GRPCAction{}
			es = decodeStrict(v, fp, out.Probe.GRPC)
			handlers = append(handlers, k)
			handlerDecoded = handlerDecoded && es == nil
		case "exec":
			out.Probe.Exec = &v1.ExecAction{}
			es = decodeStrict(v, fp, out.Probe.Exec)
			handlers = append(handlers, k)
			handlerDecoded = handlerDecoded && es == nil
		default:
			es = field.ErrorList{unknownField(fp, k, probeFields)}
		}
		errs = append(errs, es...)
	}
	if _, ok := obj.values["container"]; !ok {
		errs = append(errs, field.Required(path.Child("container"), "the name of a container of the pod"))
	}
	if _, ok := obj.values["type"]; !ok {
		errs = append(errs, field.Required(path.Child("type"), "one of liveness, readiness, startup"))
	}
	switch {
	case len(handlers) == 0:
		errs = append(errs, field.Required(path, "must specify a handler type (httpGet, tcpSocket, grpc, exec or plugin)"))
	case len(handlers) > 1:
		for _, h := range handlers[1:] {
			errs = append(errs, field.Forbidden(path.Child(h), "may not specify more than 1 handler type"))
		}
	case handlers[0] != "plugin" && handlerDecoded:
		probespec.Default(&out.Probe)
		errs = append(errs, probespec.ValidateHandler(&out.Probe.ProbeHandler, path)...)
		errs = append(errs, p.hosts(&out.Probe.ProbeHandler, path)...)
	}

	typeOK := false
	if haveType {
		t, err := runtime.ParseProbeType(typeName)
		if err != nil {
			errs = append(errs, field.NotSupported(path.Child("type"), typeName, probeTypeNames))
		} else {
			out.Type, typeOK = t, true
		}
	}
	containerOK := false
	var ctr *v1.Container
	if haveContainer {
		ctr, es = p.container(out.Container, path.Child("container"))
		errs = append(errs, es...)
		containerOK = es == nil
	}
	if containerOK && typeOK {
		fp := path.Child("type")
		if runtime.ProbeOf(ctr, out.Type) != nil {
			errs = append(errs, field.Forbidden(fp, fmt.Sprintf("container %q of pod %s already has a %sProbe in its spec; a container has at most one probe of each type",
				out.Container, p.podRef, out.Type.Lower())))
		}
		k := probeKey{out.Container, out.Type}
		if first, dup := p.seen[k]; dup {
			e := field.Duplicate(fp, typeName)
			e.Detail = fmt.Sprintf("container %q of pod %s already has a custom %s probe at index %d", out.Container, p.podRef, out.Type.Lower(), first)
			errs = append(errs, e)
		} else {
			p.seen[k] = index
		}
	}
	if name := out.Plugin.Name; name != "" && !runtime.IsBuiltinKind(name) && p.opts.KnownKind != nil && !p.opts.KnownKind(name) {
		e := field.NotFound(path.Child("plugin", "name"), name)
		e.Detail = fmt.Sprintf("no plugin serves probe kind %q (pod %s, container %q)", name, p.podRef, out.Container)
		errs = append(errs, e)
	}
	probespec.DefaultTiming(&out.Probe)
	t := out.Type
	if !typeOK {
		// Without a valid type only the type-independent rules apply.
		t = noType
	}
	errs = append(errs, probespec.ValidateTiming(&out.Probe, t, path)...)
	msErrs := ValidateMilliseconds(&out.Probe, out.Milliseconds, path)
	errs = append(errs, msErrs...)
	spErrs := ValidateStatePeriods(&out.Probe, out.Periods, path)
	errs = append(errs, spErrs...)
	if len(msErrs) == 0 && len(spErrs) == 0 {
		errs = append(errs, p.opts.Limits.validatePeriods(&out, path)...)
	}
	if out.Expect != nil && handlerDecoded && len(handlers) == 1 {
		errs = append(errs, validateExpect(&out, path)...)
	}
	if !containerOK {
		ctr = nil
	}
	return out, ctr, typeOK, errs
}

// validatePeriods refuses a period under the node's shortest
// (Limits.MinPeriod): the probe's period and each of its periods by state,
// each error naming its field.
func (l Limits) validatePeriods(p *Probe, path *field.Path) field.ErrorList {
	if l.MinPeriod <= 0 {
		return nil
	}
	var errs field.ErrorList
	for _, f := range periodFields(p) {
		if !f.set || f.period >= l.MinPeriod {
			continue
		}
		fp, value := path.Child(f.seconds), any(f.s)
		if f.ms != 0 {
			fp, value = path.Child(f.milliseconds), f.ms
		}
		errs = append(errs, field.Invalid(fp, value, fmt.Sprintf("the %s is %s; this node's shortest is %s (%s)", f.name, f.period, l.MinPeriod, l.MinPeriodFlag)))
	}
	return errs
}

// periodField is one of a probe's periods with the fields that set it.
type periodField struct {
	name                  string // "period", "unhealthy period", ...
	seconds, milliseconds string // the annotation's field names
	s, ms                 int32
	period                time.Duration
	set                   bool
}

// periodFields lists the probe's period (always set) and its periods by
// state (set when either field is).
func periodFields(p *Probe) []periodField {
	sp := p.Periods
	return []periodField{
		{"period", "periodSeconds", "periodMilliseconds", p.Probe.PeriodSeconds, p.Milliseconds.Period, p.Timing().Period, p.Probe.PeriodSeconds >= 0},
		{"unhealthy period", "unhealthyPeriodSeconds", "unhealthyPeriodMilliseconds", sp.UnhealthySeconds, sp.UnhealthyMilliseconds, sp.Unhealthy(),
			sp.UnhealthySeconds != 0 || sp.UnhealthyMilliseconds != 0},
		{"transition period", "transitionPeriodSeconds", "transitionPeriodMilliseconds", sp.TransitionSeconds, sp.TransitionMilliseconds, sp.Transition(),
			sp.TransitionSeconds != 0 || sp.TransitionMilliseconds != 0},
	}
}

// validateExpect checks httpGet.expect or tcpSocket.expect of a probe
// whose handler decoded (runtime/expect.Validate), naming each field.
func validateExpect(p *Probe, path *field.Path) field.ErrorList {
	handler, http := "tcpSocket", p.Probe.HTTPGet != nil
	https := http && p.Probe.HTTPGet.Scheme == v1.URISchemeHTTPS
	if http {
		handler = "httpGet"
	}
	var errs field.ErrorList
	for _, e := range expect.Validate(p.Expect, http, https, p.Timing().Timeout) {
		errs = append(errs, field.Invalid(path.Child(handler, "expect", e.Field), e.Value, e.Detail))
	}
	return errs
}

// decodeWithExpect decodes a built-in handler strictly into v, as
// decodeStrict, except for its "expect" key and, when
// keepAlive is not nil (httpGet), its "keepAlive" key (a boolean: the
// probe keeps its connection between runs, plugins/http), which
// v1's handlers lack: expect is decoded, strictly too, into an
// expect.Expect, so that v1.Probe never carries either (a spec probe
// cannot have them).
func decodeWithExpect(raw json.RawMessage, path *field.Path, v any, keepAlive **bool) (*expect.Expect, field.ErrorList) {
	obj, errs := decodeObject(raw, path)
	if errs != nil && len(obj.keys) == 0 {
		return nil, errs
	}
	ka, hasKA := obj.values["keepAlive"]
	hasKA = hasKA && keepAlive != nil
	if hasKA {
		switch b := string(bytes.TrimSpace(ka)); b {
		case "true", "false":
			on := b == "true"
			*keepAlive = &on
		default:
			errs = append(errs, field.Invalid(path.Child("keepAlive"), shorten(b), "must be true or false"))
		}
	}
	ex, ok := obj.values["expect"]
	if !ok && !hasKA {
		return nil, decodeStrict(raw, path, v)
	}
	var rest bytes.Buffer
	rest.WriteByte('{')
	for _, k := range obj.keys {
		if k == "expect" || (k == "keepAlive" && keepAlive != nil) {
			continue
		}
		if rest.Len() > 1 {
			rest.WriteByte(',')
		}
		name, _ := json.Marshal(k)
		rest.Write(name)
		rest.WriteByte(':')
		rest.Write(obj.values[k])
	}
	rest.WriteByte('}')
	errs = append(errs, decodeStrict(rest.Bytes(), path, v)...)
	if !ok {
		return nil, errs
	}
	out := &expect.Expect{}
	es := decodeStrict(ex, path.Child("expect"), out)
	errs = append(errs, es...)
	if es != nil {
		return nil, errs
	}
	return out, errs
}

// hosts applies the egress rule (Options.Egress) to the handler's host
// field: in cluster mode a probe connects only to its pod's IP unless the
// operator allows more.
func (p *parser) hosts(h *v1.ProbeHandler, path *field.Path) field.ErrorList {
	var host string
	var fp *field.Path
	switch {
	case h.HTTPGet != nil:
		host, fp = h.HTTPGet.Host, path.Child("httpGet", "host")
	case h.TCPSocket != nil:
		host, fp = h.TCPSocket.Host, path.Child("tcpSocket", "host")
	default:
		return nil
	}
	if err := p.opts.Egress.CheckHost(host); err != nil {
		return field.ErrorList{field.Forbidden(fp, err.Error())}
	}
	return nil
}

// noType is a ProbeType outside the three valid ones: ValidateTiming applies
// no type-specific rule to it.
const noType = runtime.ProbeType(255)

func (p *parser) plugin(raw json.RawMessage, path *field.Path) (runtime.PluginAction, field.ErrorList) {
	var out runtime.PluginAction
	obj, errs := decodeObject(raw, path)
	if errs != nil {
		return out, errs
	}
	var es field.ErrorList
	haveName := false
	for _, k := range obj.keys {
		v := obj.values[k]
		fp := path.Child(k)
		switch k {
		case "name":
			out.Name, es = decodeString(v, fp)
			haveName = es == nil
		case "port":
			out.Port, es = decodePort(v, fp)
		case "params":
			out.Params, es = decodeParams(v, fp)
		default:
			es = field.ErrorList{unknownField(fp, k, pluginFields)}
		}
		errs = append(errs, es...)
	}
	switch {
	case !haveName && obj.values["name"] == nil:
		errs = append(errs, field.Required(path.Child("name"), "the probe kind a plugin serves"))
	case !haveName:
	case out.Name == "":
		errs = append(errs, field.Required(path.Child("name"), "the probe kind a plugin serves"))
	case runtime.IsBuiltinKind(out.Name): // a plugin cannot be named after a v1.Probe handler
		errs = append(errs, field.Invalid(path.Child("name"), out.Name,
			"is a built-in probe kind; declare it as the container's own probe (exec, httpGet, tcpSocket, grpc) instead"))
	}
	return out, errs
}

// container finds the named container: a regular container or a restartable
// init container. Regular init containers may not be probed (spec 1.3).
func (p *parser) container(name string, path *field.Path) (*v1.Container, field.ErrorList) {
	if name == "" {
		return nil, field.ErrorList{field.Required(path, "the name of a container of the pod")}
	}
	for i := range p.pod.Spec.Containers {
		if p.pod.Spec.Containers[i].Name == name {
			return &p.pod.Spec.Containers[i], nil
		}
	}
	for i := range p.pod.Spec.InitContainers {
		c := &p.pod.Spec.InitContainers[i]
		if c.Name != name {
			continue
		}
		if runtime.IsRestartable(c) {
			return c, nil
		}
		return nil, field.ErrorList{field.Invalid(path, name,
			fmt.Sprintf("container %q of pod %s is an init container without restartPolicy=Always; it may not have probes", name, p.podRef))}
	}
	return nil, field.ErrorList{field.Invalid(path, name, fmt.Sprintf("pod %s has no container %q", p.podRef, name))}
}

func podRef(pod *v1.Pod) string {
	ns := pod.Namespace
	if ns == "" {
		ns = "default"
	}
	return ns + "/" + pod.Name
}

var (
	probeFields = []string{"container", "type", "initialDelaySeconds", "timeoutSeconds", "periodSeconds",
		"initialDelayMilliseconds", "timeoutMilliseconds", "periodMilliseconds", "unhealthyPeriodSeconds", "unhealthyPeriodMilliseconds",
		"transitionPeriodSeconds", "transitionPeriodMilliseconds", "successThreshold", "failureThreshold", "terminationGracePeriodSeconds",
		"plugin", "httpGet", "tcpSocket", "grpc", "exec"}
	pluginFields = []string{"name", "port", "params"}
)

// unknownField reports key as unknown, suggesting the known field it most
// likely misspells.
func unknownField(path *field.Path, key string, known []string) *field.Error {
	detail := "unknown field"
	if s := suggest.Closest(key, known); s != "" {
		detail += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return field.Invalid(path, key, detail)
}

// object is a decoded JSON object: its keys in document order and values.
type object struct {
	keys   []string
	values map[string]json.RawMessage
}

// decodeObject decodes a JSON object, rejecting other values and duplicate
// keys.
func decodeObject(raw json.RawMessage, path *field.Path) (object, field.ErrorList) {
	obj := object{values: map[string]json.RawMessage{}}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return obj, field.ErrorList{field.Invalid(path, shorten(string(raw)), "must be a JSON object")}
	}
	var errs field.ErrorList
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return obj, field.ErrorList{field.Invalid(path, shorten(string(raw)), "must be a JSON object: "+jsonMessage(err))}
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return obj, field.ErrorList{field.Invalid(path, shorten(string(raw)), "must be a JSON object: "+jsonMessage(err))}
		}
		if _, dup := obj.values[k]; dup {
			errs = append(errs, field.Duplicate(path.Child(k), k))
			continue
		}
		obj.keys = append(obj.keys, k)
		obj.values[k] = v
	}
	return obj, errs
}

func decodeString(raw json.RawMessage, path *field.Path) (string, field.ErrorList) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", field.ErrorList{field.Invalid(path, shorten(string(raw)), "must be a string")}
	}
	return s, nil
}

func decodeInt32(raw json.RawMessage, path *field.Path) (int32, field.ErrorList) {
	n, errs := decodeInt(raw, path, 32)
	return int32(n), errs
}

// decodeInt decodes a JSON integer that fits bits bits.
func decodeInt(raw json.RawMessage, path *field.Path, bits int) (int64, field.ErrorList) {
	s := strings.TrimSpace(string(raw))
	n, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		return 0, field.ErrorList{field.Invalid(path, shorten(s), fmt.Sprintf("must be an integer (%d-bit)", bits))}
	}
	return n, nil
}

// decodePort decodes a port: a JSON integer (0 meaning no port, else
// 1-65535) or a string holding a port name (IANA_SVC_NAME, spec 1.3). A
// string of digits is a name, not a number (spec 1.4), and so is invalid.
func decodePort(raw json.RawMessage, path *field.Path) (intstr.IntOrString, field.ErrorList) {
	if len(raw) > 0 && raw[0] == '"' {
		name, errs := decodeString(raw, path)
		if errs != nil {
			return intstr.IntOrString{}, errs
		}
		for _, msg := range validation.IsValidPortName(name) {
			errs = append(errs, field.Invalid(path, name, msg))
		}
		return intstr.FromString(name), errs
	}
	n, errs := decodeInt(raw, path, 32)
	if errs != nil {
		return intstr.IntOrString{}, field.ErrorList{field.Invalid(path, shorten(string(raw)), "must be a port number or a port name")}
	}
	if n != 0 {
		for _, msg := range validation.IsValidPortNum(int(n)) {
			errs = append(errs, field.Invalid(path, n, msg))
		}
	}
	return intstr.FromInt32(int32(n)), errs
}

// decodeParams decodes an object whose values must all be strings.
func decodeParams(raw json.RawMessage, path *field.Path) (map[string]string, field.ErrorList) {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	obj, errs := decodeObject(raw, path)
	if errs != nil && len(obj.keys) == 0 {
		return nil, errs
	}
	out := make(map[string]string, len(obj.keys))
	keys := append([]string(nil), obj.keys...)
	sort.Strings(keys)
	for _, k := range keys {
		s, es := decodeString(obj.values[k], path.Key(k))
		errs = append(errs, es...)
		out[k] = s
	}
	return out, errs
}

// decodeStrict decodes a built-in handler into v as the API server's strict
// field validation does: case-sensitive keys, unknown and duplicate fields
// are errors naming the field.
func decodeStrict(raw json.RawMessage, path *field.Path, v any) field.ErrorList {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.TrimSpace(raw)[0] != '{' {
		return field.ErrorList{field.Invalid(path, shorten(string(raw)), "must be a JSON object")}
	}
	strict, err := sigsjson.UnmarshalStrict(raw, v, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return field.ErrorList{field.Invalid(path, shorten(string(raw)), jsonMessage(err))}
	}
	var errs field.ErrorList
	for _, e := range strict {
		errs = append(errs, field.Invalid(path, shorten(string(raw)), jsonMessage(e)))
	}
	return errs
}

// jsonMessage strips the "json: " prefix of encoding/json errors.
func jsonMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "json: ")
}

// shorten bounds a raw value quoted in an error message (bound.Cut: both
// ends, at character boundaries).
func shorten(s string) string { return bound.Cut(s, quotedBytes) }

// quotedBytes bounds a raw value quoted in an error message.
const quotedBytes = 64
