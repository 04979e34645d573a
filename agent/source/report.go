package source

import (
	"errors"
	"strconv"
	"time"

	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/redact"
)

// Report kinds and sources (the JSON contract of GET /manifests,
// docs/operations.md).
const (
	ReportKind      = "ManifestReport"
	SourceDirectory = "directory" // pods from a manifest directory or file
	SourceCluster   = "cluster"   // pods from the API server: nothing to report
)

// Report is the body of GET /manifests: the manifests the last scan
// rejected or skipped. Its JSON shape is stable (docs/operations.md).
type Report struct {
	Kind   string `json:"kind"`   // "ManifestReport"
	Source string `json:"source"` // "directory" or "cluster"
	// Path is the absolute manifest directory or file ("" in cluster mode).
	Path string `json:"path"`
	// Files is the number of manifest files read at the last scan.
	Files int `json:"files"`
	// Rejected are the documents that failed to read, decode or validate,
	// and the conflicts, oldest first (by Since, then file and document).
	Rejected []Rejection `json:"rejected"`
	// Skipped are the documents read that yield no pod, in file order.
	Skipped []SkippedDocument `json:"skipped"`
}

// RejectedDocuments counts the distinct documents (file and document
// number) in Rejected: a document with several errors has one Rejection
// per error and counts once. It is the gauge
// probed_manifest_documents_rejected.
func (r Report) RejectedDocuments() int {
	docs := map[string]bool{}
	for _, rej := range r.Rejected {
		docs[rej.File+"#"+strconv.Itoa(rej.Document)] = true
	}
	return len(docs)
}

// Rejection is one rejected document: one per error, so a document with
// several errors has several.
type Rejection struct {
	File string `json:"file"` // absolute path
	// Document is the 1-based document in the file; 0 for the whole file
	// (unreadable, too large, not a regular file).
	Document int `json:"document"`
	// Line is the file's 1-based line the error is at (manifest.Error.Line:
	// the YAML parser's line, the offending field's line, else the
	// document's first line); 0 for a whole file.
	Line int `json:"line"`
	// Pod is "namespace/name" when it can be known, else "".
	Pod string `json:"pod"`
	// Error is the message (file, document, pod, container, field),
	// passed through runtime/redact and cut to bound.MessageBytes.
	Error string `json:"error"`
	// Field is the path of the offending field in the document
	// (manifest.Error.Field, e.g.
	// spec.containers[0].livenessProbe.httpGet.port); "" when the error
	// concerns a whole document or file.
	Field string `json:"field,omitempty"`
	// Detail is what is wrong, without the file, document, pod, container
	// and field the message starts with (manifest.Error.Detail): the part
	// of Error a user acts on beside Field. Redacted and cut as Error.
	Detail string `json:"detail,omitempty"`
	// Since is when this document was first seen with this error (UTC,
	// whole seconds).
	Since time.Time `json:"since"`
	// Stale: the pod's last valid version is still probed.
	Stale bool `json:"stale"`
}

// SkippedDocument is a document read that yields no pod.
type SkippedDocument struct {
	File string `json:"file"`
	// Document is 1-based; 0 for a file that holds no object at all.
	Document int    `json:"document"`
	Kind     string `json:"kind"`   // the object's kind; "" for a whole file
	Reason   string `json:"reason"` // manifest.Skipped.Reason
}

// NewReport returns an empty report of the given source ("directory" or
// "cluster") and path, with empty (not null) lists.
func NewReport(source, path string) Report {
	return Report{Kind: ReportKind, Source: source, Path: path, Rejected: []Rejection{}, Skipped: []SkippedDocument{}}
}

// Report returns the report of the last scan (a copy).
func (s *Source) Report() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.report
	r.Rejected = append([]Rejection{}, r.Rejected...)
	r.Skipped = append([]SkippedDocument{}, r.Skipped...)
	return r
}

// rejectionOf is the Rejection of e, its texts as they are (finish dates
// it and redacts and cuts them: cleaned).
func rejectionOf(e *manifest.Error) Rejection {
	detail := e.Detail
	if detail == "" && e.Err != nil {
		detail = e.Err.Error()
	}
	return Rejection{File: e.File, Document: e.Doc, Line: e.Line, Pod: e.Pod, Error: e.Error(), Field: e.Field, Detail: detail}
}

// cleaned returns r with its texts redacted (runtime/redact) and cut to
// bound.MessageBytes, as GET /manifests serves them.
func (r Rejection) cleaned() Rejection {
	clean := func(s string) string { return bound.Cut(redact.Text(s), bound.MessageBytes) }
	r.Error, r.Field, r.Detail = clean(r.Error), clean(r.Field), clean(r.Detail)
	return r
}

// asManifestError returns err as a *manifest.Error of path (the whole file
// when it is not one already).
func asManifestError(path string, err error) *manifest.Error {
	var me *manifest.Error
	if errors.As(err, &me) {
		return me
	}
	return &manifest.Error{File: path, Detail: err.Error(), Err: err}
}
