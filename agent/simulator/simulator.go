// Package simulator plays the container runtime in manifest mode: when a
// liveness or startup probe of a running container fails, it kills the
// container and, when its restart policy allows, starts it again with a new
// container ID and a higher restart count (spec K1, K2; BR-13, BR-14), backing
// off between the restarts of a crash-looping container as the kubelet does
// (CrashLoopBackOff: waiting 10 s, doubling to 5 min, forgotten after 10 min
// of running; see backoff.go), records the kubelet's Killing and BackOff
// events (K4) and runs the --on-restart command when a container is really
// started again. It is the manifest mode's actuate.Actuator; the container's
// status lives in the store (package store), which it changes through
// Store.Mutate.
package simulator

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/kubeletstatus"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
)

// Restart describes a container restart decided by a probe (K2).
type Restart struct {
	Pod            *v1.Pod
	Container      string
	OldContainerID string
	NewContainerID string
	RestartCount   int32
	// Reason is "LivenessProbe" or "StartupProbe"; Message the kubelet's
	// kill message ("Container app failed liveness probe, will be restarted").
	Reason  string
	Message string
	// GracePeriodSeconds is the kill grace period the kubelet would use
	// (K3): the probe's terminationGracePeriodSeconds if set, else the
	// pod's (default 30).
	GracePeriodSeconds int64
	// Restarted is false when the restart policy does not restart the
	// container: it is then left terminated.
	Restarted bool
	// BackOff is how long the container waited in CrashLoopBackOff
	// between its kill and this start; 0: started at the kill.
	BackOff time.Duration
}

// Mutator is the part of the store the simulator changes containers through
// (store.Store.Mutate).
type Mutator interface {
	Mutate(uid types.UID, change func(pod *v1.Pod, status *v1.PodStatus) bool) bool
}

// Options configure a Simulator.
type Options struct {
	// Store holds the containers' statuses (required).
	Store Mutator
	// Recorder receives the Killing and BackOff events (K4); nil: none.
	Recorder runtime.Recorder
	// OnRestart is a shell command (sh -c) run when a killed container
	// is started again (at the end of its back-off, if any) or is left
	// terminated by its restart policy, with PROBED_* variables naming the
	// pod and container; empty: none. OnRestartTimeout bounds it; default
	// 1 min.
	OnRestart        string
	OnRestartTimeout time.Duration
	// Notify, when set, is called when OnRestart would run (tests).
	Notify func(Restart)
	// Clock times the back-offs (their timers, and the 10 min after
	// which a running container's back-off is forgotten); nil: the real
	// clock.
	Clock  clock.WithDelayedExecution
	Logger *slog.Logger // nil: slog.Default()
}

// Simulator is the manifest mode's container runtime. It is safe for
// concurrent use. Close stops its back-off timers.
type Simulator struct {
	opts     Options
	backOff  *flowcontrol.Backoff
	commands sync.WaitGroup // --on-restart commands in flight
	starts   sync.WaitGroup // delayed starts in flight

	mu      sync.Mutex
	closed  bool
	pending map[pendingKey]*pendingStart // containers waiting in CrashLoopBackOff

	fireMu     sync.Mutex // orders the timers' starts.Add before Close's Wait
	fireClosed bool
}

// pendingStart is the timer of a container waiting in CrashLoopBackOff.
type pendingStart struct{ timer clock.Timer }

// pendingKey names a container waiting for its delayed start.
type pendingKey struct {
	pod       types.UID
	container string
}

// New returns a Simulator.
func New(opts Options) *Simulator {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}

	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.OnRestartTimeout <= 0 {
		opts.OnRestartTimeout = time.Minute
	}
	return &Simulator{opts: opts, backOff: newCrashLoopBackOff(opts.Clock), pending: map[pendingKey]*pendingStart{}}
}

// ContainerFailed implements actuate.Actuator: it kills the container whose
// current ID is f.ContainerID, if it is running (K2 acts on running
// containers only), and restarts it when its restart policy allows (W8b):
// at once, or at the end of its crash-loop back-off, meanwhile leaving it
// waiting with reason CrashLoopBackOff (backoff.go).
func (s *Simulator) ContainerFailed(f actuate.Failure) {
	var r *Restart
	var wait time.Duration
	s.opts.Store.Mutate(f.Pod.UID, func(pod *v1.Pod, st *v1.PodStatus) bool {
		r, wait = s.kill(pod, st, f)
		return r != nil
	})
	if r == nil {
		return
	}
	s.event(r, v1.EventTypeNormal, "Killing", r.Message)
	if wait > 0 {
		// events.BackOffStartContainer; kuberuntime doBackOff's text.
		s.event(r, v1.EventTypeWarning, "BackOff", fmt.Sprintf("Back-off restarting failed container %s in pod %s", r.Container, podDesc(r.Pod)))
		return
	}
	s.restarted(*r)
}

func (s *Simulator) event(r *Restart, eventtype, reason, message string) {
	if s.opts.Recorder != nil {
		s.opts.Recorder.Eventf(runtime.ContainerRef(r.Pod, r.Container), eventtype, reason, "%s", message)
	}
}

// restarted reports r: Notify and the --on-restart command.
func (s *Simulator) restarted(r Restart) {
	s.runCommand(r)
	if s.opts.Notify != nil { // after the command is counted: Wait may follow
		s.opts.Notify(r)
	}
}

// kill changes st in place; it returns nil when there is nothing to kill,
// and the back-off to wait before the start (0: started at once), whose
// timer it set.
func (s *Simulator) kill(pod *v1.Pod, st *v1.PodStatus, f actuate.Failure) (*Restart, time.Duration) {
	cs, spec := findContainer(pod, st, f.ContainerID)
	if cs == nil || cs.State.Running == nil {
		return nil, 0
	}
	now := s.opts.Clock.Now()
	r := &Restart{
		Pod:                pod,
		Container:          cs.Name,
		OldContainerID:     cs.ContainerID,
		Reason:             "LivenessProbe",
		Message:            fmt.Sprintf("Container %s failed liveness probe", cs.Name),
		GracePeriodSeconds: gracePeriod(pod, spec, f.Probe),
	}
	if f.Probe == runtime.Startup {
		r.Reason = "StartupProbe"
		r.Message = fmt.Sprintf("Container %s failed startup probe", cs.Name)
	}
	// The newest earlier exit of this container, as the kubelet's pod
	// status before the kill knows it (doBackOff reads that status).
	var previousExit *time.Time
	if t := cs.LastTerminationState.Terminated; t != nil && !t.FinishedAt.IsZero() {
		previousExit = &t.FinishedAt.Time
	}
	killed := v1.ContainerStateTerminated{
		ExitCode:    137,
		Reason:      "Error",
		Message:     r.Message,
		StartedAt:   cs.State.Running.StartedAt,
		FinishedAt:  metav1.NewTime(now),
		ContainerID: cs.ContainerID,
	}
	cs.LastTerminationState = v1.ContainerState{Terminated: &killed}
	cs.Ready = false
	notStarted := false
	cs.Started = &notStarted
	if spec != nil && !manager.ContainerShouldRestart(spec, &pod.Spec, killed.ExitCode) {
		cs.State = v1.ContainerState{Terminated: &killed}
		s.opts.Logger.Info("container killed", "pod", pod.Namespace+"/"+pod.Name, "container", cs.Name, "reason", r.Reason, "containerID", cs.ContainerID, "restarted", false)
		return r, 0
	}
	r.Message += ", will be restarted"
	key := backOffKey(pod, cs.Name, spec)
	if wait := s.backOffAtKill(key, previousExit, now); wait > 0 {
		cs.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{
			Reason:  kubeletstatus.CrashLoopBackOff,
			Message: backOffMessage(wait, cs.Name, pod),
		}}
		s.opts.Logger.Info("container killed, backing off", "pod", pod.Namespace+"/"+pod.Name, "container", cs.Name, "reason", r.Reason,
			"containerID", cs.ContainerID, "backOff", wait.String())
		r.BackOff = wait
		s.schedule(*r, wait, key, now)
		return r, wait
	}
	s.start(cs, r, now)
	return r, 0
}

// start gives cs a new container ID, running since now, with a higher
// restart count, and fills r in.
func (s *Simulator) start(cs *v1.ContainerStatus, r *Restart, now time.Time) {
	kubeletstatus.StartAgain(cs, metav1.NewTime(now))
	r.NewContainerID = cs.ContainerID
	r.RestartCount = cs.RestartCount
	r.Restarted = true
	s.opts.Logger.Info("container restarted", "pod", r.Pod.Namespace+"/"+r.Pod.Name, "container", cs.Name, "reason", r.Reason,
		"oldContainerID", r.OldContainerID, "containerID", cs.ContainerID, "restartCount", cs.RestartCount, "backOff", r.BackOff.String())
}

// schedule starts the container of r, waiting in CrashLoopBackOff since
// killedAt, after wait, unless the simulator is closed first. It is called
// inside the kill's Store.Mutate, so a waiting container always has its
// timer.
func (s *Simulator) schedule(r Restart, wait time.Duration, key string, killedAt time.Time) {
	k := pendingKey{pod: r.Pod.UID, container: r.Container}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if old, ok := s.pending[k]; ok {
		old.timer.Stop()
	}
	p := &pendingStart{}
	// The callback takes no lock held around clock calls (the fake clock
	// calls it holding its own lock): it only hands the start to a
	// goroutine the simulator owns.
	p.timer = s.opts.Clock.AfterFunc(wait, func() {
		s.fireMu.Lock()
		defer s.fireMu.Unlock()
		if s.fireClosed {
			return
		}
		s.starts.Add(1)
		go func() {
			defer s.starts.Done()
			s.mu.Lock()
			current := s.pending[k] == p && !s.closed
			if current {
				delete(s.pending, k)
			}
			s.mu.Unlock()
			if current {
				s.startAfterBackOff(r, key, killedAt)
			}
		}()
	})
	s.pending[k] = p
}

// startAfterBackOff starts the container of r if it is still the one
// waiting in CrashLoopBackOff since its kill (the pod may have been removed
// or replaced meanwhile), the kubelet's pod sync at the end of the back-off.
func (s *Simulator) startAfterBackOff(r Restart, key string, killedAt time.Time) {
	started := false
	s.opts.Store.Mutate(r.Pod.UID, func(pod *v1.Pod, st *v1.PodStatus) bool {
		cs, _ := findContainer(pod, st, r.OldContainerID)
		if cs == nil || cs.State.Waiting == nil || cs.State.Waiting.Reason != kubeletstatus.CrashLoopBackOff {
			return false
		}
		s.backOff.Next(key, killedAt)
		r.Pod = pod
		s.start(cs, &r, s.opts.Clock.Now())
		started = true
		return true
	})
	if started {
		s.restarted(r)
	}
}

// Close stops the back-off timers (the containers waiting in
// CrashLoopBackOff stay waiting) and waits for the delayed starts and the
// --on-restart commands in flight. The agent calls it at shutdown, after the
// last probe result was applied.
func (s *Simulator) Close() {
	s.mu.Lock()
	s.closed = true
	for k, p := range s.pending {
		p.timer.Stop()
		delete(s.pending, k)
	}
	s.mu.Unlock()
	s.fireMu.Lock()
	s.fireClosed = true
	s.fireMu.Unlock()
	s.starts.Wait()
	s.commands.Wait()
}

// runCommand runs the --on-restart command for r in the background.
func (s *Simulator) runCommand(r Restart) {
	if s.opts.OnRestart == "" {
		return
	}
	s.commands.Add(1)
	go func() {
		defer s.commands.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.OnRestartTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", s.opts.OnRestart)
		cmd.Env = append(os.Environ(),
			"PROBED_POD_NAME="+r.Pod.Name,
			"PROBED_POD_NAMESPACE="+r.Pod.Namespace,
			"PROBED_POD_UID="+string(r.Pod.UID),
			"PROBED_CONTAINER_NAME="+r.Container,
			"PROBED_CONTAINER_ID="+r.NewContainerID,
			"PROBED_OLD_CONTAINER_ID="+r.OldContainerID,
			"PROBED_RESTART_COUNT="+strconv.Itoa(int(r.RestartCount)),
			"PROBED_REASON="+r.Reason,
			"PROBED_RESTARTED="+strconv.FormatBool(r.Restarted),
			"PROBED_GRACE_PERIOD_SECONDS="+strconv.FormatInt(r.GracePeriodSeconds, 10),
		)
		cmd.WaitDelay = time.Second
		out, err := cmd.CombinedOutput()
		pod := r.Pod.Namespace + "/" + r.Pod.Name
		if err != nil {
			s.opts.Logger.Error("on-restart command failed", "pod", pod, "container", r.Container, "err", err, "output", bound.Cut(string(out), bound.MessageBytes))
			return
		}
		s.opts.Logger.Info("on-restart command done", "pod", pod, "container", r.Container)
	}()
}

// Wait waits for the --on-restart commands in flight. It must not race
// with the end of a back-off (a start adds a command): call it after Notify
// reported that start, or use Close.
func (s *Simulator) Wait() { s.commands.Wait() }

// Pending is the number of containers waiting in CrashLoopBackOff for their
// start.
func (s *Simulator) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

func findContainer(pod *v1.Pod, st *v1.PodStatus, id string) (*v1.ContainerStatus, *v1.Container) {
	for i := range st.ContainerStatuses {
		if cs := &st.ContainerStatuses[i]; cs.ContainerID == id {
			return cs, kubeletstatus.SpecByName(pod.Spec.Containers, cs.Name)
		}
	}
	for i := range st.InitContainerStatuses {
		if cs := &st.InitContainerStatuses[i]; cs.ContainerID == id {
			return cs, kubeletstatus.SpecByName(pod.Spec.InitContainers, cs.Name)
		}
	}
	return nil, nil
}

// gracePeriod is K3: the pod's deletion grace period if set, else for a
// probe kill the probe's terminationGracePeriodSeconds if set, else the
// pod's terminationGracePeriodSeconds (default 30).
func gracePeriod(pod *v1.Pod, c *v1.Container, probe runtime.ProbeType) int64 {
	if pod.DeletionGracePeriodSeconds != nil {
		return *pod.DeletionGracePeriodSeconds
	}
	if c != nil {
		p := c.LivenessProbe
		if probe == runtime.Startup {
			p = c.StartupProbe
		}
		if p != nil && p.TerminationGracePeriodSeconds != nil {
			return *p.TerminationGracePeriodSeconds
		}
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return 30
}
