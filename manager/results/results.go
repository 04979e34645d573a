// Package results holds the probe results managers: one cache per probe type,
// keyed by container ID, that publishes a change of a container's result on a
// channel. It follows the kubelet's pkg/kubelet/prober/results (spec §4, R1–R5).
package results

import (
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Result is the cached outcome of a probe (spec R1).
type Result int

const (
	// Unknown is the initial value of a startup probe (W1); it is never
	// produced by a probe run.
	Unknown Result = iota - 1
	// Success: the probe passed, or its failures have not reached the threshold.
	Success
	// Failure: the probe failed failureThreshold times in a row (or the
	// container is not running, W8).
	Failure
)

// String returns "Success", "Failure" or, for anything else, "UNKNOWN" (R1, RS4).
func (r Result) String() string {
	switch r {
	case Success:
		return "Success"
	case Failure:
		return "Failure"
	}
	return "UNKNOWN"
}

// ToPrometheusType returns 0 for Success, 1 for Failure and -1 otherwise (R1, RS3).
func (r Result) ToPrometheusType() float64 {
	switch r {
	case Success:
		return 0
	case Failure:
		return 1
	}
	return -1
}

// ContainerID is a container runtime's ID of a container: Type is the
// runtime ("containerd", "docker", "test"), ID its identifier.
type ContainerID struct {
	Type string
	ID   string
}

// ParseContainerID parses "type://id" ("containerd://abc" → {containerd abc}),
// ignoring surrounding double quotes. Like the kubelet's, it yields an empty
// ContainerID for anything that does not split into exactly two parts at "://".
func ParseContainerID(s string) ContainerID {
	parts := strings.Split(strings.Trim(s, "\""), "://")
	if len(parts) != 2 {
		return ContainerID{}
	}
	return ContainerID{Type: parts[0], ID: parts[1]}
}

// String returns "type://id" (the kubelet's form; "://" for an empty ID).
func (c ContainerID) String() string {
	return c.Type + "://" + c.ID
}

// IsEmpty reports whether both Type and ID are empty.
func (c ContainerID) IsEmpty() bool { return c.Type == "" && c.ID == "" }

// Update is sent on a Manager's channel when a container's result changes (R2).
type Update struct {
	ContainerID ContainerID
	Result      Result
	PodUID      types.UID
}

// Manager caches probe results by container ID (spec §4).
type Manager interface {
	// Get returns the cached result of the container and whether there is one (R5).
	Get(ContainerID) (Result, bool)
	// Set caches the result and, when there was no entry or it differed,
	// sends an Update (R3). The send blocks while the channel's 20 slots are
	// full (R4): one consumer must drain Updates.
	Set(ContainerID, Result, *v1.Pod)
	// Remove drops the cached result without sending an Update (R5).
	Remove(ContainerID)
	// Updates returns the one channel of changes (R5); capacity 20 (R4).
	Updates() <-chan Update
}

// UpdatesCapacity is the capacity of a Manager's updates channel (R4).
const UpdatesCapacity = 20

type manager struct {
	mu      sync.RWMutex
	cache   map[ContainerID]Result
	updates chan Update
}

// NewManager returns an empty results Manager.
func NewManager() Manager {
	return &manager{
		cache:   make(map[ContainerID]Result),
		updates: make(chan Update, UpdatesCapacity),
	}
}

func (m *manager) Get(id ContainerID) (Result, bool) {
	m.mu.RLock()
	r, ok := m.cache[id]
	m.mu.RUnlock()
	return r, ok
}

func (m *manager) Set(id ContainerID, r Result, pod *v1.Pod) {
	if m.setInternal(id, r) {
		var uid types.UID
		if pod != nil {
			uid = pod.UID
		}
		m.updates <- Update{ContainerID: id, Result: r, PodUID: uid}
	}
}

// setInternal stores r and reports whether it changed the cache. A Set
// that changes nothing, what nearly every probe run does, takes the read
// lock only: runs of many workers do not queue on the write lock.
func (m *manager) setInternal(id ContainerID, r Result) bool {
	m.mu.RLock()
	prev, ok := m.cache[id]
	m.mu.RUnlock()
	if ok && prev == r {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, ok = m.cache[id]
	if ok && prev == r {
		return false
	}
	m.cache[id] = r
	return true
}

func (m *manager) Remove(id ContainerID) {
	m.mu.Lock()
	delete(m.cache, id)
	m.mu.Unlock()
}

func (m *manager) Updates() <-chan Update { return m.updates }
