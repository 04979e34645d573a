// Package pluginhosttest helps tests that run real plugin binaries: it
// builds them, provides a pod status provider for a manager, and checks
// /proc for leftover processes. It is meant for _test.go files only.
package pluginhosttest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/internal/procstat"
)

// Build compiles main packages (import paths, or paths relative to the
// working directory) into dir, each binary named after its package's last
// path element. It builds with -race when the calling test binary has the
// race detector, so the dependencies come from the same build cache entries
// as the test's own.
func Build(dir string, pkgs ...string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(goruntime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if RaceEnabled {
		args = append(args, "-race")
	}
	args = append(args, pkgs...)
	cmd := exec.Command(goBin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

// Alive reports whether process pid exists and is not a zombie.
func Alive(pid int) bool {
	s, ok := procstat.Read(pid)
	return ok && !s.Gone()
}

// Children returns the live (non-zombie) processes whose parent is ppid
// and whose executable lies in dir (any, when dir is "").
func Children(ppid int, dir string) []int {
	var out []int
	for _, s := range procstat.All() {
		if s.Gone() || s.PPID != ppid {
			continue
		}
		if dir != "" {
			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", s.PID))
			if err != nil || !strings.HasPrefix(exe, dir) {
				continue
			}
		}
		out = append(out, s.PID)
	}
	return out
}

// Statuses is a manager.StatusProvider backed by a map.
type Statuses struct {
	mu sync.Mutex
	m  map[types.UID]v1.PodStatus
}

// GetPodStatus returns a copy of the status of uid.
func (s *Statuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[uid]
	if !ok {
		return v1.PodStatus{}, false
	}
	return *st.DeepCopy(), true
}

// Set stores the status of uid.
func (s *Statuses) Set(uid types.UID, st v1.PodStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[types.UID]v1.PodStatus{}
	}
	s.m[uid] = *st.DeepCopy()
}

// Pod returns a pod with one container "app" (ports: http 8080), the
// given annotations, and a running, started status with pod IP 127.0.0.1
// and container ID containerd://app-1.
func Pod(uid types.UID, annotations map[string]string) (*v1.Pod, v1.PodStatus) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + string(uid), Namespace: "default", UID: uid, Annotations: annotations},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:  "app",
			Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
	started := true
	status := v1.PodStatus{
		Phase: v1.PodRunning,
		PodIP: "127.0.0.1",
		ContainerStatuses: []v1.ContainerStatus{{
			Name:        "app",
			ContainerID: "containerd://app-1",
			Started:     &started,
			State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}},
		}},
	}
	return pod, status
}

// UnixSockets returns the filesystem paths of the unix sockets process pid
// holds open (its /proc/<pid>/fd entries matched by inode against
// /proc/<pid>/net/unix), sorted, each once (a listener and its accepted
// connections share a path); abstract and unnamed sockets are left out.
func UnixSockets(pid int) []string {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	var out []string
	// Num RefCount Protocol Flags Type St Inode Path
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 8 && inodes[f[6]] && strings.HasPrefix(f[7], "/") && !slices.Contains(out, f[7]) {
			out = append(out, f[7])
		}
	}
	sort.Strings(out)
	return out
}
