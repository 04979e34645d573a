// Package restart is --liveness-action=restart, a step of the liveness
// actuator (agent/actuate): a liveness or startup failure of a probe probed
// runs stops the container the way the kubelet's own liveness kill does
// (pkg/kubelet/kuberuntime killContainer), through the node's container
// runtime (agent/kube/cri); the kubelet then sees the container exit and
// restarts it under the pod's restartPolicy, with its own
// CrashLoopBackOff. probed never starts or removes containers.
//
// Per failed container instance (container ID), once:
//
//  1. refused at once, with a Warning Event saying why (reason
//     LivenessProbeFailed or StartupProbeFailed): a terminating pod (the
//     kubelet stops liveness probes there), a container the pod's spec
//     does not have, a container ID of another runtime; the agent puts the
//     namespace scope around the step (nsscope.Guard), so a namespace not
//     selected is refused here too, before any worker or token;
//  2. queued (actuate.Queue): DefaultWorkers workers, of which one
//     namespace holds at most a quarter, and the node's bucket of 3
//     restarts refilled at one per 10 s, which every attempt takes a token
//     of;
//  3. the container must be the pod's (cri.Client.Resolve: the full ID,
//     and the runtime's labels naming the pod's UID and the container's
//     name), else a Warning Event says why and nothing is done; and the
//     runtime's ContainerStatus must still say running (an instance that
//     already exited is the kubelet's business);
//  4. the kubelet's Normal Killing Event: "Container app failed liveness
//     probe, will be restarted" (without ", will be restarted" under
//     restartPolicy Never; spec K2);
//  5. the container's preStop hook (exec through ExecSync, httpGet, sleep),
//     given at most the grace period: the failed probe's
//     terminationGracePeriodSeconds, else the pod's (spec K3; the pod's
//     deletion grace period, which comes first there, never applies here),
//     capped at MaxGracePeriod (--liveness-action-max-grace-period, 1 min
//     by default: a restart holds a worker, and a tenant's hour-long grace
//     period and preStop hook would hold it for an hour; the kubelet caps
//     the grace periods of its own evictions likewise, with
//     --eviction-max-pod-grace-period); a hook that fails is a Warning
//     FailedPreStopHook Event "PreStopHook failed" (the kubelet's: no hook
//     output, which may hold secrets), one cut at the grace period a log
//     line;
//  6. CRI StopContainer with what is left of the grace period, at least 2 s
//     (the kubelet's minimumGracePeriodInSeconds): the runtime kills the
//     container when it has not exited by then.
//
// Steps 3 and 6 are tried again after a backoff when the runtime cannot
// answer (actuate.Pacing), MaxAttempts times; then a Warning RestartFailed
// Event. An attempt does not run the preStop hook again.
package restart

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/kube/cri"
	probeexec "github.com/probed/probed/plugins/exec"
	probehttp "github.com/probed/probed/plugins/http"
	"github.com/probed/probed/runtime"
)

// Event reasons: the kubelet's (pkg/kubelet/events) for what it would do
// itself, the actuator's for the failure probed does not act on.
const (
	ReasonKilling             = "Killing"
	ReasonFailedPreStopHook   = "FailedPreStopHook"
	ReasonLivenessProbeFailed = actuate.ReasonLivenessProbeFailed
	ReasonStartupProbeFailed  = actuate.ReasonStartupProbeFailed
	ReasonRestartFailed       = "RestartFailed"
)

// LifecycleUserAgent is the User-Agent of an httpGet preStop hook that
// sets none: the kubelet's ("kube-lifecycle/<major>.<minor>").
const LifecycleUserAgent = "kube-lifecycle/1.37"

// MinimumGracePeriod is the least grace period StopContainer is given, in
// seconds (the kubelet's minimumGracePeriodInSeconds).
const MinimumGracePeriod = 2

// DefaultMaxGracePeriod is the default of Options.MaxGracePeriod
// (--liveness-action-max-grace-period): twice the API's default
// terminationGracePeriodSeconds of 30 s, so that a pod's default grace
// period is never cut.
const DefaultMaxGracePeriod = time.Minute

// DefaultWorkers is the restarts in progress at once (actuate.Options.
// Workers of the restart queue).
const DefaultWorkers = 8

// Texts are the queue's texts of restarts (actuate.Texts).
var Texts = actuate.Texts{
	Acting:       "the container is to be restarted (--liveness-action=restart)",
	Not:          "the container is not restarted",
	Work:         "restart",
	FailedReason: ReasonRestartFailed,
	Failed:       "Could not restart the container",
}

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

// Options configure a Step. Zero values take the defaults above.
type Options struct {
	// Runtime stops containers and runs exec hooks. Required.
	Runtime Runtime
	// Recorder receives the Events (the agent's events.Tee). Required.
	Recorder runtime.Recorder
	// Probe returns the probe of the pod's container and type that failed
	// (the one probed runs), for its terminationGracePeriodSeconds; nil,
	// or a nil result: none.
	Probe func(pod *v1.Pod, container string, t runtime.ProbeType) *v1.Probe
	// HTTP runs httpGet preStop hooks (as a probe of the pod's IP with the
	// hook's action); nil: plugins/http's handler.
	HTTP runtime.Handler
	// HookContext, when set, derives the context of a pod's preStop hook
	// (the egress policy of the pod's probes, say); nil: as it is.
	HookContext func(ctx context.Context, pod *v1.Pod) context.Context
	// Clock drives the hooks' grace periods.
	Clock clock.Clock
	// MaxGracePeriod caps the grace period of a restart (the preStop hook
	// and the stop together), whatever the probe and the pod ask; at least
	// MinimumGracePeriod seconds; default DefaultMaxGracePeriod. It is
	// counted in whole seconds.
	MaxGracePeriod time.Duration
	// Logger receives one line per decision (default slog.Default()).
	Logger *slog.Logger
}

// Step is the restart step (actuate.Step).
type Step struct {
	opts Options
	cap  int64 // MaxGracePeriod in seconds
}

var _ actuate.Step = (*Step)(nil)

// New returns the Step. Errors: no Runtime or Recorder, a MaxGracePeriod
// under MinimumGracePeriod seconds.
func New(opts Options) (*Step, error) {
	switch {
	case opts.Runtime == nil:
		return nil, errors.New("restart: --liveness-action=restart needs the container runtime (--container-runtime-endpoint)")
	case opts.Recorder == nil:
		return nil, errors.New("restart: no event recorder")
	case opts.MaxGracePeriod < 0 || (opts.MaxGracePeriod > 0 && opts.MaxGracePeriod < MinimumGracePeriod*time.Second):
		return nil, fmt.Errorf("--liveness-action-max-grace-period %v: want at least %ds, the least grace period a container is stopped with", opts.MaxGracePeriod, MinimumGracePeriod)
	}
	if opts.HTTP == nil {
		opts.HTTP = probehttp.New()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxGracePeriod == 0 {
		opts.MaxGracePeriod = DefaultMaxGracePeriod
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Step{opts: opts, cap: int64(opts.MaxGracePeriod / time.Second)}, nil
}

// item is one restart to do.
type item struct {
	step      *Step
	pod       *v1.Pod       // the snapshot of the failure (read-only)
	name      string        // the container's name
	container *v1.Container // its spec
	statusID  string        // containerd://<id>
	ctr       cri.Container // the container, once Resolve confirmed it
	probe     runtime.ProbeType
	ref       *v1.ObjectReference
	asked     int64 // the grace period the probe or the pod asks for, in seconds
	grace     int64 // seconds left for the hook and the stop (asked, capped)
	log       *slog.Logger

	announced, hookDone bool // the Killing Event was recorded; the preStop hook ran
}

// Plan implements actuate.Step: step 1 of the package doc, then the
// restart.
func (s *Step) Plan(f actuate.Failure) actuate.Plan {
	refuse := func(why string) actuate.Plan {
		return actuate.Plan{Decision: actuate.Decision{Do: actuate.Refuse, Why: why}}
	}
	if f.Pod.DeletionTimestamp != nil {
		return refuse("the pod is terminating")
	}
	container := containerSpec(f.Pod, f.Container)
	if container == nil {
		return refuse("the pod's spec has no such container")
	}
	if _, err := s.opts.Runtime.ContainerID(f.ContainerID); err != nil {
		return refuse(err.Error())
	}
	it := &item{step: s, pod: f.Pod, name: f.Container, container: container, statusID: f.ContainerID, probe: f.Probe,
		ref: runtime.ContainerRef(f.Pod, f.Container),
		log: s.opts.Logger.With("pod", f.Pod.Namespace+"/"+f.Pod.Name, "container", f.Container, "containerID", f.ContainerID, "probe", f.Probe.Lower())}
	it.asked = s.gracePeriod(it)
	it.grace = min(it.asked, s.cap)
	return actuate.Plan{Decision: actuate.Decision{Do: actuate.Act}, Act: it.attempt}
}

// gracePeriod is the kubelet's setTerminationGracePeriod for a probe kill
// (spec K3), in seconds.
func (s *Step) gracePeriod(it *item) int64 {
	pod := it.pod
	// The kubelet's first rule, a deletion grace period, never applies:
	// terminating pods are not restarted.
	if pod.Spec.TerminationGracePeriodSeconds == nil {
		return MinimumGracePeriod
	}
	if s.opts.Probe != nil {
		if p := s.opts.Probe(pod, it.name, it.probe); p != nil && p.TerminationGracePeriodSeconds != nil {
			return *p.TerminationGracePeriodSeconds
		}
	}
	return *pod.Spec.TerminationGracePeriodSeconds
}

// attempt does steps 3 to 6 of the package doc for it; an error is worth
// another attempt.
func (it *item) attempt(ctx context.Context) error {
	a, log := it.step, it.log
	if it.ctr.ID == "" {
		want := probeexec.PodContainer{Namespace: it.pod.Namespace, Pod: it.pod.Name, PodUID: it.pod.UID, Container: it.name}
		ctr, err := a.opts.Runtime.Resolve(ctx, it.statusID, want)
		switch {
		case errors.Is(err, cri.ErrNotThePods):
			return actuate.Refused(err.Error())
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
		if it.grace < it.asked {
			log.Info("liveness action: grace period capped (--liveness-action-max-grace-period)", "asked", it.asked, "gracePeriod", it.grace)
		}
	}
	if hook := preStop(it.container); hook != nil && it.grace > 0 && !it.hookDone {
		it.hookDone = true
		it.grace -= it.runPreStop(ctx, hook)
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
