package actuate

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
)

// Instances remembers the container instances an actuator already acted on,
// so that each is acted on once (another result change of the same failing
// instance does nothing; a restarted container is a new instance). It keeps
// at most a fixed number, least recently seen first out, so memory does not
// grow with the node's history. Safe for concurrent use.
type Instances struct {
	mu   sync.Mutex
	seen *lru.Cache // instance key -> struct{}
}

// NewInstances remembers up to n instances.
func NewInstances(n int) *Instances { return &Instances{seen: lru.New(n)} }

// First reports whether f's instance is seen for the first time, and
// remembers it. The instance is the container ID; without one (a running
// container has one), the pod UID and container name.
func (s *Instances) First(f Failure) bool {
	key := f.ContainerID
	if key == "" {
		key = string(f.Pod.UID) + "/" + f.Container
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, done := s.seen.Get(key); done {
		return false
	}
	s.seen.Add(key, struct{}{})
	return true
}

// Len is how many instances are remembered (at most n of NewInstances).
func (s *Instances) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen.Len()
}

// NodeBucket is a node's token bucket for an actuator's requests, as a
// client-go workqueue rate limiter on an injected clock (workqueue's own
// BucketRateLimiter reads the wall clock): When reserves a token and
// returns how long to wait for it. It holds burst tokens and gains one
// every interval.
type NodeBucket[T comparable] struct {
	clock   clock.PassiveClock
	mu      sync.Mutex
	limiter *rate.Limiter
}

// NewNodeBucket returns a full bucket.
func NewNodeBucket[T comparable](interval time.Duration, burst int, clk clock.PassiveClock) *NodeBucket[T] {
	return &NodeBucket[T]{clock: clk, limiter: rate.NewLimiter(rate.Every(interval), burst)}
}

// When reserves one token and returns the wait until it is available.
func (n *NodeBucket[T]) When(T) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	return n.limiter.ReserveN(now, 1).DelayFrom(now)
}

// Forget does nothing: the bucket is the node's, not an item's.
func (n *NodeBucket[T]) Forget(T) {}

// NumRequeues is 0: the bucket counts no item's retries.
func (n *NodeBucket[T]) NumRequeues(T) int { return 0 }
