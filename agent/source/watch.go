package source

import (
	"context"
	"path/filepath"
	"sort"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/probed/probed/agent/pods"
)

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
