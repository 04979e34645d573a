package runtime

import (
	"sync"
	"sync/atomic"
)

// Shares: what one pod and one namespace may hold of a lane.
//
// A lane is a bounded pool shared by every pod of the node. Without a bound
// per owner, one pod whose probes hang (a hostile tenant, or a broken
// target with a long timeout) fills the lane, and every other pod's probes
// wait behind it (issue 17 §2: 300 probes of one pod against a target that
// hangs 20 s held all 256 network slots; 20 other pods then ran 9 of 60
// runs). With shares, a run whose pod already holds its share of the lane's
// slots, or whose namespace holds its share, is parked instead of taking a
// slot: Submit returns at once (the scheduler's feeder goes on with the
// next pod's run, so nobody else waits behind the parked one), and the run
// starts in the slot of its own pod's or namespace's next run that ends. A
// hostile pod's hung probes then delay that pod (and at most its
// namespace's share) alone.
//
// Invariant: a parked run's pod or namespace has a run in flight, so some
// run of that namespace ends later and takes the next parked run along; runs
// are never stranded. Within a namespace, pods whose own share allows them
// to run take turns (a FIFO of pods), and each pod's runs keep their order.
//
// The state is per owner present in the lane (a pod or namespace with a
// run in flight or parked) and goes when it has none; it is sharded by
// namespace so that owners of different namespaces never share a lock.

// Owner names whom a probe run belongs to, for the lanes' shares: a pod and
// its namespace, each as a hash of its identity (any stable 64-bit values:
// two owners with the same value share one bound).
type Owner struct{ Pod, Namespace uint64 }

// Owned is a Task that names its owner. With shares (Options.PodShare,
// Options.NamespaceShare), Submit bounds the slots of a lane held by one
// owner's tasks; a Task that is not Owned is never bounded.
type Owned interface {
	Task
	Owner() Owner
}

// shareShards splits the shares' state by namespace.
const shareShards = 16

// shares bound the slots of one lane held per pod and per namespace.
type shares struct {
	podSlots, nsSlots int
	parked            atomic.Int64  // runs waiting for their share now
	parkedTotal       atomic.Uint64 // runs that ever waited
	shards            [shareShards]shareShard
}

type shareShard struct {
	mu   sync.Mutex
	pods map[uint64]*podShare
	nss  map[uint64]*nsShare
}

// podShare is one pod's runs in a lane.
type podShare struct {
	ns      *nsShare
	running int       // in flight (holding or waiting for a pool slot)
	waiting taskQueue // parked runs, in order
	turn    bool      // queued in ns.turns
}

// nsShare is one namespace's runs in a lane.
type nsShare struct {
	running int
	pods    int // podShares alive
	// turns are the namespace's pods with parked runs that their own share
	// allows to start: the next slot the namespace frees goes to the first.
	turns []*podShare
}

// newShares returns the bounds of a lane of size slots: pod and ns are
// fractions of it (each bound at least one slot); nil when both are zero
// (no bound).
func newShares(size int, pod, ns float64) *shares {
	if pod <= 0 && ns <= 0 {
		return nil
	}
	s := &shares{podSlots: slotsOf(size, pod), nsSlots: slotsOf(size, ns)}
	for i := range s.shards {
		s.shards[i].pods = map[uint64]*podShare{}
		s.shards[i].nss = map[uint64]*nsShare{}
	}
	return s
}

// slotsOf is share×size rounded down, at least 1; the whole lane for a
// share of zero, or of one or more.
func slotsOf(size int, share float64) int {
	if share <= 0 || share >= 1 {
		return size
	}
	return max(1, int(share*float64(size)))
}

func (s *shares) shard(o Owner) *shareShard { return &s.shards[o.Namespace%shareShards] }

// acquire takes a slot for t when its pod and namespace are within their
// shares and report true; otherwise it parks t and reports false.
func (s *shares) acquire(o Owner, t Task) bool {
	sh := s.shard(o)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.pods[o.Pod]
	if p == nil {
		n := sh.nss[o.Namespace]
		if n == nil {
			n = &nsShare{}
			sh.nss[o.Namespace] = n
		}
		n.pods++
		p = &podShare{ns: n}
		sh.pods[o.Pod] = p
	}
	n := p.ns
	if p.waiting.len() == 0 && p.running < s.podSlots && n.running < s.nsSlots {
		p.running++
		n.running++
		return true
	}
	p.waiting.push(t)
	if !p.turn && p.running < s.podSlots {
		n.turns = append(n.turns, p)
		p.turn = true
	}
	s.parked.Add(1)
	s.parkedTotal.Add(1)
	return false
}

// release returns the slot of a run of o that ended and hands it to the
// next parked run of o's namespace whose pod may run, which it returns (the
// caller runs it in that slot); nil when there is none.
func (s *shares) release(o Owner) Task {
	sh := s.shard(o)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.pods[o.Pod]
	if p == nil {
		return nil // not acquired through s (cannot happen: acquire made it)
	}
	n := p.ns
	p.running--
	n.running--
	if p.waiting.len() > 0 && !p.turn && p.running < s.podSlots {
		n.turns = append(n.turns, p)
		p.turn = true
	}
	var next Task
	for next == nil && len(n.turns) > 0 && n.running < s.nsSlots {
		q := n.turns[0]
		n.turns[0] = nil
		n.turns = n.turns[1:]
		q.turn = false
		if q.waiting.len() == 0 || q.running >= s.podSlots {
			continue
		}
		next = q.waiting.pop()
		q.running++
		n.running++
		s.parked.Add(-1)
		if q.waiting.len() > 0 && q.running < s.podSlots {
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
	return next
}

// taskQueue is a FIFO of tasks.
type taskQueue struct {
	items []Task
	head  int
}

func (q *taskQueue) len() int { return len(q.items) - q.head }

func (q *taskQueue) push(t Task) { q.items = append(q.items, t) }

func (q *taskQueue) pop() Task {
	t := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head >= 32 && q.head*2 >= len(q.items) {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return t
}
