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
//
// The files: source.go the Source and its pods; scan.go one scan of the
// directory; report.go GET /manifests' report; stale.go the pods kept at
// their last valid version; conflicts.go the rule that a pod is defined
// once; watch.go the watch and pods.Source.
package source

import (
	"crypto/sha256"
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

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime/fileread"
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
	// Registerer, when set, gets the gauge
	// probed_manifest_documents_rejected (the report's rejections).
	Registerer prometheus.Registerer
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
	if opts.Registerer != nil {
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "probed_manifest_documents_rejected",
			Help: "Manifest documents (or whole files) the last scan rejected: not readable, not decoding, not valid, or in conflict (GET /manifests).",
		}, func() float64 { return float64(s.Report().RejectedDocuments()) })
		if err := opts.Registerer.Register(g); err != nil {
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

// Origin is the pod's file and document, as "web.yaml#2".
func (p *Pod) Origin() string { return p.Source + "#" + strconv.Itoa(p.Doc) }
