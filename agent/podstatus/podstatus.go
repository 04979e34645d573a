// Package podstatus is the table both of the agent's pod status caches keep
// their pods in — agent/store in manifest mode, agent/kube/podsource in
// cluster mode: each pod's object and its current status, keyed by pod UID
// with a namespace/name index, and the copies the API and the prober
// manager read from it. It does no locking: its owner guards a Table with
// its own lock, since its changes to a pod and to the table go together.
package podstatus

import (
	"iter"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Entry is one pod: its object (treated as read-only; for the informer's
// pods it is shared with the cache) and the status its owner computed.
type Entry struct {
	Pod    *v1.Pod
	Status v1.PodStatus
}

// WithStatus returns a deep copy of the pod carrying the entry's status.
func (e *Entry) WithStatus() *v1.Pod {
	p := e.Pod.DeepCopy()
	p.Status = *e.Status.DeepCopy()
	return p
}

// Table holds entries by pod UID and namespace/name. The zero Table is
// empty and ready to use. Not safe for concurrent use.
type Table struct {
	byUID  map[types.UID]*Entry
	byName map[types.NamespacedName]types.UID
}

// Get returns the entry of pod uid, which the caller may change in place
// (under its lock) except for the pod's namespace and name.
func (t *Table) Get(uid types.UID) (*Entry, bool) {
	e, ok := t.byUID[uid]
	return e, ok
}

// Put adds e under its pod's UID, replacing the entry that had it.
func (t *Table) Put(e *Entry) {
	if t.byUID == nil {
		t.byUID = map[types.UID]*Entry{}
		t.byName = map[types.NamespacedName]types.UID{}
	}
	uid := e.Pod.UID
	if old, ok := t.byUID[uid]; ok {
		t.unindex(uid, old)
	}
	t.byUID[uid] = e
	t.byName[nameOf(e.Pod)] = uid
}

// Delete removes pod uid; an unknown uid is a no-op.
func (t *Table) Delete(uid types.UID) {
	if old, ok := t.byUID[uid]; ok {
		t.unindex(uid, old)
		delete(t.byUID, uid)
	}
}

// unindex drops old's name from the index, unless a newer pod of that name
// (a pod recreated under the same name with a new UID) holds it.
func (t *Table) unindex(uid types.UID, old *Entry) {
	if name := nameOf(old.Pod); t.byName[name] == uid {
		delete(t.byName, name)
	}
}

// Len returns the number of pods.
func (t *Table) Len() int { return len(t.byUID) }

// All yields every entry, in no particular order. The caller may change an
// entry's status while ranging, but not add or delete pods.
func (t *Table) All() iter.Seq2[types.UID, *Entry] {
	return func(yield func(types.UID, *Entry) bool) {
		for uid, e := range t.byUID {
			if !yield(uid, e) {
				return
			}
		}
	}
}

// Status returns a copy of pod uid's status (manager.StatusProvider's
// GetPodStatus), false for a pod not (or no longer) known.
func (t *Table) Status(uid types.UID) (v1.PodStatus, bool) {
	e, ok := t.byUID[uid]
	if !ok {
		return v1.PodStatus{}, false
	}
	return *e.Status.DeepCopy(), true
}

// Pod returns a copy of pod uid with its status.
func (t *Table) Pod(uid types.UID) (*v1.Pod, bool) {
	e, ok := t.byUID[uid]
	if !ok {
		return nil, false
	}
	return e.WithStatus(), true
}

// PodByName returns a copy of the pod namespace/name with its status.
func (t *Table) PodByName(namespace, name string) (*v1.Pod, bool) {
	uid, ok := t.byName[types.NamespacedName{Namespace: namespace, Name: name}]
	if !ok {
		return nil, false
	}
	return t.byUID[uid].WithStatus(), true
}

// Names returns the namespace and name of every pod, sorted by namespace
// and name (the order of the agent API's /pods, like kubectl's): the list
// a reader that copies one pod at a time (PodByName) walks.
func (t *Table) Names() []types.NamespacedName {
	out := make([]types.NamespacedName, 0, len(t.byName))
	for name := range t.byName {
		out = append(out, name)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Pods returns copies of all pods with their statuses, sorted by namespace
// and name (the order of the agent API's /pods, like kubectl's).
func (t *Table) Pods() []*v1.Pod {
	out := make([]*v1.Pod, 0, len(t.byUID))
	for _, e := range t.byUID {
		out = append(out, e.WithStatus())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func nameOf(p *v1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}
