package simulator_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/simulator"
	"github.com/probed/probed/agent/store"
	"github.com/probed/probed/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

func containerStatus(t *testing.T, st *store.Store, pod *v1.Pod) v1.ContainerStatus {
	t.Helper()
	s, ok := st.GetPodStatus(pod.UID)
	if !ok || len(s.ContainerStatuses) != 1 {
		t.Fatalf("no status for %s: %+v", pod.Name, s)
	}
	return s.ContainerStatuses[0]
}

// lines reads the file the --on-restart command appends to.
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestOnRestartRunsAtTheRealRestart: the --on-restart command (a real sh)
// runs once per start of the container: at the kill when it restarts at
// once, and at the end of the back-off, not at the kill, when it waits in
// CrashLoopBackOff; Close stops a pending back-off (no start, no command
// after it).
func TestOnRestartRunsAtTheRealRestart(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	st := store.New(store.Options{Clock: clk, PodIP: "127.0.0.1"})
	out := filepath.Join(t.TempDir(), "restarts")
	restarts := make(chan simulator.Restart, 10)
	sim := simulator.New(simulator.Options{Store: st, Clock: clk, Notify: func(r simulator.Restart) { restarts <- r },
		OnRestart: `echo "$PROBED_RESTART_COUNT:$PROBED_RESTARTED" >> ` + out})
	pod := st.Put(&v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1"},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{Name: "app", Image: "img"}}},
	})
	kill := func() {
		clk.Step(time.Second)
		sim.ContainerFailed(actuate.Failure{Pod: pod, Container: "app", ContainerID: containerStatus(t, st, pod).ContainerID, Probe: runtime.Liveness})
		if containerStatus(t, st, pod).State.Running != nil {
			<-restarts
		}
		sim.Wait()
	}
	kill()
	kill()
	if got := lines(t, out); strings.Join(got, ",") != "1:true,2:true" {
		t.Fatalf("commands after two immediate restarts: %v", got)
	}
	kill() // back-off 10 s
	if cs := containerStatus(t, st, pod); cs.State.Waiting == nil || cs.State.Waiting.Reason != simulator.CrashLoopBackOff {
		t.Fatalf("state %+v, want waiting CrashLoopBackOff", cs.State)
	}
	if got := lines(t, out); len(got) != 2 {
		t.Fatalf("the command ran at the kill of a container that backs off: %v", got)
	}
	clk.Step(10 * time.Second)
	select {
	case r := <-restarts:
		if r.BackOff != 10*time.Second {
			t.Errorf("restart %+v, want after a 10s back-off", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no start at the end of the back-off")
	}
	sim.Wait()
	if got := lines(t, out); strings.Join(got, ",") != "1:true,2:true,3:true" {
		t.Fatalf("commands after the back-off: %v", got)
	}
	if cs := containerStatus(t, st, pod); cs.State.Running == nil || cs.RestartCount != 3 {
		t.Fatalf("after the back-off: %+v", cs)
	}
	kill() // back-off 20 s, then the agent stops
	if sim.Pending() != 1 {
		t.Fatalf("pending starts %d, want 1", sim.Pending())
	}
	sim.Close()
	clk.Step(time.Minute)
	if cs := containerStatus(t, st, pod); cs.State.Waiting == nil || sim.Pending() != 0 || len(lines(t, out)) != 3 {
		t.Fatalf("after Close: %+v, %d pending, commands %v", cs.State, sim.Pending(), lines(t, out))
	}
}
