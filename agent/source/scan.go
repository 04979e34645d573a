package source

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/manifest"
)

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
