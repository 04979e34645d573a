// Package simulator plays the container runtime in manifest mode: when a
// liveness or startup probe of a running container fails, it kills the
// container and, when its restart policy allows, starts it again with a new
// container ID and a higher restart count (spec K1, K2; BR-13, BR-14), records
// the kubelet's Killing event (K4) and runs the --on-restart command. It is
// the manifest mode's actuate.Actuator; the container's status lives in the
// store (package store), which it changes through Store.Mutate.
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
	"k8s.io/utils/clock"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/kubeletstatus"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/runtime"
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
	// Recorder receives the Killing event (K4); nil: none.
	Recorder runtime.Recorder
	// OnRestart is a shell command (sh -c) run after each restart
	// decision, with PROBED_* variables naming the pod and container;
	// empty: none. OnRestartTimeout bounds it; default 1 min.
	OnRestart        string
	OnRestartTimeout time.Duration
	// Notify, when set, is called after each restart decision (tests).
	Notify func(Restart)
	Clock  clock.PassiveClock // nil: the real clock
	Logger *slog.Logger       // nil: slog.Default()
}

// Simulator is the manifest mode's container runtime. It is safe for
// concurrent use.
type Simulator struct {
	opts     Options
	commands sync.WaitGroup // --on-restart commands in flight
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
	return &Simulator{opts: opts}
}

// ContainerFailed implements actuate.Actuator: it kills the container whose
// current ID is f.ContainerID, if it is running (K2 acts on running
// containers only), and restarts it when its restart policy allows (W8b).
func (s *Simulator) ContainerFailed(f actuate.Failure) {
	var r *Restart
	s.opts.Store.Mutate(f.Pod.UID, func(pod *v1.Pod, st *v1.PodStatus) bool {
		r = s.restart(pod, st, f)
		return r != nil
	})
	if r == nil {
		return
	}
	if s.opts.Recorder != nil {
		s.opts.Recorder.Eventf(runtime.ContainerRef(r.Pod, r.Container), v1.EventTypeNormal, "Killing", "%s", r.Message)
	}
	if s.opts.Notify != nil {
		s.opts.Notify(*r)
	}
	s.runCommand(*r)
}

// restart changes st in place; it returns nil when there is nothing to kill.
func (s *Simulator) restart(pod *v1.Pod, st *v1.PodStatus, f actuate.Failure) *Restart {
	cs, spec := findContainer(pod, st, f.ContainerID)
	if cs == nil || cs.State.Running == nil {
		return nil
	}
	now := metav1.NewTime(s.opts.Clock.Now())
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
	killed := v1.ContainerStateTerminated{
		ExitCode:    137,
		Reason:      "Error",
		Message:     r.Message,
		StartedAt:   cs.State.Running.StartedAt,
		FinishedAt:  now,
		ContainerID: cs.ContainerID,
	}
	cs.LastTerminationState = v1.ContainerState{Terminated: &killed}
	cs.Ready = false
	notStarted := false
	cs.Started = &notStarted
	if spec != nil && !manager.ContainerShouldRestart(spec, &pod.Spec, killed.ExitCode) {
		cs.State = v1.ContainerState{Terminated: &killed}
		s.opts.Logger.Info("container killed", "pod", pod.Namespace+"/"+pod.Name, "container", cs.Name, "reason", r.Reason, "containerID", cs.ContainerID, "restarted", false)
		return r
	}
	r.Message += ", will be restarted"
	cs.RestartCount++
	cs.ContainerID = kubeletstatus.NewContainerID()
	cs.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}
	r.NewContainerID = cs.ContainerID
	r.RestartCount = cs.RestartCount
	r.Restarted = true
	s.opts.Logger.Info("container restarted", "pod", pod.Namespace+"/"+pod.Name, "container", cs.Name, "reason", r.Reason,
		"oldContainerID", r.OldContainerID, "containerID", cs.ContainerID, "restartCount", cs.RestartCount)
	return r
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
			s.opts.Logger.Error("on-restart command failed", "pod", pod, "container", r.Container, "err", err, "output", truncate(string(out), 1024))
			return
		}
		s.opts.Logger.Info("on-restart command done", "pod", pod, "container", r.Container)
	}()
}

// Wait waits for the --on-restart commands in flight.
func (s *Simulator) Wait() { s.commands.Wait() }

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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
