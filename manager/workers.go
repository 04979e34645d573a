package manager

import "k8s.io/apimachinery/pkg/types"

// workerSet indexes the workers by pod UID: one map entry per pod, whose
// workers form a list through worker.next, searched linearly by (container,
// probe type) — a pod has a handful of probes. Against a map entry per probe
// it saves about 80 bytes a probe. It is guarded by manager.mu.
type workerSet struct {
	pods map[types.UID]*worker
	n    int
}

func newWorkerSet() workerSet { return workerSet{pods: map[types.UID]*worker{}} }

func (w *worker) is(k probeKey) bool {
	return w.rs.ProbeType == k.probeType && w.rs.Container.Name == k.containerName
}

// get returns the worker of a key.
func (s *workerSet) get(k probeKey) (*worker, bool) {
	for w := s.pods[k.podUID]; w != nil; w = w.next {
		if w.is(k) {
			return w, true
		}
	}
	return nil, false
}

// put adds w under k; the caller has checked that k is free.
func (s *workerSet) put(k probeKey, w *worker) {
	w.next = s.pods[k.podUID]
	s.pods[k.podUID] = w
	s.n++
}

// remove deletes the worker of a key, whichever it is (W4: by key).
func (s *workerSet) remove(k probeKey) {
	head := s.pods[k.podUID]
	var prev *worker
	for w := head; w != nil; prev, w = w, w.next {
		if !w.is(k) {
			continue
		}
		if prev == nil {
			head = w.next
		} else {
			prev.next = w.next
		}
		w.next = nil
		s.n--
		break
	}
	if head == nil {
		delete(s.pods, k.podUID)
	} else {
		s.pods[k.podUID] = head
	}
}

// len returns the number of workers.
func (s *workerSet) len() int { return s.n }

// pod calls f for every worker of a pod; f must not change the set.
func (s *workerSet) pod(uid types.UID, f func(*worker)) {
	for w := s.pods[uid]; w != nil; w = w.next {
		f(w)
	}
}

// each calls f for every worker; f must not change the set.
func (s *workerSet) each(f func(*worker)) {
	for _, head := range s.pods {
		for w := head; w != nil; w = w.next {
			f(w)
		}
	}
}

// clear empties the set, calling f for every worker first.
func (s *workerSet) clear(f func(*worker)) {
	s.each(f)
	s.pods = map[types.UID]*worker{}
	s.n = 0
}
