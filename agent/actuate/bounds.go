package actuate

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
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

// Pacing bounds the work of a cluster actuator (evictions, restarts; docs/
// cluster.md "Liveness actions"): the node's token bucket (Burst actions at
// once, then one every Interval), the per-item exponential backoff of
// retries (RetryBase doubling up to RetryMax), the attempts of one action
// (MaxAttempts) and the container instances remembered (RememberInstances).
// Zero fields take the defaults below (WithDefaults).
type Pacing struct {
	Interval            time.Duration
	Burst               int
	RetryBase, RetryMax time.Duration
	MaxAttempts         int
	RememberInstances   int
}

// The defaults of Pacing: 3 actions at once, then one per 10 s per node;
// retries from 5 s to 5 min; 5 attempts; 4,096 instances remembered.
const (
	DefaultInterval          = 10 * time.Second
	DefaultBurst             = 3
	DefaultRetryBase         = 5 * time.Second
	DefaultRetryMax          = 5 * time.Minute
	DefaultMaxAttempts       = 5
	DefaultRememberInstances = 4096
)

// WithDefaults returns p with its zero (or inconsistent) fields defaulted.
func (p Pacing) WithDefaults() Pacing {
	if p.Interval <= 0 {
		p.Interval = DefaultInterval
	}
	if p.Burst <= 0 {
		p.Burst = DefaultBurst
	}
	if p.RetryBase <= 0 {
		p.RetryBase = DefaultRetryBase
	}
	if p.RetryMax < p.RetryBase {
		p.RetryMax = max(DefaultRetryMax, p.RetryBase)
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.RememberInstances <= 0 {
		p.RememberInstances = DefaultRememberInstances
	}
	return p
}

// Limiters returns the work queue's rate limiter of a cluster actuator
// paced by p (defaulted): an item waits for the later of its own backoff
// and the node's bucket, which it also returns.
func Limiters[T comparable](p Pacing, clk clock.PassiveClock) (workqueue.TypedRateLimiter[T], *NodeBucket[T]) {
	p = p.WithDefaults()
	node := NewNodeBucket[T](p.Interval, p.Burst, clk)
	return workqueue.NewTypedMaxOfRateLimiter[T](workqueue.NewTypedItemExponentialFailureRateLimiter[T](p.RetryBase, p.RetryMax), node), node
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
