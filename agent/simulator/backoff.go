package simulator

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/kubeletstatus"
)

// The kubelet's crash-loop back-off at v1.37 with the default feature gates
// (docs/probes.md, "Restarts and CrashLoopBackOff"):
//   - pkg/kubelet/kubelet.go: initialCrashLoopBackOff = 10 s; the maximum is
//     MaxCrashLoopBackOff = 300 s, or with KubeletCrashLoopBackOffMax (beta,
//     on by default since 1.35) the kubelet configuration's
//     crashLoopBackOff.maxContainerRestartPeriod, defaulted to the same 300 s
//     (pkg/kubelet/apis/config/v1beta1/defaults.go);
//     ReduceDefaultCrashLoopBackOffDecay (1 s / 60 s) is alpha, off by
//     default;
//   - klet.crashLoopBackOff = flowcontrol.NewBackOff(base, max) whose
//     HasExpiredFunc forgets an entry 600 s after its last update (the last
//     start), dropped by the housekeeping's crashLoopBackOff.GC().
const (
	// InitialBackOff is the first crash-loop back-off.
	InitialBackOff = 10 * time.Second
	// MaxBackOff caps the doubling back-off.
	MaxBackOff = 300 * time.Second
	// BackOffReset is how long a container must run since its last start
	// for its back-off to be forgotten.
	BackOffReset = 600 * time.Second
	// CrashLoopBackOff is the waiting reason of a container in back-off
	// (kubecontainer.ErrCrashLoopBackOff).
	CrashLoopBackOff = kubeletstatus.CrashLoopBackOff
)

func newCrashLoopBackOff(clk clock.Clock) *flowcontrol.Backoff {
	b := flowcontrol.NewBackOff(InitialBackOff, MaxBackOff)
	b.Clock = clk
	b.HasExpiredFunc = func(eventTime, lastUpdate time.Time, _ time.Duration) bool {
		return eventTime.Sub(lastUpdate) > BackOffReset
	}
	return b
}

// backOffAtKill is the kubelet's doBackOff as a probe kill meets it: the
// kill and the start happen in one pod sync (computePodActions puts the
// container in ContainersToKill and ContainersToStart), and doBackOff checks
// the back-off against the newest exited instance of the container in the
// pod status read before the kill, previousExit (nil: none, so no back-off
// and no entry). Not in back-off since then: the entry moves on (Next) and
// the container starts at once (0). In back-off: the kill's sync does not
// start it; the next sync checks against this kill (now) and waits out the
// entry's back-off, returned; the entry moves on at that start
// (startAfterBackOff). Expired entries are dropped first, as the kubelet's
// housekeeping does every 2 s.
func (s *Simulator) backOffAtKill(key string, previousExit *time.Time, now time.Time) time.Duration {
	s.backOff.GC()
	if previousExit == nil {
		return 0
	}
	if !s.backOff.IsInBackOffSince(key, *previousExit) {
		s.backOff.Next(key, *previousExit)
		return 0
	}
	if !s.backOff.IsInBackOffSince(key, now) {
		s.backOff.Next(key, now)
		return 0
	}
	return s.backOff.Get(key)
}

// backOffKey is kuberuntime.GetBackoffKey's identity of a container: pod
// name, namespace and UID, container name, image and resources (a changed
// image or resources starts a fresh back-off).
func backOffKey(pod *v1.Pod, name string, spec *v1.Container) string {
	key := []string{pod.Name, pod.Namespace, string(pod.UID), name}
	if spec != nil {
		key = append(key, spec.Image, spec.Resources.String())
	}
	return strings.Join(key, "/")
}

// backOffMessage is the waiting message of a container in back-off, the
// kubelet's: "back-off 10s restarting failed container=app pod=web_ns(uid)".
func backOffMessage(wait time.Duration, container string, pod *v1.Pod) string {
	return fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", wait, container, podDesc(pod))
}

// podDesc is the kubelet's format.Pod: "name_namespace(uid)".
func podDesc(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}
