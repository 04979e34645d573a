// Package critest is the tests' side of a real container runtime: the
// containerd that test/cri/env.sh starts on a private socket
// (PROBED_TEST_CRI_ENDPOINT), and what the kubelet would do with it for a
// test — a host-network pod sandbox, a container created and started in it
// from the locally imported busybox image (PROBED_TEST_CRI_IMAGE), a
// command run in it. Everything goes through the CRI (k8s.io/cri-client),
// as the kubelet's calls do; nothing is faked and nothing is pulled.
//
// Tests skip when PROBED_TEST_CRI_ENDPOINT is unset, so `go test` without a
// runtime stays green. Every sandbox and container a test makes is stopped
// and removed when the test ends.
package critest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
)

// Environment variables test/cri/env.sh start prints.
const (
	// EnvEndpoint is the runtime's endpoint, unix:///DIR/containerd.sock.
	EnvEndpoint = "PROBED_TEST_CRI_ENDPOINT"
	// EnvImage is the imported busybox-static image (a shell, cat,
	// sleep, ps, ...).
	EnvImage = "PROBED_TEST_CRI_IMAGE"
)

// CgroupParent is the cgroup every test sandbox lives under; env.sh stop
// kills what is left in it and removes it.
const CgroupParent = "/probed-cri-test"

// Endpoint returns the test runtime's endpoint, or skips the test.
func Endpoint(t testing.TB) string {
	t.Helper()
	ep := os.Getenv(EnvEndpoint)
	if ep == "" {
		t.Skipf("%s is not set: no test container runtime (start one with test/cri/env.sh start DIR)", EnvEndpoint)
	}
	return ep
}

// Image returns the test image's name (PROBED_TEST_CRI_IMAGE, default
// probed.test/busybox:1).
func Image() string {
	if img := os.Getenv(EnvImage); img != "" {
		return img
	}
	return "probed.test/busybox:1"
}

// Context is the context of the tests' own CRI calls: bounded by 2
// minutes, with cri-client's klog lines discarded.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logr.Discard()), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Runtime connects to the test runtime (skipping without one); the
// connection is closed when the test ends.
func Runtime(t testing.TB) internalapi.RuntimeService {
	t.Helper()
	ep := Endpoint(t)
	rs, err := connect(Context(t), ep)
	if err != nil {
		t.Fatalf("connect to %s: %v", ep, err)
	}
	t.Cleanup(func() { _ = rs.Close(context.Background()) })
	return rs
}

// connect connects to the runtime at ep (cri-client checks that it
// answers the CRI v1 API).
func connect(ctx context.Context, ep string) (internalapi.RuntimeService, error) {
	return remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(ep).WithConnectionTimeout(30 * time.Second).
		WithTracerProvider(nil).Build(ctx)
}

var seq atomic.Int64

// unique returns a name of the test, unique within the process.
func unique(t testing.TB, prefix string) string {
	n := strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-").Replace(t.Name()))
	if len(n) > 40 {
		n = n[:40]
	}
	return fmt.Sprintf("%s-%s-%d-%d", prefix, strings.Trim(n, "-"), os.Getpid(), seq.Add(1))
}

// Sandbox is a pod sandbox a test started.
type Sandbox struct {
	ID     string
	Config *runtimeapi.PodSandboxConfig
	rs     internalapi.RuntimeService
}

// RunPodSandbox starts a host-network sandbox (no CNI needed), as the
// kubelet does for a hostNetwork pod; it is stopped and removed when the
// test ends.
func RunPodSandbox(t testing.TB, rs internalapi.RuntimeService) *Sandbox {
	t.Helper()
	name := unique(t, "pod")
	return RunPodSandboxFor(t, rs, "probed-test", name, name)
}

// Labels the kubelet gives a pod's sandbox and containers
// (pkg/kubelet/types/labels.go), which probed checks before it acts on a
// container.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
)

// RunPodSandboxFor is RunPodSandbox for the pod namespace/name with UID
// uid (a pod of the test API server): its sandbox and containers carry
// the kubelet's labels naming it.
func RunPodSandboxFor(t testing.TB, rs internalapi.RuntimeService, namespace, name, uid string) *Sandbox {
	t.Helper()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: namespace},
		Labels:   map[string]string{LabelPodName: name, LabelPodNamespace: namespace, LabelPodUID: uid},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: CgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER},
			},
		},
	}
	ctx := Context(t)
	id, err := rs.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx := klog.NewContext(context.Background(), logr.Discard())
		if err := rs.StopPodSandbox(ctx, id); err != nil {
			t.Logf("StopPodSandbox %s: %v", id, err)
		}
		if err := rs.RemovePodSandbox(ctx, id); err != nil {
			t.Logf("RemovePodSandbox %s: %v", id, err)
		}
	})
	return &Sandbox{ID: id, Config: cfg, rs: rs}
}

// Container describes a container to start in a sandbox.
type Container struct {
	// Name is the container's name in the pod (e.g. "app").
	Name string
	// Command is its command (the image's entrypoint is /bin/sh -c-less:
	// give the whole argv, e.g. sh -c '...').
	Command []string
	// Mounts are host paths bound into the container.
	Mounts []*runtimeapi.Mount
	// Env is the container's environment besides the image's (PATH=/bin).
	Env []*runtimeapi.KeyValue
	// RunAsUser runs it as that user (default: the image's, root).
	RunAsUser *int64
	// ReadonlyRootfs mounts its root filesystem read-only.
	ReadonlyRootfs bool
	// Seccomp is its seccomp profile (default: none, unconfined), e.g.
	// {ProfileType: RuntimeDefault}.
	Seccomp *runtimeapi.SecurityProfile
}

// Start creates and starts c in the sandbox (its own PID namespace, the
// node's network, the kubelet's labels naming the sandbox's pod and c) and
// returns the container's CRI ID; it is stopped and removed when the test
// ends.
func (s *Sandbox) Start(t testing.TB, c Container) string {
	t.Helper()
	md := s.Config.Metadata
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: c.Name},
		Labels: map[string]string{LabelPodName: md.Name, LabelPodNamespace: md.Namespace, LabelPodUID: md.Uid,
			LabelContainerName: c.Name},
		Image:   &runtimeapi.ImageSpec{Image: Image()},
		Command: c.Command,
		Mounts:  c.Mounts,
		Envs:    c.Env,
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER},
				ReadonlyRootfs:   c.ReadonlyRootfs,
				Seccomp:          c.Seccomp,
			},
		},
	}
	if c.RunAsUser != nil {
		cfg.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: *c.RunAsUser}
	}
	ctx := Context(t)
	id, err := s.rs.CreateContainer(ctx, s.ID, cfg, s.Config)
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", c.Name, err)
	}
	t.Cleanup(func() {
		ctx := klog.NewContext(context.Background(), logr.Discard())
		_ = s.rs.StopContainer(ctx, id, 0)
		if err := s.rs.RemoveContainer(ctx, id); err != nil {
			t.Logf("RemoveContainer %s: %v", id, err)
		}
	})
	if err := s.rs.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer %s: %v", c.Name, err)
	}
	return id
}

// Exec runs cmd in the container (ExecSync, 30 s timeout) and returns its
// stdout; a non-zero exit or an error fails the test.
func Exec(t testing.TB, rs internalapi.RuntimeService, id string, cmd ...string) string {
	t.Helper()
	stdout, stderr, err := rs.ExecSync(Context(t), id, cmd, 30*time.Second)
	if err != nil {
		t.Fatalf("exec %q in %s: %v (stderr %q)", cmd, id, err, stderr)
	}
	return string(stdout)
}

// State returns the container's CRI state and exit code.
func State(t testing.TB, rs internalapi.RuntimeService, id string) (runtimeapi.ContainerState, int32) {
	t.Helper()
	resp, err := rs.ContainerStatus(Context(t), id, false)
	if err != nil {
		t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	return resp.GetStatus().GetState(), resp.GetStatus().GetExitCode()
}

// HostDir returns a new directory to bind into a container (world-writable:
// the container's user may differ), removed when the test ends.
func HostDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// EnvScript returns the path of test/cri/env.sh (for tests that stop and
// start the runtime: daemon-stop, daemon-start), found from this package's
// source or, under -trimpath, from the module root above the working
// directory.
func EnvScript(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "test", "cri", "env.sh")
	if _, err := os.Stat(script); err == nil {
		return script
	}
	for dir, _ := os.Getwd(); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "test", "cri", "env.sh")
		}
		if dir == filepath.Dir(dir) {
			t.Fatal("test/cri/env.sh not found (no go.mod above the working directory)")
		}
	}
}

// PrivateRuntime starts a containerd of the test's own (env.sh start into a
// temporary directory, about a second), points PROBED_TEST_CRI_ENDPOINT at
// it for the rest of the test (t.Setenv: the test must not be parallel) and
// stops it, with every container and shim it ran, when the test ends. It
// returns the directory, for StopDaemon and StartDaemon. It skips like
// Endpoint when no test runtime is configured.
func PrivateRuntime(t testing.TB) string {
	t.Helper()
	Endpoint(t)
	dir, err := os.MkdirTemp("", "cri-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { envSh(t, "stop", dir) })
	out := envSh(t, "start", dir)
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "export "+EnvEndpoint+"="); ok {
			t.Setenv(EnvEndpoint, v)
			return dir
		}
	}
	t.Fatalf("env.sh start printed no %s:\n%s", EnvEndpoint, out)
	return ""
}

// StopDaemon stops containerd of a PrivateRuntime directory (SIGTERM); its
// shims and containers keep running, as on a node whose runtime restarts.
func StopDaemon(t testing.TB, dir string) { t.Helper(); envSh(t, "daemon-stop", dir) }

// StartDaemon starts it again with the same configuration and returns once
// its CRI service answers: containerd answers ctr (env.sh's wait) before
// its CRI plugin has loaded its state, and until then every CRI call fails
// with "server is not initialized yet".
func StartDaemon(t testing.TB, dir string) {
	t.Helper()
	envSh(t, "daemon-start", dir)
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Connecting asks the runtime's version, which a containerd that
		// has just started refuses ("server is not initialized yet").
		rs, err := connect(Context(t), Endpoint(t))
		if err == nil {
			_, err = rs.Status(Context(t), false)
			_ = rs.Close(context.Background())
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CRI service of %s did not answer within 60 s: %v", dir, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// DaemonPID returns the PID of a PrivateRuntime's containerd (for a test
// that stops it with SIGSTOP, say: a hung runtime; it must SIGCONT it).
func DaemonPID(t testing.TB, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscanf(string(b), "containerd %d", &pid); err != nil {
		t.Fatalf("%s/pids: %v", dir, err)
	}
	return pid
}

func envSh(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("bash", append([]string{EnvScript(t)}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("test/cri/env.sh %v: %v\n%s", args, err, out)
	}
	return string(out)
}
