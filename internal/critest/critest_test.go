package critest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/probed/probed/internal/critest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// The helpers give a test what the kubelet would: a host-network sandbox,
// a running container of the imported image with its own filesystem and PID
// namespace, ExecSync in it, and a host directory bound into it.
func TestSandboxContainerExec(t *testing.T) {
	rs := critest.Runtime(t)
	dir := critest.HostDir(t)
	sb := critest.RunPodSandbox(t, rs)
	id := sb.Start(t, critest.Container{
		Name:    "app",
		Command: []string{"sh", "-c", "echo inside > /tmp/only-here; exec sleep 3600"},
		Mounts:  []*runtimeapi.Mount{{ContainerPath: "/mark", HostPath: dir}},
	})
	critest.Exec(t, rs, id, "test", "-f", "/tmp/only-here") // the container's own filesystem
	if _, err := os.Stat("/tmp/only-here"); err == nil {
		t.Fatal("/tmp/only-here exists on the host")
	}
	if got := critest.Exec(t, rs, id, "cat", "/tmp/only-here"); got != "inside\n" {
		t.Fatalf("cat: %q", got)
	}
	critest.Exec(t, rs, id, "sh", "-c", "echo mark > /mark/m")
	if b, err := os.ReadFile(filepath.Join(dir, "m")); err != nil || string(b) != "mark\n" {
		t.Fatalf("mark on the host: %q, %v", b, err)
	}
	// Its own PID namespace: the container's command is PID 1.
	if ps := critest.Exec(t, rs, id, "cat", "/proc/1/cmdline"); !strings.HasPrefix(ps, "sleep") {
		t.Fatalf("PID 1 is %q, want sleep", ps)
	}
	if state, _ := critest.State(t, rs, id); state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("state %v", state)
	}
}
