package manager

import "k8s.io/apimachinery/pkg/types"

// workerSet indexes the workers by pod UID and then by (container, probe
// type) with a linear scan: a pod has a handful of probes, and one map entry
// per pod instead of one per probe saves about 90 bytes a probe. It is
// guarded by manager.mu.
type workerSet struct {
	pods map[types.UID][]*worker
	n    int
}

func newWorkerSet() workerSet { return workerSet{pods: map[types.UID][]*worker{}} }

// get returns the worker of a key.
func (s *workerSet) get(k probeKey) (*worker, bool) {
	for _, w := range s.pods[k.podUID] {
		if w.rs.ProbeType == k.probeType && w.rs.Container.Name == k.containerName {
			return w, true
		}
	}
	return nil, false
}

// put adds w under k; the caller has checked that k is free.
func (s *workerSet) put(k probeKey, w *worker) {
	s.pods[k.podUID] = append(s.pods[k.podUID], w)
	s.n++
}

// remove deletes the worker of a key, whichever it is (W4: by key).
func (s *workerSet) remove(k probeKey) {
	ws := s.pods[k.podUID]
	for i, w := range ws {
		if w.rs.ProbeType == k.probeType && w.rs.Container.Name == k.containerName {
			last := len(ws) - 1
			ws[i] = ws[last]
			ws[last] = nil
			ws = ws[:last]
			s.n--
			break
		}
	}
	if len(ws) == 0 {
		delete(s.pods, k.podUID)
	} else {
		s.pods[k.podUID] = ws
	}
}

// len returns the number of workers.
func (s *workerSet) len() int { return s.n }

// each calls f for every worker; f must not change the set.
func (s *workerSet) each(f func(*worker)) {
	for _, ws := range s.pods {
		for _, w := range ws {
			f(w)
		}
	}
}

// clear empties the set, calling f for every worker first.
func (s *workerSet) clear(f func(*worker)) {
	s.each(f)
	s.pods = map[types.UID][]*worker{}
	s.n = 0
}
