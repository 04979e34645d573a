// Package source reads pods from a manifest directory, or a single manifest
// file, and watches it: the agent's static-pod source (the kubelet's
// --pod-manifest-path takes either too). Every *.yaml, *.yml and *.json file
// at the top level of the directory is decoded with package manifest; files
// are read in lexical order. A file that fails to decode is reported (file,
// document, pod, container, field) and the rest keep loading; a file that is
// fixed is picked up on the next scan. A pod whose document was valid and
// turns invalid is not dropped: its last valid version keeps being probed,
// marked stale with the error (Pod.Stale, Report), until the document is
// fixed or the file deleted, so a typo never stops a healthy pod's probes.
// Documents that hold no pod (a Secret, a Service, an empty file) are
// reported as skipped, with why. Entries that are not regular files (a FIFO,
// a device such as /dev/zero, a socket, a directory behind a symlink) are
// refused the same way, without blocking or reading without end (package
// runtime/fileread), so they never stop the scan or the watch.
package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/fileread"
	"github.com/probed/probed/runtime/redact"
)

// Pod is one pod of the directory.
type Pod struct {
	Pod *v1.Pod // UID assigned, defaults applied, validated
	// Source is the file it came from; Doc its document in that file.
	Source string
	Doc    int
	// SpecHash identifies the probed part of the pod (metadata, spec): a
	// change makes a new pod, as a changed static-pod manifest does in the
	// kubelet. StatusHash identifies the manifest's status.
	SpecHash, StatusHash string
	Warnings             []string
	// Stale is set when the pod's document no longer decodes or validates:
	// the pod is its last valid version, still probed, and Stale is the
	// rejection that keeps the new version out. nil for a current pod.
	Stale *Rejection
	// Probes are the pod's probes as its document's decoding worked them
	// out (manifest.Entry.Probes), handed on with the pod
	// (pods.Pod.Probes).
	Probes *podprobes.View
}

// Snapshot is the directory's content after one scan.
type Snapshot struct {
	Pods map[types.UID]*Pod
	// Errors are the errors of every file, in file order: decoding and
	// validation errors and conflicts (a pod name or UID defined twice),
	// each a *manifest.Error.
	Errors []error
	// Files is the number of manifest files read.
	Files int
	// Report is what GET /manifests serves for this scan.
	Report Report
}

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

// Options configure a Source.
type Options struct {
	// Path is the manifest directory, or a single manifest file (read
	// whatever its name).
	Path     string
	Manifest manifest.Options
	Logger   *slog.Logger
	// Rescan is the interval of full rescans, a fallback for changes the
	// file watcher misses (network filesystems, some editors); default 30 s.
	Rescan time.Duration
	// Debounce delays a scan after a file event, to let writers finish;
	// default 100 ms.
	Debounce time.Duration
	// Clock dates the rejections (Rejection.Since); nil: the real clock.
	Clock clock.PassiveClock
	// MetricsRegisterer, when set, gets the gauge
	// probed_manifest_documents_rejected (the report's rejections).
	MetricsRegisterer prometheus.Registerer
}

type fileState struct {
	sum    [sha256.Size]byte // of the content decoded
	result *manifest.Result
}

// Source scans a manifest directory.
type Source struct {
	opts Options
	log  *slog.Logger
	// file: Path is a single manifest file, not a directory.
	file bool

	mu    sync.Mutex
	files map[string]*fileState // by path: the last decoded content
	// delivered are the pods each file delivered at the last scan, fresh
	// and stale: the last valid versions a broken document falls back to.
	delivered map[string][]*Pod
	// since remembers when each rejection (file, document, message) was
	// first seen.
	since map[string]time.Time
	// reported remembers which errors were logged, so a broken file is
	// reported once per change, not on every scan.
	reported map[string]bool
	report   Report
	stale    map[types.UID]Rejection // the stale pods of the last scan
	// waiting: the last scan found no pod, and said so (logNew).
	waiting bool

	synced atomic.Bool // the first scan was delivered (Run)
}

// New returns a Source for opts.Path, which must exist: a directory, or a
// manifest file.
func New(opts Options) (*Source, error) {
	if opts.Path == "" {
		return nil, errors.New("source: no manifest directory or file")
	}
	abs, err := filepath.Abs(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("manifests %s: %w", opts.Path, err)
	}
	opts.Path = abs
	fi, err := os.Stat(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("manifests %s: %s, not a directory or a regular file", opts.Path, fileread.Describe(fi.Mode()))
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Rescan <= 0 {
		opts.Rescan = 30 * time.Second
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	s := &Source{opts: opts, log: opts.Logger, file: !fi.IsDir(), files: map[string]*fileState{},
		delivered: map[string][]*Pod{}, since: map[string]time.Time{}, reported: map[string]bool{},
		report: NewReport(SourceDirectory, opts.Path)}
	if opts.MetricsRegisterer != nil {
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "probed_manifest_documents_rejected",
			Help: "Manifest documents (or whole files) the last scan rejected: not readable, not decoding, not valid, or in conflict (GET /manifests).",
		}, func() float64 { return float64(s.Report().RejectedDocuments()) })
		if err := opts.MetricsRegisterer.Register(g); err != nil {
			return nil, fmt.Errorf("source metrics: %w", err)
		}
	}
	return s, nil
}

// IsManifest reports whether a file name is read as a manifest.
func IsManifest(name string) bool {
	base := filepath.Base(name)
	if strings.HasPrefix(base, ".") || strings.HasSuffix(base, "~") {
		return false
	}
	switch strings.ToLower(filepath.Ext(base)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
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

// StaleOf returns the rejection that keeps pod uid at its last valid
// version, if the last scan delivered it stale.
func (s *Source) StaleOf(uid types.UID) (Rejection, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.stale[uid]
	return r, ok
}

// ConditionManifestStale is the pod condition GET /pods shows on a pod
// probed at its last valid version because its manifest no longer decodes
// or validates: status True, reason ManifestInvalid, the error as message,
// lastTransitionTime when the error was first seen. kubectl describe lists
// it with the pod's other conditions; `kubectl wait
// --for=condition=probed.io/ManifestStale` waits for it. A custom condition
// type is domain-prefixed, as readiness gates' are.
const ConditionManifestStale v1.PodConditionType = "probed.io/ManifestStale"

// MarkStale adds (or replaces) the ConditionManifestStale condition of pod
// for r. It changes pod in place: give it a copy.
func MarkStale(pod *v1.Pod, r Rejection) {
	c := v1.PodCondition{Type: ConditionManifestStale, Status: v1.ConditionTrue, Reason: "ManifestInvalid",
		Message:            "the manifest no longer loads; probing the last valid version: " + r.Error,
		LastTransitionTime: metav1.NewTime(r.Since)}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == ConditionManifestStale {
			pod.Status.Conditions[i] = c
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, c)
}

// paths lists the manifest files to read, in lexical order; err is a
// failure to list the directory (or stat the file) other than its absence.
func (s *Source) paths() ([]string, error) {
	if s.file {
		if _, err := os.Stat(s.opts.Path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil
			}
			return nil, err
		}
		return []string{s.opts.Path}, nil
	}
	paths, err := ManifestFiles(s.opts.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return paths, err
}

// ManifestFiles lists the manifest files of a directory as the agent reads
// them: the entries at its top level that are not directories and are named
// as manifests (IsManifest), in lexical order. `probed check -f DIR` reads
// the same list.
func ManifestFiles(dir string) ([]string, error) {
	dirents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, d := range dirents {
		if d.IsDir() || !IsManifest(d.Name()) {
			continue
		}
		paths = append(paths, filepath.Join(dir, d.Name()))
	}
	sort.Strings(paths)
	return paths, nil
}

// Conflicts holds the rule that a pod is defined once among the manifests
// read together: a second definition of a namespace/name, or of a
// metadata.uid, is rejected and the first one (in file order) kept, the
// error naming both files. Scan applies it to a directory; `probed check`
// to what it reads, so that it probes what the agent would. The zero
// value is not ready: use NewConflicts.
type Conflicts struct {
	byName map[string]*Pod
	byUID  map[types.UID]*Pod
}

// NewConflicts returns an empty Conflicts.
func NewConflicts() *Conflicts {
	return &Conflicts{byName: map[string]*Pod{}, byUID: map[types.UID]*Pod{}}
}

// Admit records p, or returns the error that rejects it (file, document,
// pod and, for a UID, the field), leaving the first definition recorded.
func (c *Conflicts) Admit(p *Pod) *manifest.Error {
	name := p.Pod.Namespace + "/" + p.Pod.Name
	if first, dup := c.byName[name]; dup {
		return &manifest.Error{File: p.Source, Doc: p.Doc, Pod: name,
			Detail: fmt.Sprintf("already defined in %s (document %d); this definition is ignored", first.Source, first.Doc)}
	}
	if other, dup := c.byUID[p.Pod.UID]; dup {
		return &manifest.Error{File: p.Source, Doc: p.Doc, Pod: name,
			Field: "metadata.uid", Detail: fmt.Sprintf("%q is already used by pod %s/%s in %s; this definition is ignored", p.Pod.UID, other.Pod.Namespace, other.Pod.Name, other.Source)}
	}
	c.byName[name], c.byUID[p.Pod.UID] = p, p
	return nil
}

// Scan reads the directory once. Unchanged files are not decoded again.
//
// A pod delivered by the last scan whose document is now rejected (the
// error names the pod, or is of the pod's document, or of the whole file) is
// delivered again unchanged, marked Stale; a deleted file, or a document
// removed from its file, removes its pods; a file emptied (no object left,
// as a truncate-then-write shows it mid-write) keeps them stale. A directory that can no longer be
// listed (other than deleted) keeps every pod stale with that error.
func (s *Source) Scan() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{Pods: map[types.UID]*Pod{}}
	var rejected []*manifest.Error
	var skipped []SkippedDocument
	var stale []*Pod
	paths, err := s.paths()
	if err != nil {
		e := asManifestError(s.opts.Path, fmt.Errorf("cannot list the manifest directory: %w", err))
		rejected = append(rejected, e)
		// Keep every file's pods, stale: the listing failed, not the files.
		paths = paths[:0]
		for path := range s.delivered {
			paths = append(paths, path)
		}
		sort.Strings(paths)
		for _, path := range paths {
			stale = append(stale, s.delivered[path]...)
		}
		delivered := map[string][]*Pod{}
		for _, p := range stale {
			sp := staleCopy(p, e)
			delivered[p.Source] = append(delivered[p.Source], sp)
			snap.Pods[sp.Pod.UID] = sp
		}
		s.delivered = delivered
		staleBy := map[*manifest.Error]*Pod{}
		if len(stale) > 0 {
			staleBy[e] = nil
		}
		s.finish(&snap, rejected, staleBy, nil)
		return snap
	}
	seen := map[string]bool{}
	conflicts := NewConflicts()
	staleBy := map[*manifest.Error]*Pod{}
	delivered := map[string][]*Pod{}
	for _, path := range paths {
		res, err := s.load(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the listing: its pods go
		}
		seen[path] = true
		var errs []*manifest.Error
		var fresh []*Pod
		if err != nil {
			errs = append(errs, asManifestError(path, err))
		} else {
			snap.Files++
			for _, e := range res.Errors {
				errs = append(errs, asManifestError(path, e))
			}
			for _, sk := range res.Skipped {
				if sk.Doc == 0 && len(s.delivered[path]) > 0 {
					// Emptied, not deleted: editors and shell redirections
					// truncate a file before writing it, so a scan can
					// see it empty mid-write. Its pods stay, stale.
					errs = append(errs, &manifest.Error{File: path, Detail: sk.Reason +
						"; the pods it held are kept at their last version until it holds them again or is deleted"})
					continue
				}
				skipped = append(skipped, SkippedDocument{File: path, Document: sk.Doc, Kind: sk.Kind, Reason: sk.Reason})
			}
			for i := range res.Entries {
				fresh = append(fresh, NewPod(&res.Entries[i]))
			}
		}
		pods := append([]*Pod{}, fresh...)
		pods = append(pods, s.keepStale(path, fresh, errs, staleBy)...)
		rejected = append(rejected, errs...)
		for _, p := range pods {
			if err := conflicts.Admit(p); err != nil {
				rejected = append(rejected, err)
				continue
			}
			snap.Pods[p.Pod.UID] = p
			delivered[path] = append(delivered[path], p)
		}
	}
	for path := range s.files {
		if !seen[path] {
			delete(s.files, path)
		}
	}
	s.delivered = delivered
	s.finish(&snap, rejected, staleBy, skipped)
	return snap
}

// keepStale returns the pods path delivered at the last scan that errs now
// reject and fresh does not define again, marked stale; staleBy records,
// for each error, the pod it keeps stale.
func (s *Source) keepStale(path string, fresh []*Pod, errs []*manifest.Error, staleBy map[*manifest.Error]*Pod) []*Pod {
	if len(errs) == 0 {
		return nil
	}
	defined := map[string]bool{}
	for _, p := range fresh {
		defined[p.Pod.Namespace+"/"+p.Pod.Name] = true
	}
	var out []*Pod
	for _, p := range s.delivered[path] {
		name := p.Pod.Namespace + "/" + p.Pod.Name
		if defined[name] {
			continue
		}
		for _, e := range errs {
			if e.Doc == 0 || e.Pod == name || (e.Pod == "" && e.Doc == p.Doc) {
				if _, taken := staleBy[e]; !taken || e.Doc == 0 {
					staleBy[e] = p
				}
				out = append(out, staleCopy(p, e))
				break
			}
		}
	}
	return out
}

// staleCopy returns p marked stale by e (Rejection filled in by finish).
func staleCopy(p *Pod, e *manifest.Error) *Pod {
	c := *p
	r := rejectionOf(e)
	r.Pod, r.Stale = p.Pod.Namespace+"/"+p.Pod.Name, true
	c.Stale = &r
	return &c
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

// finish builds the snapshot's errors and report, dates the rejections and
// logs what is new. Caller holds mu.
func (s *Source) finish(snap *Snapshot, rejected []*manifest.Error, staleBy map[*manifest.Error]*Pod, skipped []SkippedDocument) {
	now := s.opts.Clock.Now().UTC().Truncate(time.Second)
	since := map[string]time.Time{}
	report := NewReport(SourceDirectory, s.opts.Path)
	report.Files = snap.Files
	if skipped != nil {
		report.Skipped = skipped
	}
	for _, e := range rejected {
		snap.Errors = append(snap.Errors, e)
		msg := e.Error()
		key := e.File + "#" + strconv.Itoa(e.Doc) + "\x00" + msg
		t, ok := s.since[key]
		if !ok {
			t = now
		}
		since[key] = t
		r := rejectionOf(e).cleaned()
		r.Since = t
		if p, ok := staleBy[e]; ok {
			r.Stale = true
			if r.Pod == "" && p != nil {
				r.Pod = p.Pod.Namespace + "/" + p.Pod.Name
			}
		}
		report.Rejected = append(report.Rejected, r)
	}
	s.since = since
	sort.SliceStable(report.Rejected, func(i, j int) bool {
		a, b := report.Rejected[i], report.Rejected[j]
		if !a.Since.Equal(b.Since) {
			return a.Since.Before(b.Since)
		}
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Document < b.Document
	})
	s.stale = map[types.UID]Rejection{}
	for _, p := range snap.Pods {
		if p.Stale != nil {
			st := *p.Stale
			key := st.File + "#" + strconv.Itoa(st.Document) + "\x00" + st.Error
			st = st.cleaned()
			st.Since = since[key]
			p.Stale = &st
			s.stale[p.Pod.UID] = st
		}
	}
	snap.Report = report
	s.report = report
	s.logNew(*snap)
}

// load returns the decoded content of path, decoding it again only when
// the content changed. A file that is not a regular file (a FIFO, a device,
// a socket, a directory behind a symlink) or is over the size limit is
// refused unread, without blocking (manifest.ReadFile), and reported like a
// manifest that does not decode: the other files keep loading. What a new
// version of a file skips is logged once, when it is decoded.
func (s *Source) load(path string) (*manifest.Result, error) {
	data, err := manifest.ReadFile(path, s.opts.Manifest)
	if err != nil {
		delete(s.files, path)
		return nil, err
	}
	sum := sha256.Sum256(data)
	if st, ok := s.files[path]; ok && st.sum == sum {
		return st.result, nil
	}
	res := manifest.DecodeAll(data, path, s.opts.Manifest)
	s.files[path] = &fileState{sum: sum, result: res}
	for _, sk := range res.Skipped {
		if sk.Doc == 0 {
			s.log.Warn("manifest holds no pod", "file", path, "reason", sk.Reason)
			continue
		}
		s.log.Info("manifest document skipped", "file", path, "document", sk.Doc, "kind", sk.Kind,
			"object", sk.Namespace+"/"+sk.Name, "reason", sk.Reason)
	}
	return res, nil
}

// logNew logs errors, stale pods and warnings not logged before; one line
// each.
func (s *Source) logNew(snap Snapshot) {
	current := map[string]bool{}
	for _, err := range snap.Errors {
		msg := err.Error()
		current[msg] = true
		if !s.reported[msg] {
			s.log.Error("manifest rejected", "err", msg)
		}
	}
	for _, p := range snap.Pods {
		if p.Stale != nil {
			msg := "stale\x00" + string(p.Pod.UID) + "\x00" + p.Stale.Error
			current[msg] = true
			if !s.reported[msg] {
				s.log.Warn("manifest invalid: still probing the pod's last valid version", "pod", p.Pod.Namespace+"/"+p.Pod.Name,
					"podUID", string(p.Pod.UID), "file", p.Source, "err", p.Stale.Error)
			}
		}
		for _, w := range p.Warnings {
			msg := p.Source + ": " + w
			current[msg] = true
			if !s.reported[msg] {
				s.log.Warn("manifest warning", "file", p.Source, "pod", p.Pod.Namespace+"/"+p.Pod.Name, "warning", w)
			}
		}
	}
	s.reported = current
	// A scan without a pod says so once, and where it waits: `probed run`
	// on an empty directory is otherwise silent.
	if empty := len(snap.Pods) == 0; empty && !s.waiting {
		what := "the manifest directory"
		if s.file {
			what = "the manifest file"
		}
		s.log.Info("no pod to probe: waiting for manifests in "+what+" (*.yaml, *.yml, *.json; read as they appear)",
			"path", s.opts.Path, "files", snap.Files, "rejected", len(snap.Errors))
		s.waiting = true
	} else if !empty {
		s.waiting = false
	}
}

// NewPod is the Pod of a decoded manifest entry: a copy of its pod with
// the spec and status hashes and, when the manifest gives none, the UID a
// hash of the pod's metadata and spec (as a static pod's).
func NewPod(e *manifest.Entry) *Pod {
	pod := e.Pod.DeepCopy()
	p := &Pod{Pod: pod, Source: e.Source, Doc: e.Doc, Warnings: e.Warnings, Probes: e.Probes}
	p.SpecHash = hashOf(struct {
		Namespace, Name string
		Labels, Annots  map[string]string
		Deleting        bool
		Spec            v1.PodSpec
	}{pod.Namespace, pod.Name, pod.Labels, pod.Annotations, pod.DeletionTimestamp != nil, pod.Spec})
	p.StatusHash = hashOf(pod.Status)
	if pod.UID == "" {
		// Like the kubelet's static pods: the UID is a hash of the pod, so
		// an edited pod is a new pod and an untouched one keeps its UID
		// (and its probes' phases) across agent restarts.
		h := p.SpecHash
		pod.UID = types.UID(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
	}
	return p
}

func hashOf(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Watch calls apply with a new snapshot after each change of the directory
// (file events, debounced) and every Rescan, until ctx is done. Callers
// usually Scan once themselves first; Watch applies one snapshot as soon as
// the file watcher is in place, so that a change made between that Scan and
// the start of the watch is not missed until the next rescan.
func (s *Source) Watch(ctx context.Context, apply func(Snapshot)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("file watcher unavailable; falling back to periodic rescans", "err", err, "interval", s.opts.Rescan)
	} else {
		defer w.Close()
		// A single file is watched through its directory: editors and
		// ConfigMap mounts replace a file by renaming over it, which ends
		// a watch on the file itself.
		dir := s.opts.Path
		if s.file {
			dir = filepath.Dir(s.opts.Path)
		}
		if err := w.Add(dir); err != nil {
			s.log.Warn("cannot watch manifest directory; falling back to periodic rescans", "dir", dir, "err", err)
		}
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	rescan := time.NewTicker(s.opts.Rescan)
	defer rescan.Stop()
	// The first scan runs once the watcher is registered (see above).
	debounce := time.NewTimer(0)
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if s.relevant(ev) {
				debounce.Reset(s.opts.Debounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.log.Warn("file watcher error", "err", err)
		case <-debounce.C:
			apply(s.Scan())
		case <-rescan.C:
			apply(s.Scan())
		}
	}
}

// relevant reports whether a file event may change the manifests.
func (s *Source) relevant(ev fsnotify.Event) bool {
	if s.file {
		return filepath.Clean(ev.Name) == s.opts.Path
	}
	return IsManifest(ev.Name) || ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0
}

// Run implements pods.Source: it scans the directory, delivers the pods as
// one pods.Set update, then watches the directory (Watch) and delivers a Set
// after each change, until ctx is done.
func (s *Source) Run(ctx context.Context, apply func(pods.Update)) error {
	deliver := func(snap Snapshot) { apply(snap.Update()) }
	deliver(s.Scan())
	s.synced.Store(true)
	return s.Watch(ctx, deliver)
}

// HasSynced implements pods.Source: true once the first scan was delivered.
func (s *Source) HasSynced() bool { return s.synced.Load() }

// Update is the snapshot as the reconciler's pods.Set update, in UID order.
func (snap Snapshot) Update() pods.Update {
	u := pods.Update{Op: pods.Set, Pods: make([]*pods.Pod, 0, len(snap.Pods))}
	for _, p := range snap.Pods {
		u.Pods = append(u.Pods, &pods.Pod{Pod: p.Pod, Origin: p.Origin(), SpecHash: p.SpecHash, StatusHash: p.StatusHash, Probes: p.Probes})
	}
	sort.Slice(u.Pods, func(i, j int) bool { return u.Pods[i].Pod.UID < u.Pods[j].Pod.UID })
	return u
}

// Origin is the pod's file and document, as "web.yaml#2".
func (p *Pod) Origin() string { return p.Source + "#" + strconv.Itoa(p.Doc) }
