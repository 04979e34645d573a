package actuate

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

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

// NodeBucket is a node's token bucket for an actuator's attempts, on an
// injected clock: Reserve takes a token and returns how long to wait for
// it. It holds burst tokens and gains one every interval.
type NodeBucket struct {
	clock   clock.PassiveClock
	mu      sync.Mutex
	limiter *rate.Limiter
}

// NewNodeBucket returns a full bucket.
func NewNodeBucket(interval time.Duration, burst int, clk clock.PassiveClock) *NodeBucket {
	return &NodeBucket{clock: clk, limiter: rate.NewLimiter(rate.Every(interval), burst)}
}

// Reserve takes one token and returns the wait until it is available.
func (n *NodeBucket) Reserve() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	return n.limiter.ReserveN(now, 1).DelayFrom(now)
}
