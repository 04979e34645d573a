// Package source reads pods from a manifest directory and watches it: the
// agent's static-pod source. Every *.yaml, *.yml and *.json file at the top
// level of the directory is decoded with package manifest; files are read in
// lexical order. A file that fails to decode is reported (file, document,
// pod, container, field) and the rest keep loading; a file that is fixed is
// picked up on the next scan. Entries that are not regular files (a FIFO, a
// device such as /dev/zero, a socket, a directory behind a symlink) are
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
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/agent/pods"
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
}

// Snapshot is the directory's content after one scan.
type Snapshot struct {
	Pods map[types.UID]*Pod
	// Errors are the errors of every file, in file order: decoding and
	// validation errors (*manifest.Error) and conflicts (a pod name or UID
	// defined twice).
	Errors []error
	// Files is the number of manifest files read.
	Files int
}

// Options configure a Source.
type Options struct {
	Dir      string
	Manifest manifest.Options
	Logger   *slog.Logger
	// Rescan is the interval of full rescans, a fallback for changes the
	// file watcher misses (network filesystems, some editors); default 30 s.
	Rescan time.Duration
	// Debounce delays a scan after a file event, to let writers finish;
	// default 100 ms.
	Debounce time.Duration
}

type fileState struct {
	sum    [sha256.Size]byte // of the content decoded
	result *manifest.Result
}

// Source scans a manifest directory.
type Source struct {
	opts Options
	log  *slog.Logger

	mu    sync.Mutex
	files map[string]*fileState // by path: the last decoded content
	// reported remembers which errors were logged, so a broken file is
	// reported once per change, not on every scan.
	reported map[string]bool

	synced atomic.Bool // the first scan was delivered (Run)
}

// New returns a Source for opts.Dir. The directory must exist.
func New(opts Options) (*Source, error) {
	if opts.Dir == "" {
		return nil, errors.New("source: no manifest directory")
	}
	fi, err := os.Stat(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("manifest directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("manifest directory %s: not a directory", opts.Dir)
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
	return &Source{opts: opts, log: opts.Logger, files: map[string]*fileState{}, reported: map[string]bool{}}, nil
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

// Scan reads the directory once. Unchanged files are not decoded again.
func (s *Source) Scan() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{Pods: map[types.UID]*Pod{}}
	dirents, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		snap.Errors = append(snap.Errors, fmt.Errorf("reading manifest directory %s: %w", s.opts.Dir, err))
		return snap
	}
	var paths []string
	for _, d := range dirents {
		if d.IsDir() || !IsManifest(d.Name()) {
			continue
		}
		paths = append(paths, filepath.Join(s.opts.Dir, d.Name()))
	}
	sort.Strings(paths)
	seen := map[string]bool{}
	byName := map[string]*Pod{} // namespace/name → first definition
	for _, path := range paths {
		seen[path] = true
		res, err := s.load(path)
		if err != nil {
			snap.Errors = append(snap.Errors, err)
			continue
		}
		snap.Files++
		snap.Errors = append(snap.Errors, res.Errors...)
		for i := range res.Entries {
			e := &res.Entries[i]
			p := newPod(e)
			name := p.Pod.Namespace + "/" + p.Pod.Name
			if first, dup := byName[name]; dup {
				snap.Errors = append(snap.Errors, fmt.Errorf("%s: document %d: pod %s is already defined in %s (document %d); this definition is ignored", e.Source, e.Doc, name, first.Source, first.Doc))
				continue
			}
			if other, dup := snap.Pods[p.Pod.UID]; dup {
				snap.Errors = append(snap.Errors, fmt.Errorf("%s: document %d: pod %s: metadata.uid %q is already used by pod %s/%s in %s; this definition is ignored", e.Source, e.Doc, name, p.Pod.UID, other.Pod.Namespace, other.Pod.Name, other.Source))
				continue
			}
			byName[name] = p
			snap.Pods[p.Pod.UID] = p
		}
	}
	for path := range s.files {
		if !seen[path] {
			delete(s.files, path)
		}
	}
	s.report(snap)
	return snap
}

// load returns the decoded content of path, decoding it again only when
// the content changed. A file that is not a regular file (a FIFO, a device,
// a socket, a directory behind a symlink) or is over the size limit is
// refused unread, without blocking (manifest.ReadFile), and reported like a
// manifest that does not decode: the other files keep loading.
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
	return res, nil
}

// report logs errors and warnings not logged before; one line each.
func (s *Source) report(snap Snapshot) {
	current := map[string]bool{}
	for _, err := range snap.Errors {
		msg := err.Error()
		current[msg] = true
		if !s.reported[msg] {
			s.log.Error("manifest rejected", "err", msg)
		}
	}
	for _, p := range snap.Pods {
		for _, w := range p.Warnings {
			msg := p.Source + ": " + w
			current[msg] = true
			if !s.reported[msg] {
				s.log.Warn("manifest warning", "file", p.Source, "pod", p.Pod.Namespace+"/"+p.Pod.Name, "warning", w)
			}
		}
	}
	s.reported = current
}

func newPod(e *manifest.Entry) *Pod {
	pod := e.Pod.DeepCopy()
	p := &Pod{Pod: pod, Source: e.Source, Doc: e.Doc, Warnings: e.Warnings}
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
		if err := w.Add(s.opts.Dir); err != nil {
			s.log.Warn("cannot watch manifest directory; falling back to periodic rescans", "dir", s.opts.Dir, "err", err)
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
			if IsManifest(ev.Name) || ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
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
		u.Pods = append(u.Pods, &pods.Pod{Pod: p.Pod, Origin: p.Origin(), SpecHash: p.SpecHash, StatusHash: p.StatusHash})
	}
	sort.Slice(u.Pods, func(i, j int) bool { return u.Pods[i].Pod.UID < u.Pods[j].Pod.UID })
	return u
}

// Origin is the pod's file and document, as "web.yaml#2".
func (p *Pod) Origin() string { return p.Source + "#" + strconv.Itoa(p.Doc) }
