package tenant

import (
	"sync"
	"sync/atomic"
)

// Lane: what one pod and one namespace may hold of a pool lane.
//
// A lane is a bounded pool shared by every pod of the node. Without a bound
// per owner, one pod whose probes hang (a hostile tenant, or a broken
// target with a long timeout) fills the lane, and every other pod's probes
// wait behind it: 300 probes of one pod against a target that hangs 20 s
// held all 256 network slots, and 20 other pods then ran 9 of 60 runs.
// With a Lane, a run whose pod already holds its share of the lane's
// slots, or whose namespace holds its share, is parked instead of taking a
// slot: Acquire returns false at once (the caller goes on with the next
// pod's run, so nobody else waits behind the parked one), and the run
// starts in the slot of its own pod's or namespace's next run that ends
// (Release hands it over). A hostile pod's hung probes then delay that pod
// (and at most its namespace's share) alone.
//
// Invariant: a parked run's pod or namespace has a run in flight, so some
// run of that namespace ends later and takes the next parked run along;
// runs are never stranded. Within a namespace, pods whose own share allows
// them to run take turns (a FIFO of pods), and each pod's runs keep their
// order.
//
// The state is per owner present in the lane (a pod or namespace with a
// run in flight or parked) and goes when it has none; it is sharded by
// namespace so that owners of different namespaces never share a lock.

// Owner names whom a cost is charged to: a pod and its namespace, each as
// a hash of its identity (any stable 64-bit values: two owners with the
// same value share one bound).
type Owner struct{ Pod, Namespace uint64 }

// laneShards splits a lane's state by namespace.
const laneShards = 16

// Lane bounds the slots of one pool lane held per pod and per namespace;
// T is the pool's task. Its methods are safe for concurrent use.
type Lane[T any] struct {
	podSlots, nsSlots int
	parked            atomic.Int64  // runs waiting for their share now
	parkedTotal       atomic.Uint64 // runs that ever waited
	shards            [laneShards]laneShard[T]
}

type laneShard[T any] struct {
	mu   sync.Mutex
	pods map[uint64]*podLane[T]
	nss  map[uint64]*nsLane[T]
}

// podLane is one pod's runs in a lane.
type podLane[T any] struct {
	ns      *nsLane[T]
	running int     // in flight (holding or waiting for a pool slot)
	waiting fifo[T] // parked runs, in order
	turn    bool    // queued in ns.turns
}

// nsLane is one namespace's runs in a lane.
type nsLane[T any] struct {
	running int
	pods    int // podLanes alive
	// turns are the namespace's pods with parked runs that their own share
	// allows to start: the next slot the namespace frees goes to the first.
	turns []*podLane[T]
}

// NewLane returns the bounds of a lane of size slots: podShare and
// namespaceShare are fractions of it (each bound at least one slot, see
// Slots); nil when both are zero (no bound: the kubelet has no shared pool
// to bound). The agent's flags: --pod-pool-share (default 0.125) and
// --namespace-pool-share (default 0.25).
func NewLane[T any](size int, podShare, namespaceShare float64) *Lane[T] {
	if podShare <= 0 && namespaceShare <= 0 {
		return nil
	}
	l := &Lane[T]{podSlots: Slots(size, podShare), nsSlots: Slots(size, namespaceShare)}
	for i := range l.shards {
		l.shards[i].pods = map[uint64]*podLane[T]{}
		l.shards[i].nss = map[uint64]*nsLane[T]{}
	}
	return l
}

// Slots is a share of size units: share×size rounded down, at least 1;
// all of them for a share of zero, or of one or more.
func Slots(size int, share float64) int {
	if share <= 0 || share >= 1 {
		return size
	}
	return max(1, int(share*float64(size)))
}

// PodSlots and NamespaceSlots are the most slots one pod's, and one
// namespace's, runs hold at once.
func (l *Lane[T]) PodSlots() int       { return l.podSlots }
func (l *Lane[T]) NamespaceSlots() int { return l.nsSlots }

// Parked counts the runs waiting now for their share; ParkedTotal every
// run that ever waited.
func (l *Lane[T]) Parked() int64       { return l.parked.Load() }
func (l *Lane[T]) ParkedTotal() uint64 { return l.parkedTotal.Load() }

func (l *Lane[T]) shard(o Owner) *laneShard[T] { return &l.shards[o.Namespace%laneShards] }

// Acquire takes a slot for t when its pod and namespace are within their
// shares and reports true; otherwise it parks t and reports false (t is
// handed back by a later Release of its namespace).
func (l *Lane[T]) Acquire(o Owner, t T) bool {
	sh := l.shard(o)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.pods[o.Pod]
	if p == nil {
		n := sh.nss[o.Namespace]
		if n == nil {
			n = &nsLane[T]{}
			sh.nss[o.Namespace] = n
		}
		n.pods++
		p = &podLane[T]{ns: n}
		sh.pods[o.Pod] = p
	}
	n := p.ns
	if p.waiting.len() == 0 && p.running < l.podSlots && n.running < l.nsSlots {
		p.running++
		n.running++
		return true
	}
	p.waiting.push(t)
	if !p.turn && p.running < l.podSlots {
		n.turns = append(n.turns, p)
		p.turn = true
	}
	l.parked.Add(1)
	l.parkedTotal.Add(1)
	return false
}

// Release returns the slot of a run of o that ended and hands it to the
// next parked run of o's namespace whose pod may run, which it returns
// with true (the caller runs it in that slot, and releases it in turn);
// false when there is none.
func (l *Lane[T]) Release(o Owner) (next T, ok bool) {
	sh := l.shard(o)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.pods[o.Pod]
	if p == nil {
		return next, false // not acquired through l (cannot happen: Acquire made it)
	}
	n := p.ns
	p.running--
	n.running--
	if p.waiting.len() > 0 && !p.turn && p.running < l.podSlots {
		n.turns = append(n.turns, p)
		p.turn = true
	}
	for !ok && len(n.turns) > 0 && n.running < l.nsSlots {
		q := n.turns[0]
		n.turns[0] = nil
		n.turns = n.turns[1:]
		q.turn = false
		if q.waiting.len() == 0 || q.running >= l.podSlots {
			continue
		}
		next, ok = q.waiting.pop(), true
		q.running++
		n.running++
		l.parked.Add(-1)
		if q.waiting.len() > 0 && q.running < l.podSlots {
			n.turns = append(n.turns, q)
			q.turn = true
		}
	}
	if len(n.turns) == 0 {
		n.turns = nil // let the backing array go
	}
	if p.running == 0 && p.waiting.len() == 0 {
		delete(sh.pods, o.Pod)
		n.pods--
	}
	if n.pods == 0 && n.running == 0 {
		delete(sh.nss, o.Namespace)
	}
	return next, ok
}

// fifo is a queue of tasks.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

func (q *fifo[T]) push(t T) { q.items = append(q.items, t) }

func (q *fifo[T]) pop() T {
	var zero T
	t := q.items[q.head]
	q.items[q.head] = zero
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head >= 32 && q.head*2 >= len(q.items) {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return t
}
