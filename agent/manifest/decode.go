package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime/fileread"
)

// DefaultMaxFileBytes is the default bound on the size of one manifest file:
// 8 MiB.
const DefaultMaxFileBytes = 8 << 20

// Options tune Decode and LoadFile. The zero value is ready to use.
type Options struct {
	// MaxFileBytes bounds the size of one file in bytes; a larger file is an
	// error naming the file and its size, and nothing of it is decoded. Zero
	// or negative means DefaultMaxFileBytes.
	MaxFileBytes int64
	// KnownPluginKind reports whether a plugin serves a custom probe kind
	// named in a pod's probed.io/probes annotation (see package customprobe).
	// nil accepts every kind name.
	KnownPluginKind func(kind string) bool
}

func (o Options) maxBytes() int64 {
	if o.MaxFileBytes <= 0 {
		return DefaultMaxFileBytes
	}
	return o.MaxFileBytes
}

// Entry is one pod read from a manifest: a Pod document, or the pod template
// of a workload.
type Entry struct {
	// Pod is the pod, API defaults applied (SetDefaults) and validated
	// (ValidatePod). For a workload it is named after the workload, in the
	// workload's namespace, with the template's labels, annotations and
	// spec. The namespace defaults to "default"; metadata.uid is left as
	// given (usually empty: the caller assigns UIDs).
	Pod *v1.Pod
	// Source is the file path (LoadFile) or the source name (Decode).
	Source string
	// Doc is the 1-based index of the YAML document (or JSON value) in the
	// file, and Line the 1-based line it starts on.
	Doc, Line int
	// Item is the index of the object in a List's items, or -1.
	Item int
	// WorkloadKind and WorkloadName identify the object the pod came from:
	// "Pod" and the pod's name for a Pod, else the workload's kind
	// ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job",
	// "CronJob", "ReplicationController") and name.
	WorkloadKind, WorkloadName string
	// Warnings are findings that do not stop the pod from loading but will
	// not work as written (a named probe port the container does not
	// declare, BR-20; an unfilled template placeholder; a workload the API
	// server would refuse for reasons that do not touch probes, such as a
	// Deployment without spec.selector). Each names the container (when
	// there is one) and the field.
	Warnings []string
	// Probes are the pod's probes, worked out once as the document was
	// decoded (ProbesPolicy: the spec's and the annotation's; an entry has
	// no refused probe, a refusal being an error of its document). They
	// point into Pod's containers; a copy of Pod with the same spec may
	// use them (source.NewPod).
	Probes *podprobes.View
}

// ProbesPolicy is manifest mode's rule of which of a pod's probes are
// probed's (podprobes.Policy): the containers' own, the probed.io/probes
// annotation's, whose plugin kinds knownKind must know (nil: any kind),
// and those the offload webhook moved out of the spec (a pod read back
// from a cluster, `kubectl get pod -o yaml`, runs them as the cluster's
// agent does: podprobes.Offloaded).
func ProbesPolicy(knownKind func(string) bool) podprobes.Policy {
	opts := customprobe.Options{KnownKind: knownKind}
	return podprobes.Policy{Annotation: opts, Transforms: []podprobes.Transform{podprobes.Offloaded(opts)}}
}

// Result is everything Decode found in one file.
type Result struct {
	// Entries are the pods, in file order.
	Entries []Entry
	// Skipped are the documents and List items of kinds probed does not
	// run (Service, ConfigMap, custom resources without a pod template,
	// ...). Empty documents are neither entries nor skipped.
	Skipped []Skipped
	// Errors are *Error values, in file order. A document with errors
	// yields no entry; the other documents are unaffected.
	Errors []error
}

// Decode reads the pods of one manifest file's content; source names the
// file in entries and errors. See DecodeAll.
func Decode(data []byte, source string, opts Options) ([]Entry, []error) {
	r := DecodeAll(data, source, opts)
	return r.Entries, r.Errors
}

// LoadFile reads the file at path and decodes it. See DecodeAll.
func LoadFile(path string, opts Options) ([]Entry, []error) {
	r := LoadFileAll(path, opts)
	return r.Entries, r.Errors
}

// LoadFileAll reads the file at path, refusing anything that is not a
// regular file (a FIFO, a device such as /dev/zero, a socket, a directory;
// symlinks followed) and files larger than Options.MaxFileBytes, without
// blocking on the open and without reading more than the limit (package
// runtime/fileread), and decodes it with DecodeAll.
func LoadFileAll(path string, opts Options) *Result {
	data, err := ReadFile(path, opts)
	if err != nil {
		return &Result{Errors: []error{err}}
	}
	return DecodeAll(data, path, opts)
}

// ReadFile reads the manifest file at path as LoadFileAll does, without
// decoding it. The error is an *Error for the whole file.
func ReadFile(path string, opts Options) ([]byte, error) {
	data, err := fileread.ReadFile(path, opts.maxBytes())
	if err == nil {
		return data, nil
	}
	detail := err.Error()
	var fe *fileread.Error
	if errors.As(err, &fe) {
		detail = fe.Detail
		if errors.Is(err, fileread.ErrTooLarge) {
			detail += " (Options.MaxFileBytes)"
		}
	}
	return nil, &Error{File: path, Detail: detail, Err: err}
}

func tooLarge(size, max int64) string {
	return fmt.Sprintf("file is %d bytes, more than the limit of %d bytes (Options.MaxFileBytes)", size, max)
}

// DecodeAll reads the pods of one manifest file's content.
//
// Input: YAML or JSON; several YAML documents separated by `---` lines (or
// ended by `...`), or several concatenated JSON values. Empty documents
// (nothing, or only comments) are passed over; a file that yields no entry,
// no error and no skipped object (empty, only comments or `---` markers, an
// empty List) gets one Result.Skipped with Doc 0 saying so, so that no file
// is silently without pods. A `kind: List` (or a typed list such as PodList
// or DeploymentList) contributes its items.
//
// Kinds: v1 Pod, and the pod templates of apps/v1 Deployment, StatefulSet,
// DaemonSet and ReplicaSet, batch/v1 Job (spec.template) and CronJob
// (spec.jobTemplate.spec.template), and v1 ReplicationController. Other
// kinds are counted in Result.Skipped, unless their object has a pod
// template or containers (a custom workload, or a known kind at an API
// version that is no longer served): that is an error, because probed would
// otherwise silently not probe it.
//
// Decoding is strict like `kubectl apply --validate=strict`: keys match
// case-sensitively, unknown and duplicate fields are errors (a misspelled
// `gRPC:` is an error, not a probe-less container), and values must have
// the field's type. Each pod is then defaulted (SetDefaults), validated
// (ValidatePod, the workload kind's restartPolicy rule, and the
// probed.io/probes annotation, see package customprobe) and checked for
// warnings (Warnings).
//
// Bounds: data larger than Options.MaxFileBytes is refused whole. YAML
// aliases may not expand a document to more than twice its own size plus
// 10,000 nodes, which stops alias bombs ("billion laughs") before they are
// expanded.
//
// All errors are *Error and name the file, the document, the object and
// container when known, and the field path.
func DecodeAll(data []byte, source string, opts Options) *Result {
	res := &Result{}
	max := opts.maxBytes()
	if int64(len(data)) > max {
		res.Errors = append(res.Errors, &Error{File: source, Detail: tooLarge(int64(len(data)), max)})
		return res
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	d := &decoder{res: res, source: source, opts: opts}
	docs, ok := splitJSON(data)
	if !ok {
		docs = splitYAML(data)
	}
	for _, doc := range docs {
		d.document(doc)
	}
	if len(res.Entries) == 0 && len(res.Skipped) == 0 && len(res.Errors) == 0 {
		reason := "the file holds no object: it is empty, or has only comments, blank lines and --- markers"
		if d.objects > 0 {
			reason = "the file's objects hold no pod (an empty List)"
		}
		res.Skipped = append(res.Skipped, Skipped{Item: -1, Reason: reason})
	}
	return res
}

type rawDoc struct {
	index, line int
	data        []byte
	json        bool
}

// splitJSON splits a stream of JSON values. ok is false when data does not
// start like JSON or is not valid JSON (YAML, including KYAML, which also
// starts with "{", is then tried).
func splitJSON(data []byte) (docs []rawDoc, ok bool) {
	t := bytes.TrimLeft(data, " \t\r\n")
	if len(t) == 0 || (t[0] != '{' && t[0] != '[') {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	end := int64(0)
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			return docs, true
		}
		if err != nil {
			return nil, false
		}
		start := end
		for start < int64(len(data)) && strings.IndexByte(" \t\r\n", data[start]) >= 0 {
			start++
		}
		end = dec.InputOffset()
		docs = append(docs, rawDoc{
			index: len(docs) + 1,
			line:  1 + bytes.Count(data[:start], []byte("\n")),
			data:  raw,
			json:  true,
		})
	}
}

// splitYAML splits a YAML stream into documents at column-0 `---` markers
// (the marker line opens the next document) and `...` markers (the marker
// line closes the current one). YAML forbids such lines inside a document,
// block scalars included, so the split is exact. Text before the first
// marker or after a `...` is a document only if it holds more than blank
// lines, comments and directives; a `---` always opens a document, maybe an
// empty one.
func splitYAML(data []byte) []rawDoc {
	type chunk struct {
		start, end, line int
		explicit         bool
	}
	var chunks []chunk
	cur := chunk{line: 1}
	line := 1
	for off := 0; off < len(data); line++ {
		end, next := len(data), len(data)
		if nl := bytes.IndexByte(data[off:], '\n'); nl >= 0 {
			end, next = off+nl, off+nl+1
		}
		switch marker(data[off:end]) {
		case '-':
			cur.end = off
			chunks = append(chunks, cur)
			cur = chunk{start: off, line: line, explicit: true}
		case '.':
			cur.end = next
			chunks = append(chunks, cur)
			cur = chunk{start: next, line: line + 1}
		}
		off = next
	}
	cur.end = len(data)
	chunks = append(chunks, cur)

	var docs []rawDoc
	for _, c := range chunks {
		b := data[c.start:c.end]
		if !c.explicit && blank(b) {
			continue
		}
		docs = append(docs, rawDoc{index: len(docs) + 1, line: c.line, data: b})
	}
	return docs
}

// marker returns '-' for a document start line ("---" alone or followed by
// blanks and content), '.' for a document end line ("..."), else 0.
func marker(l []byte) byte {
	l = bytes.TrimSuffix(l, []byte("\r"))
	if len(l) < 3 || (len(l) > 3 && l[3] != ' ' && l[3] != '\t') {
		return 0
	}
	switch string(l[:3]) {
	case "---":
		return '-'
	case "...":
		return '.'
	}
	return 0
}

// blank reports whether a YAML chunk holds only blank lines, comments,
// directives and markers.
func blank(b []byte) bool {
	for len(b) > 0 {
		var l []byte
		l, b, _ = bytes.Cut(b, []byte("\n"))
		if marker(l) != 0 {
			l = l[3:]
		}
		l = bytes.TrimSpace(l)
		if len(l) == 0 || l[0] == '#' || l[0] == '%' {
			continue
		}
		return false
	}
	return true
}

type decoder struct {
	res    *Result
	source string
	opts   Options
	// objects counts the documents that held a value (not empty, not null).
	objects int
	// cur is the document being decoded; curRoot its node tree, parsed
	// for the first error that has a field (fieldLine).
	cur     rawDoc
	curRoot *yamlv3.Node
}

func (d *decoder) fail(e *Error) {
	e.File = d.source
	if e.Field != "" && e.Doc == d.cur.index && e.Line == d.cur.line {
		if l := d.fieldLine(e.Field); l > 0 {
			e.Line = l
		}
	}
	d.res.Errors = append(d.res.Errors, e)
}

// fieldLine returns the file's line of the field at path in the current
// document: the line of the deepest part of the path the document has (a
// key the decoder refuses is there; a missing field points at its
// parent), or 0. The document is parsed once more, as a node tree, only
// when it has an error; aliases were bounded before (checkAliases).
func (d *decoder) fieldLine(path string) int {
	if d.curRoot == nil {
		d.curRoot = &yamlv3.Node{}
		if yamlv3.Unmarshal(d.cur.data, d.curRoot) != nil {
			return 0
		}
	}
	n := d.curRoot
	if n.Kind == yamlv3.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	line := 0
	for _, seg := range splitPath(path) {
		for n.Kind == yamlv3.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		var next *yamlv3.Node
		switch n.Kind {
		case yamlv3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == seg.name {
					line, next = n.Content[i].Line, n.Content[i+1]
					break
				}
			}
		case yamlv3.SequenceNode:
			if i, ok := atoi(seg.name); ok && seg.bracket && i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	if line == 0 {
		return 0
	}
	return line + d.cur.line - 1
}

// document decodes one document. A panic in a decoding library becomes an
// error of that document, so one document never takes down the others.
func (d *decoder) document(doc rawDoc) {
	d.cur, d.curRoot = doc, nil
	defer func() {
		if r := recover(); r != nil {
			d.fail(&Error{Doc: doc.index, Line: doc.line, Detail: fmt.Sprintf("internal error decoding the document: %v", r)})
		}
	}()
	js := doc.data
	if !doc.json {
		if blank(doc.data) {
			return
		}
		if err := checkAliases(doc.data); err != nil {
			d.fail(&Error{Doc: doc.index, Line: doc.line, Detail: err.Error(), Err: err})
			return
		}
		var err error
		js, err = yaml.YAMLToJSONStrict(doc.data)
		if err != nil {
			msg, line := yamlMessage(err, doc.line)
			if line == 0 {
				line = doc.line
			}
			kind, pod := guessObject(doc.data)
			d.fail(&Error{Doc: doc.index, Line: line, Kind: kind, Pod: pod, Detail: "invalid YAML: " + msg, Err: err})
			return
		}
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
		return
	}
	d.objects++
	d.object(js, objCtx{doc: doc.index, line: doc.line, item: -1}, 0)
}

var lineRef = regexp.MustCompile(`\bline (\d+)`)

// yamlMessage turns a YAML library error into one line, with line numbers
// counted from the start of the file instead of the document (first is the
// file's line of the document's first line), and returns the first line
// the error points at, in the file (0 when it names none).
func yamlMessage(err error, first int) (msg string, line int) {
	msg = strings.TrimPrefix(err.Error(), "yaml: ")
	msg = lineRef.ReplaceAllStringFunc(msg, func(m string) string {
		n, convErr := strconv.Atoi(m[len("line "):])
		if convErr != nil {
			return m
		}
		if line == 0 {
			line = n + first - 1
		}
		return "line " + strconv.Itoa(n+first-1)
	})
	return strings.Join(strings.Fields(msg), " "), line
}

// guessObject reads, best effort, the kind and "namespace/name" of a
// document that is not valid YAML, from its text: a `kind:` line at column
// 0 and the `name:` and `namespace:` keys of a block or flow `metadata:` at
// column 0. The namespace defaults to "default". It returns "" for what it
// cannot tell: no object without a kind, no name that is not a DNS-1123
// subdomain.
func guessObject(doc []byte) (kind, pod string) {
	var ns, name string
	lines := strings.Split(string(doc), "\n")
	scalar := func(v string) string {
		if i := strings.Index(v, " #"); i >= 0 {
			v = v[:i]
		}
		return strings.Trim(strings.TrimSpace(v), `"'`)
	}
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], "\r")
		switch {
		case strings.HasPrefix(l, "kind:") && kind == "":
			kind = scalar(l[len("kind:"):])
		case strings.HasPrefix(l, "metadata:") && name == "":
			rest := strings.TrimSpace(l[len("metadata:"):])
			if strings.HasPrefix(rest, "{") {
				for _, kv := range strings.Split(strings.Trim(rest, "{}"), ",") {
					k, v, _ := strings.Cut(kv, ":")
					switch strings.TrimSpace(k) {
					case "name":
						name = scalar(v)
					case "namespace":
						ns = scalar(v)
					}
				}
				continue
			}
			indent := -1
			for j := i + 1; j < len(lines); j++ {
				c := strings.TrimRight(lines[j], "\r")
				t := strings.TrimLeft(c, " ")
				if t == "" || t[0] == '#' {
					continue
				}
				n := len(c) - len(t)
				if n == 0 {
					break
				}
				if indent < 0 {
					indent = n
				}
				if n != indent {
					continue
				}
				k, v, _ := strings.Cut(t, ":")
				switch k {
				case "name":
					name = scalar(v)
				case "namespace":
					ns = scalar(v)
				}
			}
		}
	}
	if kind == "" || name == "" || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return kind, ""
	}
	if ns == "" || len(validation.IsDNS1123Label(ns)) > 0 {
		ns = "default"
	}
	return kind, ns + "/" + name
}

// checkAliases refuses a document whose aliases expand it to more than twice
// its own node count plus 10,000 nodes, or that has an alias cycle. It counts
// on the node graph (aliases not expanded), in time linear in the document.
func checkAliases(doc []byte) error {
	if !bytes.Contains(doc, []byte("&")) || !bytes.Contains(doc, []byte("*")) {
		return nil
	}
	var root yamlv3.Node
	if err := yamlv3.Unmarshal(doc, &root); err != nil {
		return nil // a syntax error; the decoder reports it
	}
	c := aliasCounter{memo: map[*yamlv3.Node]int64{}}
	literal := c.literal(&root)
	limit := 2*literal + 10000
	c.limit = limit
	expanded, err := c.expanded(&root)
	if err != nil {
		return err
	}
	if expanded > limit {
		return fmt.Errorf("YAML aliases expand the document to more than %d nodes (it has %d): refusing a possible alias bomb", limit, literal)
	}
	return nil
}

type aliasCounter struct {
	memo  map[*yamlv3.Node]int64 // -1 while being counted
	limit int64
}

func (c *aliasCounter) literal(n *yamlv3.Node) int64 {
	if n == nil {
		return 0
	}
	s := int64(1)
	for _, ch := range n.Content {
		s += c.literal(ch)
	}
	return s
}

var errAliasCycle = errors.New("a YAML alias refers to a node that contains it")

// expanded counts the nodes of n with aliases expanded, stopping above limit.
func (c *aliasCounter) expanded(n *yamlv3.Node) (int64, error) {
	if n == nil {
		return 0, nil
	}
	if v, ok := c.memo[n]; ok {
		if v < 0 {
			return 0, errAliasCycle
		}
		return v, nil
	}
	c.memo[n] = -1
	s := int64(1)
	if n.Kind == yamlv3.AliasNode {
		v, err := c.expanded(n.Alias)
		if err != nil {
			return 0, err
		}
		s = v
	}
	for _, ch := range n.Content {
		v, err := c.expanded(ch)
		if err != nil {
			return 0, err
		}
		s += v
		if s > c.limit {
			s = c.limit + 1
			break
		}
	}
	c.memo[n] = s
	return s, nil
}
