package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	"github.com/probed/probed/manager/podprobes"
)

// objCtx locates an object in the file.
type objCtx struct {
	doc, line, item int
	// prefix is the path of the object inside the document: "" or
	// "items[N]".
	prefix string
	// itemAPIVersion and itemKind are the defaults of a typed list's items
	// (PodList: v1, Pod).
	itemAPIVersion, itemKind string
}

func (c objCtx) path(p string) string { return joinPath(c.prefix, p) }

// workload is a decoded object that yields a pod.
type workload struct {
	apiVersion, kind string
	meta             *metav1.ObjectMeta
	pod              *v1.Pod             // a Pod, or nil
	template         *v1.PodTemplateSpec // a workload's template, or nil
	templatePath     string              // "spec.template", ...
	// restartPolicies are the pod restartPolicy values the workload kind
	// allows (nil: any).
	restartPolicies []v1.RestartPolicy
	// selector is checked against the template's labels when checkSelector.
	checkSelector bool
	selector      *metav1.LabelSelector
}

// sourcePath maps a pod-relative field path to the path in the document:
// the pod's name and namespace come from the workload's metadata, the rest
// from its template.
func (w *workload) sourcePath(p string) string {
	if w.template == nil || p == "metadata.name" || p == "metadata.namespace" {
		return p
	}
	return joinPath(w.templatePath, p)
}

// workloadKinds are the kinds probed runs, by "apiVersion/kind".
var workloadKinds = map[string]struct {
	goType reflect.Type
	decode func(js []byte) (*workload, []error, error)
}{
	"v1/Pod": {reflect.TypeFor[v1.Pod](), func(js []byte) (*workload, []error, error) {
		o, strict, err := decodeTyped[v1.Pod](js)
		return &workload{meta: &o.ObjectMeta, pod: o}, strict, err
	}},
	"v1/ReplicationController": {reflect.TypeFor[v1.ReplicationController](), func(js []byte) (*workload, []error, error) {
		o, strict, err := decodeTyped[v1.ReplicationController](js)
		return &workload{meta: &o.ObjectMeta, template: o.Spec.Template, templatePath: "spec.template",
			restartPolicies: []v1.RestartPolicy{v1.RestartPolicyAlways}}, strict, err
	}},
	"apps/v1/Deployment": {reflect.TypeFor[appsv1.Deployment](), func(js []byte) (*workload, []error, error) {
		o, strict, err := decodeTyped[appsv1.Deployment](js)
		return &workload{meta: &o.ObjectMeta, template: &o.Spec.Template, templatePath: "spec.template",
			restartPolicies: []v1.RestartPolicy{v1.RestartPolicyAlways}, checkSelector: true, selector: o.Spec.Selector}, strict, err
	}},
	"apps/v1/StatefulSet": {reflect.TypeFor[appsv1.StatefulSet](), func(js []byte) (*workload, []error, error) {
		o, strict, err := decodeTyped[appsv1.StatefulSet](js)
		return &workload{meta: &o.ObjectMeta, template: &o.Spec.Template, templatePath: "spec.template",
			restartPolicies: []v1.RestartPolicy{v1.RestartPolicyAlways}, checkSelector: true, selector: o.Spec.Selector}, strict, err
	}},
	"apps/v1/DaemonSet": {reflect.TypeFor[appsv1.DaemonSet](), func(js []byte) (*workload, []error, error) {
		o, strict, err := decodeTyped[appsv1.DaemonSet](js)
		return &workload{meta: &o.ObjectMeta, template: &o.Spec.Template, templatePath: "spec.template",
			restartPolicies: []v1.RestartPolicy{v1.RestartPolicyAlways}, checkSelector: true, selector: o.Spec.Selector}, strict, err
	}},
	"apps/v1/ReplicaSet": {reflect.TypeFor[appsv1.ReplicaSet](), func(js []byte) (*workload, []error, error) {
		o, strict, err := decodeTyped[appsv1.ReplicaSet](js)
		return &workload{meta: &o.ObjectMeta, template: &o.Spec.Template, templatePath: "spec.template",
			restartPolicies: []v1.RestartPolicy{v1.RestartPolicyAlways}, checkSelector: true, selector: o.Spec.Selector}, strict, err
	}},
	"batch/v1/Job": {reflect.TypeFor[batchv1.Job](), func(js []byte) (*workload, []error, error) {
		o, strict, err := decodeTyped[batchv1.Job](js)
		return &workload{meta: &o.ObjectMeta, template: &o.Spec.Template, templatePath: "spec.template",
			restartPolicies: []v1.RestartPolicy{v1.RestartPolicyOnFailure, v1.RestartPolicyNever}}, strict, err
	}},
	"batch/v1/CronJob": {reflect.TypeFor[batchv1.CronJob](), func(js []byte) (*workload, []error, error) {
		o, strict, err := decodeTyped[batchv1.CronJob](js)
		return &workload{meta: &o.ObjectMeta, template: &o.Spec.JobTemplate.Spec.Template, templatePath: "spec.jobTemplate.spec.template",
			restartPolicies: []v1.RestartPolicy{v1.RestartPolicyOnFailure, v1.RestartPolicyNever}}, strict, err
	}},
}

// servedVersion names the served apiVersion of each workload kind, for the
// error about an apiVersion that is no longer served.
var servedVersion = map[string]string{}

func init() {
	for k := range workloadKinds {
		i := strings.LastIndexByte(k, '/')
		servedVersion[k[i+1:]] = k[:i]
	}
}

// sameGroup reports whether apiVersion is another version of served's API
// group; the extensions group once served what apps serves now.
func sameGroup(apiVersion, served string) bool {
	group := func(av string) string {
		if i := strings.IndexByte(av, '/'); i >= 0 {
			return av[:i]
		}
		return ""
	}
	g, sg := group(apiVersion), group(served)
	return g == sg || (g == "extensions" && sg == "apps")
}

// templateKinds are kinds probed knowingly does not run although they carry
// a pod template.
var templateKinds = map[string]bool{"v1/PodTemplate": true}

// supportedKinds lists the kinds for error messages.
const supportedKinds = "v1 Pod, apps/v1 Deployment, StatefulSet, DaemonSet, ReplicaSet, batch/v1 Job, CronJob, v1 ReplicationController"

func decodeTyped[T any](js []byte) (*T, []error, error) {
	o := new(T)
	strict, err := sigsjson.UnmarshalStrict(js, o)
	return o, strict, err
}

// object handles one decoded JSON object: a workload, a list or something
// to skip.
func (d *decoder) object(js []byte, c objCtx, depth int) {
	base := func() *Error { return &Error{Doc: c.doc, Line: c.line} }
	if t := bytes.TrimSpace(js); len(t) == 0 || t[0] != '{' {
		e := base()
		e.Field = c.prefix
		e.Detail = "an object (with apiVersion and kind) is required, found " + describeJSON(t)
		d.fail(e)
		return
	}
	var hdr map[string]json.RawMessage
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &hdr); err != nil {
		e := base()
		e.Field, e.Detail, e.Err = c.prefix, "invalid JSON: "+strings.TrimPrefix(err.Error(), "json: "), err
		d.fail(e)
		return
	}
	apiVersion, kind := c.itemAPIVersion, c.itemKind
	for _, f := range []struct {
		key string
		dst *string
	}{{"apiVersion", &apiVersion}, {"kind", &kind}} {
		raw, ok := hdr[f.key]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, f.dst); err != nil {
			e := base()
			e.Field, e.Detail = c.path(f.key), "Invalid value: "+describeJSON(raw)+": must be a string"
			d.fail(e)
			return
		}
	}
	ns, name := objectName(hdr["metadata"])
	ref := ""
	if name != "" {
		ref = ns + "/" + name
	}
	if apiVersion == "" || kind == "" {
		missing := "apiVersion"
		if apiVersion != "" {
			missing = "kind"
		}
		e := base()
		e.Pod, e.Field, e.Detail = ref, c.path(missing), "Required value: every object needs apiVersion and kind"
		d.fail(e)
		return
	}
	key := apiVersion + "/" + kind

	if _, hasItems := hdr["items"]; kind == "List" || (strings.HasSuffix(kind, "List") && hasItems) {
		d.list(js, apiVersion, kind, c, depth)
		return
	}
	if wk, ok := workloadKinds[key]; ok {
		d.workload(js, apiVersion, kind, wk.goType, wk.decode, c)
		return
	}
	if served, ok := servedVersion[kind]; ok && sameGroup(apiVersion, served) {
		e := base()
		e.Kind, e.Pod, e.Field = kind, ref, c.path("apiVersion")
		e.Detail = fmt.Sprintf("Unsupported value: %q: the API server serves %s as %s only; probed reads %s", apiVersion, kind, served, supportedKinds)
		d.fail(e)
		return
	}
	if shape := podShape(js); shape != "" && !templateKinds[key] {
		e := base()
		e.Kind, e.Pod, e.Field = kind, ref, c.path(shape)
		e.Detail = fmt.Sprintf("%s %s has a pod template, but probed does not know this kind and would not probe it; it reads %s", apiVersion, kind, supportedKinds)
		d.fail(e)
		return
	}
	d.res.Skipped = append(d.res.Skipped, Skipped{Doc: c.doc, Line: c.line, Item: c.item,
		APIVersion: apiVersion, Kind: kind, Namespace: ns, Name: name, Reason: skipReason(key, kind)})
}

// skipReason says why an object of a kind probed does not run yields no pod.
func skipReason(key, kind string) string {
	if templateKinds[key] {
		return "kind " + kind + " holds a pod template that nothing runs; probed reads " + supportedKinds
	}
	return "kind " + kind + " holds no pod template"
}

// objectName reads metadata.namespace and metadata.name, best effort. The
// namespace defaults to "default".
func objectName(raw json.RawMessage) (ns, name string) {
	var m struct {
		Name      any `json:"name"`
		Namespace any `json:"namespace"`
	}
	_ = sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &m)
	name, _ = m.Name.(string)
	ns, _ = m.Namespace.(string)
	if ns == "" {
		ns = "default"
	}
	return ns, name
}

func describeJSON(raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "invalid JSON"
	}
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return describeValue(v)
	case nil:
		return "null"
	}
	return string(raw)
}

// podShape returns the path of a pod spec's containers inside the object, or
// "". It looks where the known workloads keep it and, failing that, for any
// list of named objects called containers under spec (a few levels deep).
func podShape(js []byte) string {
	var v any
	if sigsjson.UnmarshalCaseSensitivePreserveInts(js, &v) != nil {
		return ""
	}
	for _, p := range []string{
		"spec.containers",
		"spec.template.spec.containers",
		"spec.jobTemplate.spec.template.spec.containers",
		"template.spec.containers",
	} {
		if _, ok := valueAt(v, splitPath(p)).([]any); ok {
			return p
		}
	}
	m, _ := v.(map[string]any)
	return findContainers(m["spec"], "spec", 0)
}

func findContainers(v any, path string, depth int) string {
	if depth > 6 {
		return ""
	}
	switch x := v.(type) {
	case map[string]any:
		if list, ok := x["containers"].([]any); ok && len(list) > 0 {
			if c, ok := list[0].(map[string]any); ok {
				if _, named := c["name"]; named {
					return joinPath(path, "containers")
				}
			}
		}
		for _, k := range sortedKeys(x) {
			if p := findContainers(x[k], joinPath(path, k), depth+1); p != "" {
				return p
			}
		}
	case []any:
		for i, e := range x {
			if i >= 16 {
				break
			}
			if p := findContainers(e, fmt.Sprintf("%s[%d]", path, i), depth+1); p != "" {
				return p
			}
		}
	}
	return ""
}

// list decodes a List (or a typed list such as PodList) and handles its
// items.
func (d *decoder) list(js []byte, apiVersion, kind string, c objCtx, depth int) {
	base := func() *Error { return &Error{Doc: c.doc, Line: c.line, Kind: kind} }
	if depth > 0 {
		e := base()
		e.Field, e.Detail = c.prefix, "a List may not contain another List"
		d.fail(e)
		return
	}
	var l struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ListMeta   `json:"metadata"`
		Items      []json.RawMessage `json:"items"`
	}
	strict, err := sigsjson.UnmarshalStrict(js, &l)
	if err != nil {
		e := base()
		e.Detail, e.Err = "invalid "+kind+": "+strings.TrimPrefix(err.Error(), "json: "), err
		d.fail(e)
		return
	}
	for _, s := range strict {
		e := base()
		e.Field, e.Detail, e.Err = c.path(strictPath(s)), strictDetail(s, reflect.TypeOf(l), strictPath(s)), s
		d.fail(e)
	}
	if len(strict) > 0 {
		return
	}
	itemAPIVersion, itemKind := "", ""
	if kind != "List" {
		itemAPIVersion, itemKind = apiVersion, strings.TrimSuffix(kind, "List")
	}
	for i, item := range l.Items {
		d.object(item, objCtx{
			doc: c.doc, line: c.line, item: i,
			prefix:         c.path(fmt.Sprintf("items[%d]", i)),
			itemAPIVersion: itemAPIVersion, itemKind: itemKind,
		}, depth+1)
	}
}

// strictPath returns the field path of a strict decoding error.
func strictPath(err error) string {
	if fp, ok := err.(interface{ FieldPath() string }); ok {
		return fp.FieldPath()
	}
	return ""
}

// strictDetail describes an unknown or duplicate field, suggesting the field
// an unknown key most likely misspells.
func strictDetail(err error, t reflect.Type, path string) string {
	segs := splitPath(path)
	key := ""
	if len(segs) > 0 {
		key = segs[len(segs)-1].name
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "unknown field"):
		detail := fmt.Sprintf("unknown field %q", key)
		if len(segs) > 0 {
			if s := suggestField(t, segs[:len(segs)-1], key); s != "" {
				detail += fmt.Sprintf(" (did you mean %q?)", s)
			}
		}
		return detail
	case strings.HasPrefix(msg, "duplicate field"):
		return fmt.Sprintf("duplicate field %q", key)
	}
	return msg
}

// workload decodes, builds, defaults and validates one pod-bearing object.
func (d *decoder) workload(js []byte, apiVersion, kind string, goType reflect.Type, decode func([]byte) (*workload, []error, error), c objCtx) {
	w, strict, err := decode(js)
	w.apiVersion, w.kind = apiVersion, kind
	ns, name := w.meta.Namespace, w.meta.Name
	if err != nil || name == "" {
		ns2, name2 := objectName(firstMetadata(js))
		if name == "" {
			name = name2
		}
		if ns == "" {
			ns = ns2
		}
	}
	if ns == "" {
		ns = "default"
	}
	ref := ""
	if name != "" {
		ref = ns + "/" + name
	}
	base := func() *Error { return &Error{Doc: c.doc, Line: c.line, Kind: kind, Pod: ref} }

	var generic any
	genericDoc := func() any {
		if generic == nil {
			_ = sigsjson.UnmarshalCaseSensitivePreserveInts(js, &generic)
		}
		return generic
	}
	if err != nil {
		e := base()
		e.Err = err
		path, bad, leafErr, found := locate(goType, genericDoc(), "")
		if !found {
			e.Detail = "invalid " + kind + ": " + strings.TrimPrefix(err.Error(), "json: ")
		} else {
			e.Field = c.path(path)
			e.Container = containerOf(genericDoc(), path)
			e.Detail = "Invalid value: " + describeValue(bad) + ": " + leafMessage(leafErr)
			if s, ok := bad.(string); ok {
				if m := placeholder.FindString(s); m != "" {
					e.Detail += " (" + m + " looks like an unfilled template placeholder)"
				}
			}
		}
		d.fail(e)
		return
	}
	for _, s := range strict {
		p := strictPath(s)
		e := base()
		e.Field, e.Container, e.Detail, e.Err = c.path(p), containerOf(genericDoc(), p), strictDetail(s, goType, p), s
		d.fail(e)
	}
	if len(strict) > 0 {
		return
	}

	var pod *v1.Pod
	switch {
	case w.pod != nil:
		pod = w.pod
	case w.template == nil:
		e := base()
		e.Field, e.Detail = c.path(w.templatePath), "Required value: a pod template is required"
		d.fail(e)
		return
	default:
		pod = &v1.Pod{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{
				Name:        w.meta.Name,
				Namespace:   w.meta.Namespace,
				UID:         w.template.UID,
				Labels:      w.template.Labels,
				Annotations: w.template.Annotations,
			},
			Spec: w.template.Spec,
		}
	}
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	SetDefaults(pod)

	var errs []*Error
	addField := func(fe *field.Error) {
		e := base()
		e.Field = c.path(w.sourcePath(fe.Field))
		e.Container = podContainer(pod, fe.Field)
		e.Detail = fe.ErrorBody()
		e.Err = fe
		errs = append(errs, e)
	}
	for _, fe := range ValidatePod(pod) {
		addField(fe)
	}
	if len(w.restartPolicies) > 0 && !contains(w.restartPolicies, pod.Spec.RestartPolicy) {
		addField(field.NotSupported(field.NewPath("spec", "restartPolicy"), pod.Spec.RestartPolicy, w.restartPolicies))
	}
	// The pod's probes, worked out once for this version of the document
	// and carried with its entry (podprobes.Of: the annotation is read
	// there); every refusal is an error of the document.
	probes := podprobes.Of(pod, ProbesPolicy(d.opts.KnownPluginKind))
	for _, fe := range probes.Errors() {
		addField(fe)
	}
	if len(errs) > 0 {
		for _, e := range errs {
			d.fail(e)
		}
		return
	}

	var warnings []string
	if w.checkSelector {
		switch sel, selErr := metav1.LabelSelectorAsSelector(w.selector); {
		case w.selector == nil:
			warnings = append(warnings, c.path("spec.selector")+": Required value: the API server refuses a "+kind+
				" without a selector; probed loads its pod template anyway")
		case selErr != nil:
			warnings = append(warnings, c.path("spec.selector")+": Invalid value: "+selErr.Error()+
				"; the API server refuses it; probed loads the pod template anyway")
		case sel.Empty() || !sel.Matches(labels.Set(pod.Labels)):
			warnings = append(warnings, c.path("spec.selector")+": Invalid value: the selector does not match the template's labels; "+
				"the API server refuses it; probed loads the pod template anyway")
		}
	}
	for _, pw := range podWarnings(pod) {
		warnings = append(warnings, formatWarning(pw, c.path(w.sourcePath(pw.field))))
	}
	d.res.Entries = append(d.res.Entries, Entry{
		Pod:          pod,
		Source:       d.source,
		Doc:          c.doc,
		Line:         c.line,
		Item:         c.item,
		WorkloadKind: kind,
		WorkloadName: w.meta.Name,
		Warnings:     warnings,
		Probes:       probes,
	})
}

func firstMetadata(js []byte) json.RawMessage {
	var hdr map[string]json.RawMessage
	_ = sigsjson.UnmarshalCaseSensitivePreserveInts(js, &hdr)
	return hdr["metadata"]
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// podContainer returns the name of the container a pod-relative path such as
// spec.containers[2].livenessProbe points into, or "".
func podContainer(pod *v1.Pod, path string) string {
	segs := splitPath(path)
	if len(segs) < 3 || segs[0].name != "spec" || !segs[2].bracket {
		return ""
	}
	i, ok := atoi(segs[2].name)
	if !ok {
		return ""
	}
	var list []v1.Container
	switch segs[1].name {
	case "containers":
		list = pod.Spec.Containers
	case "initContainers":
		list = pod.Spec.InitContainers
	}
	if i < len(list) {
		return list[i].Name
	}
	return ""
}

// leafMessage words the error of decoding one value.
func leafMessage(err error) string {
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		return fmt.Sprintf("expected %s, found %s", goTypeName(te.Type), te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func goTypeName(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch deref(t).Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}
