// Package restart is --liveness-action=restart (issue 19): a liveness or
// startup failure of an annotation probe stops the container the way the
// kubelet's own liveness kill does (pkg/kubelet/kuberuntime
// killContainer), through the node's container runtime (agent/kube/cri);
// the kubelet then sees the container exit and restarts it under the pod's
// restartPolicy, with its own CrashLoopBackOff. probed never starts or
// removes containers.
//
// Per failed container instance (container ID), once:
//
//  1. refused at once, with a Warning Event saying why (reason
//     LivenessProbeFailed or StartupProbeFailed): a terminating pod (the
//     kubelet stops liveness probes there), a container ID of another
//     runtime;
//  2. queued at the node's rate: a token bucket of RestartBurst (default 3)
//     refilled at one per RestartInterval (default 10 s), as evictions are;
//  3. the namespace must allow it (Options.Namespaces; by default only
//     namespaces labelled probed.io/liveness-actions=enabled): else the
//     Warning Event says why and nothing is done;
//  4. the container must be the pod's (cri.Client.Resolve: the full ID,
//     and the runtime's labels naming the pod's UID and the container's
//     name), else a Warning Event says why and nothing is done; and the
//     runtime's ContainerStatus must still say running (an instance that
//     already exited is the kubelet's business);
//  5. the kubelet's Normal Killing Event: "Container app failed liveness
//     probe, will be restarted" (without ", will be restarted" under
//     restartPolicy Never; spec K2);
//  6. the container's preStop hook (exec through ExecSync, httpGet, sleep),
//     given at most the grace period: the failed probe's
//     terminationGracePeriodSeconds, else the pod's (spec K3; the pod's
//     deletion grace period, which comes first there, never applies here);
//     a hook that fails is a Warning FailedPreStopHook Event "PreStopHook
//     failed" (the kubelet's: no hook output, which may hold secrets), one
//     cut at the grace period a log line;
//  7. CRI StopContainer with what is left of the grace period, at least 2 s
//     (the kubelet's minimumGracePeriodInSeconds).
//
// Steps 3, 4 and 7 are retried with backoff (RetryBase doubling to
// RetryMax, and the node's bucket) when the API server or the runtime
// cannot answer, MaxAttempts times; then a Warning RestartFailed Event. A
// retry does not run the preStop hook again. Container instances are
// remembered in an LRU of RememberInstances (default 4,096).
package restart

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/kube/cri"
	probeexec "github.com/probed/probed/plugins/exec"
	probehttp "github.com/probed/probed/plugins/http"
	"github.com/probed/probed/runtime"
)

// Event reasons: the kubelet's (pkg/kubelet/events) for what it would do
// itself, the eviction actuator's for the failure probed does not act on.
const (
	ReasonKilling             = "Killing"
	ReasonFailedPreStopHook   = "FailedPreStopHook"
	ReasonLivenessProbeFailed = "LivenessProbeFailed"
	ReasonStartupProbeFailed  = "StartupProbeFailed"
	ReasonRestartFailed       = "RestartFailed"
)

// LifecycleUserAgent is the User-Agent of an httpGet preStop hook that
// sets none: the kubelet's ("kube-lifecycle/<major>.<minor>").
const LifecycleUserAgent = "kube-lifecycle/1.37"

// NamespaceTimeout bounds one decision of the namespace policy (a GET of
// the Namespace by default).
const NamespaceTimeout = 30 * time.Second

// MinimumGracePeriod is the least grace period StopContainer is given, in
// seconds (the kubelet's minimumGracePeriodInSeconds).
const MinimumGracePeriod = 2

// Defaults of Options (docs/cluster.md "Liveness actions").
const (
	DefaultRestartInterval   = actuate.DefaultInterval
	DefaultRestartBurst      = actuate.DefaultBurst
	DefaultRetryBase         = actuate.DefaultRetryBase
	DefaultRetryMax          = actuate.DefaultRetryMax
	DefaultMaxAttempts       = actuate.DefaultMaxAttempts
	DefaultRememberInstances = actuate.DefaultRememberInstances
	DefaultWorkers           = 8
)

// Runtime is what the actuator needs of the container runtime
// (*cri.Client): ContainerID maps a pod status's "containerd://<id>" to the
// runtime's ID (a refusal without a call), Resolve confirms that the
// container is the pod's before anything acts on it.
type Runtime interface {
	ContainerID(statusID string) (string, error)
	Resolve(ctx context.Context, statusID string, want probeexec.PodContainer) (cri.Container, error)
	ContainerStatus(ctx context.Context, ctr cri.Container) (*runtimeapi.ContainerStatus, error)
	ExecSync(ctx context.Context, ctr cri.Container, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error)
	StopContainer(ctx context.Context, ctr cri.Container, gracePeriod int64) error
}

// NamespacePolicy decides whether containers of namespace may be
// restarted: "" allows it, anything else says why not (it is shown in the
// Event). An error means it could not decide (the step is retried).
type NamespacePolicy func(ctx context.Context, namespace string) (why string, err error)

// Options configure an Actuator. Zero values take the defaults above.
type Options struct {
	// Runtime stops containers and runs exec hooks. Required.
	Runtime Runtime
	// Recorder receives the Events (the agent's events.Tee). Required.
	Recorder runtime.Recorder
	// Namespaces decides where restarts are allowed. Required (the agent
	// passes the operator's selection, nsscope.Scope.Allows of
	// --liveness-action-namespaces).
	Namespaces NamespacePolicy
	// Probe returns the probe of the pod's container and type that failed
	// (the probed.io/probes annotation's), for its
	// terminationGracePeriodSeconds; nil, or a nil result: none.
	Probe func(pod *v1.Pod, container string, t runtime.ProbeType) *v1.Probe
	// HTTP runs httpGet preStop hooks (as a probe of the pod's IP with the
	// hook's action); nil: plugins/http's handler.
	HTTP runtime.Handler
	// HookContext, when set, derives the context of a pod's preStop hook
	// (the egress policy of the pod's probes, say); nil: as it is.
	HookContext func(ctx context.Context, pod *v1.Pod) context.Context
	// Clock drives the queue's delays, the node's bucket and the hooks'
	// grace periods.
	Clock clock.WithTicker
	// Pacing: the node's bucket of restarts (Burst at once, then one every
	// Interval), the backoff of retries, the attempts of one restart and
	// the container instances remembered.
	actuate.Pacing
	// Workers bounds the restarts in progress at once (a restart lasts up
	// to its grace period).
	Workers int
	// Log receives one line per decision (default slog.Default()).
	Log *slog.Logger
}

// Actuator implements actuate.Actuator with restarts. Create it with New
// and call Run, which owns the queue and its workers (call it with a
// cancelled context if the agent never starts).
type Actuator struct {
	opts      Options
	queue     workqueue.TypedRateLimitingInterface[*item]
	retries   workqueue.TypedRateLimiter[*item]
	node      *actuate.NodeBucket[*item]
	instances *actuate.Instances

	mu       sync.Mutex
	attempts map[*item]int
}

var _ actuate.Actuator = (*Actuator)(nil)

// item is one restart to do; a pointer, so a retried item is the same key.
type item struct {
	pod       *v1.Pod       // the snapshot of the failure (read-only)
	name      string        // the container's name
	container *v1.Container // its spec; nil when the pod's spec has none of that name
	statusID  string        // containerd://<id>
	ctr       cri.Container // the container, once Resolve confirmed it
	probe     runtime.ProbeType
	ref       *v1.ObjectReference
	grace     int64 // seconds left for the hook and the stop

	announced, hookDone bool // the Killing Event was recorded; the preStop hook ran
}

// New returns an Actuator. Errors: no Runtime, Recorder or Namespaces.
func New(opts Options) (*Actuator, error) {
	switch {
	case opts.Runtime == nil:
		return nil, errors.New("restart: --liveness-action=restart needs the container runtime (--container-runtime-endpoint)")
	case opts.Recorder == nil:
		return nil, errors.New("restart: no event recorder")
	case opts.Namespaces == nil:
		return nil, errors.New("restart: no namespace policy")
	}
	if opts.HTTP == nil {
		opts.HTTP = probehttp.New()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	opts.Pacing = opts.Pacing.WithDefaults()
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	a := &Actuator{
		opts:      opts,
		instances: actuate.NewInstances(opts.RememberInstances),
		attempts:  map[*item]int{},
	}
	a.retries, a.node = actuate.Limiters[*item](opts.Pacing, opts.Clock)
	// Created here so failures before Run are kept; Run stops its goroutine.
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(a.retries, workqueue.TypedRateLimitingQueueConfig[*item]{Clock: opts.Clock})
	return a, nil
}

// ContainerFailed acts on a liveness or startup Failure of a running
// container instance, once per instance. It never blocks.
func (a *Actuator) ContainerFailed(f actuate.Failure) {
	if f.Pod == nil || !a.instances.First(f) {
		return
	}
	it := &item{pod: f.Pod, name: f.Container, container: containerSpec(f.Pod, f.Container), statusID: f.ContainerID, probe: f.Probe,
		ref: runtime.ContainerRef(f.Pod, f.Container)}
	log := a.log(it)
	if f.Pod.DeletionTimestamp != nil {
		a.notRestarted(it, "the pod is terminating")
		return
	}
	if it.container == nil {
		a.notRestarted(it, "the pod's spec has no such container")
		return
	}
	if _, err := a.opts.Runtime.ContainerID(f.ContainerID); err != nil {
		a.notRestarted(it, err.Error())
		return
	}
	it.grace = a.gracePeriod(it)
	delay := a.node.When(it)
	log.Info("liveness action: restart queued", "in", delay, "gracePeriod", it.grace)
	a.queue.AddAfter(it, delay)
}

// gracePeriod is the kubelet's setTerminationGracePeriod for a probe kill
// (spec K3), in seconds.
func (a *Actuator) gracePeriod(it *item) int64 {
	pod := it.pod
	// The kubelet's first rule, a deletion grace period, never applies:
	// terminating pods are not restarted.
	if pod.Spec.TerminationGracePeriodSeconds == nil {
		return MinimumGracePeriod
	}
	if a.opts.Probe != nil {
		if p := a.opts.Probe(pod, it.name, it.probe); p != nil && p.TerminationGracePeriodSeconds != nil {
			return *p.TerminationGracePeriodSeconds
		}
	}
	return *pod.Spec.TerminationGracePeriodSeconds
}

// notRestarted records why it's failure is not acted on.
func (a *Actuator) notRestarted(it *item, why string) {
	reason := ReasonLivenessProbeFailed
	if it.probe == runtime.Startup {
		reason = ReasonStartupProbeFailed
	}
	a.opts.Recorder.Eventf(it.ref, v1.EventTypeWarning, reason, "Container %s failed %s probe; the container is not restarted: %s",
		it.name, it.probe.Lower(), why)
	a.log(it).Info("liveness action: not restarted", "why", why)
}

func (a *Actuator) log(it *item) *slog.Logger {
	return a.opts.Log.With("pod", it.pod.Namespace+"/"+it.pod.Name, "container", it.name, "containerID", it.statusID,
		"probe", it.probe.Lower())
}

// Run serves the queue with Workers workers until ctx ends, then shuts the
// queue down and waits for them; a restart in progress is abandoned (its
// calls are cancelled: the container may have had its stop signal, the
// kubelet restarts it as for any exit). It returns nil.
func (a *Actuator) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range a.opts.Workers {
		wg.Go(func() {
			for a.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	a.queue.ShutDown()
	wg.Wait()
	return nil
}

func (a *Actuator) processNext(ctx context.Context) bool {
	it, shutdown := a.queue.Get()
	if shutdown {
		return false
	}
	defer a.queue.Done(it)
	if ctx.Err() != nil {
		return true
	}
	err := a.restart(ctx, it)
	switch {
	case err == nil, ctx.Err() != nil:
		a.finish(it)
	default:
		a.mu.Lock()
		a.attempts[it]++
		n := a.attempts[it]
		a.mu.Unlock()
		log := a.log(it)
		if n >= a.opts.MaxAttempts {
			a.finish(it)
			log.Error("liveness action: restart failed, giving up", "attempts", n, "error", err)
			a.opts.Recorder.Eventf(it.ref, v1.EventTypeWarning, ReasonRestartFailed, "Could not restart the container after %d attempts: %v", n, err)
			return true
		}
		delay := a.retries.When(it)
		log.Warn("liveness action: restart failed, will retry", "attempt", n, "of", a.opts.MaxAttempts, "in", delay, "error", err)
		a.queue.AddAfter(it, delay)
	}
	return true
}

func (a *Actuator) finish(it *item) {
	a.retries.Forget(it)
	a.mu.Lock()
	delete(a.attempts, it)
	a.mu.Unlock()
}

// restart does steps 3 to 7 of the package doc for it; an error is worth a
// retry.
func (a *Actuator) restart(ctx context.Context, it *item) error {
	log := a.log(it)
	nctx, cancel := context.WithTimeout(ctx, NamespaceTimeout)
	why, err := a.opts.Namespaces(nctx, it.pod.Namespace)
	cancel()
	if err != nil {
		return err
	}
	if why != "" {
		a.notRestarted(it, why)
		return nil
	}
	if it.ctr.ID == "" {
		want := probeexec.PodContainer{Namespace: it.pod.Namespace, Pod: it.pod.Name, PodUID: it.pod.UID, Container: it.name}
		ctr, err := a.opts.Runtime.Resolve(ctx, it.statusID, want)
		switch {
		case errors.Is(err, cri.ErrNotThePods):
			a.notRestarted(it, err.Error())
			return nil
		case status.Code(err) == codes.NotFound:
			log.Info("liveness action: nothing to restart, the container is gone")
			return nil
		case err != nil:
			return err
		}
		it.ctr = ctr
	}
	st, err := a.opts.Runtime.ContainerStatus(ctx, it.ctr)
	switch {
	case status.Code(err) == codes.NotFound:
		log.Info("liveness action: nothing to restart, the container is gone")
		return nil
	case err != nil:
		return fmt.Errorf("ContainerStatus: %w", err)
	case st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING:
		log.Info("liveness action: nothing to restart, the container is not running", "state", st.GetState().String())
		return nil
	}
	if !it.announced {
		it.announced = true
		a.opts.Recorder.Eventf(it.ref, v1.EventTypeNormal, ReasonKilling, "%s", killMessage(it))
	}
	if hook := preStop(it.container); hook != nil && it.grace > 0 && !it.hookDone {
		it.hookDone = true
		it.grace -= a.runPreStop(ctx, it, hook)
	}
	grace := max(it.grace, MinimumGracePeriod)
	start := a.opts.Clock.Now()
	err = a.opts.Runtime.StopContainer(ctx, it.ctr, grace)
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("StopContainer: %w", err)
	}
	log.Info("liveness action: container stopped", "gracePeriod", grace, "took", a.opts.Clock.Since(start))
	return nil
}

// killMessage is the kubelet's Killing message (spec K2): ", will be
// restarted" unless the restart policy (the container's own, else the
// pod's) is Never.
func killMessage(it *item) string {
	msg := fmt.Sprintf("Container %s failed %s probe", it.name, it.probe.Lower())
	restart := it.pod.Spec.RestartPolicy != v1.RestartPolicyNever
	if p := it.container.RestartPolicy; p != nil {
		restart = *p != v1.ContainerRestartPolicyNever
	}
	if restart {
		msg += ", will be restarted"
	}
	return msg
}

// preStop returns the container's preStop hook, or nil.
func preStop(c *v1.Container) *v1.LifecycleHandler {
	if c.Lifecycle == nil {
		return nil
	}
	return c.Lifecycle.PreStop
}

// containerSpec returns the pod's container (or init container) name.
func containerSpec(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
