package manifest

import (
	"strconv"
	"strings"
)

// Error is one problem found in a manifest file. Every error Decode and
// LoadFile return is an *Error.
//
// Error() joins the parts that are known, for example:
//
//	manifests/web.yaml: document 2: pod default/web: container "app": spec.containers[0].readinessProbe.successThreshold: Invalid value: 2: must be 1
//
// For a workload the object part names the workload ("deployment
// default/web") and Field is the path inside the workload
// (spec.template.spec.containers[0]...); inside a List it starts with
// items[N].
type Error struct {
	// File is the source the data came from (the path given to LoadFile or
	// the source given to Decode).
	File string
	// Doc is the 1-based index of the YAML document (or JSON value) in the
	// file; 0 when the error concerns the whole file.
	Doc int
	// Line is the 1-based line in the file the problem is at, counted from
	// the start of the file (not of the document): for invalid YAML the
	// line the parser points at; for an error with a Field the line of
	// that field (or of the deepest part of its path the document has);
	// else the line the document starts on. 0 for the whole file.
	Line int
	// Kind is the object's kind ("Pod", "Deployment", ...); "" when unknown.
	Kind string
	// Pod is "namespace/name" of the pod (for a workload: its namespace and
	// name, which the pod built from its template takes); "" when unknown.
	Pod string
	// Container is the name of the container the problem is in, if any.
	Container string
	// Field is the path of the offending field in the document, e.g.
	// spec.containers[0].livenessProbe.httpGet.port; "" for the document.
	Field string
	// Detail says what is wrong, in the API server's words where it has
	// them ("Invalid value: 2: must be 1", "Required value", ...).
	Detail string
	// Err is the underlying error, if any.
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	file := e.File
	if file == "" {
		file = "<input>"
	}
	b.WriteString(file)
	if e.Doc > 0 {
		b.WriteString(": document ")
		b.WriteString(strconv.Itoa(e.Doc))
	}
	if e.Pod != "" {
		b.WriteString(": ")
		if e.Kind == "" {
			b.WriteString("pod")
		} else {
			b.WriteString(strings.ToLower(e.Kind))
		}
		b.WriteString(" ")
		b.WriteString(e.Pod)
	}
	if e.Container != "" {
		b.WriteString(": container ")
		b.WriteString(strconv.Quote(e.Container))
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Skipped describes a document (or List item) that holds no pod: an object of
// a kind probed does not run (Service, ConfigMap, Secret, a custom resource,
// ...), or, with Doc 0, a whole file that holds no object at all (empty, only
// comments, only `---` markers, an empty List).
type Skipped struct {
	// Doc is the 1-based document index (0: the whole file); Line the line
	// it starts on (0 for the whole file).
	Doc, Line int
	// Item is the index in the List's items, or -1.
	Item int
	// APIVersion, Kind, Namespace and Name identify the object; empty for
	// a whole file.
	APIVersion, Kind, Namespace, Name string
	// Reason says why nothing is probed, for the user: "kind Secret holds
	// no pod template", "the file holds no object (...)".
	Reason string
}

// String is "document N: skipped KIND NAMESPACE/NAME: REASON", or
// "skipped: REASON" for a whole file.
func (s Skipped) String() string {
	var b strings.Builder
	if s.Doc > 0 {
		b.WriteString("document ")
		b.WriteString(strconv.Itoa(s.Doc))
		if s.Item >= 0 {
			b.WriteString(" items[")
			b.WriteString(strconv.Itoa(s.Item))
			b.WriteString("]")
		}
		b.WriteString(": ")
	}
	b.WriteString("skipped")
	if s.Kind != "" {
		b.WriteString(" ")
		b.WriteString(s.Kind)
		if s.Name != "" {
			b.WriteString(" ")
			b.WriteString(s.Namespace)
			b.WriteString("/")
			b.WriteString(s.Name)
		}
	}
	b.WriteString(": ")
	b.WriteString(s.Reason)
	return b.String()
}

// segment is one step of a field path: a field name, or an index or key in
// brackets.
type segment struct {
	name    string
	bracket bool
}

// splitPath splits a field path such as
// spec.containers[0].resources.limits[memory] into its segments.
func splitPath(p string) []segment {
	var segs []segment
	for i := 0; i < len(p); {
		switch p[i] {
		case '.':
			i++
		case '[':
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				segs = append(segs, segment{name: p[i+1:], bracket: true})
				return segs
			}
			segs = append(segs, segment{name: p[i+1 : i+j], bracket: true})
			i += j + 1
		default:
			j := strings.IndexAny(p[i:], ".[")
			if j < 0 {
				j = len(p) - i
			}
			segs = append(segs, segment{name: p[i : i+j]})
			i += j
		}
	}
	return segs
}

// joinPath appends child to a field path, with a dot unless child starts
// with a bracket.
func joinPath(parent, child string) string {
	switch {
	case parent == "":
		return child
	case child == "":
		return parent
	case child[0] == '[':
		return parent + child
	}
	return parent + "." + child
}
