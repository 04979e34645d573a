package kubetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// privateDirs are the server directories PrivateServer started in this
// process: the only ones StopAPIServer and StartAPIServer touch (the shared
// server of PROBED_TEST_KUBECONFIG serves every test package run in
// parallel; stopping it would break them).
var privateDirs sync.Map

// PrivateServer starts a kube-apiserver and etcd of the test's own (env.sh
// start into t.TempDir(); 3-4 s on an idle machine), points
// PROBED_TEST_KUBECONFIG at its kubeconfig for the rest of the test (so
// Config, Client, Namespace, AgentConfig... use it; t.Setenv: the test must
// not be parallel) and stops both when the test ends. It returns the
// server's directory. It skips the test like Config does when
// PROBED_TEST_KUBECONFIG is unset, and when the binaries are not in the
// cache (${PROBED_KUBE_CACHE:-$HOME/.cache/probed-kube}/bin, as env.sh
// finds it): a test never triggers the 5-6 minute build.
func PrivateServer(t testing.TB) string {
	t.Helper()
	if os.Getenv(EnvKubeconfig) == "" {
		t.Skipf("%s is not set: no test kube-apiserver (start one with test/kube/env.sh start DIR)", EnvKubeconfig)
	}
	bin := filepath.Join(cacheDir(), "bin")
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Skipf("no %s in %s (build with test/kube/env.sh build): %v", name, bin, err)
		}
	}
	dir := t.TempDir()
	t.Cleanup(func() {
		privateDirs.Delete(dir)
		envSh(t, "stop", dir)
	})
	envSh(t, "start", dir)
	privateDirs.Store(dir, true)
	t.Setenv(EnvKubeconfig, filepath.Join(dir, "kubeconfig"))
	return dir
}

// StopAPIServer stops the kube-apiserver of the test's private server
// (env.sh apiserver-stop: SIGTERM; etcd keeps running, so nothing stored is
// lost). The server is found from PROBED_TEST_KUBECONFIG's directory; the
// test fails unless PrivateServer started it.
func StopAPIServer(t testing.TB) { t.Helper(); envSh(t, "apiserver-stop", privateDir(t)) }

// StartAPIServer starts the private server's kube-apiserver again with the
// same flags and port (env.sh apiserver-start) and returns once it is ready
// (/readyz 200).
func StartAPIServer(t testing.TB) { t.Helper(); envSh(t, "apiserver-start", privateDir(t)) }

func privateDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Dir(os.Getenv(EnvKubeconfig))
	if _, ok := privateDirs.Load(dir); !ok {
		t.Fatalf("%s is not a server PrivateServer started (the shared server is never stopped)", dir)
	}
	return dir
}

// cacheDir is where env.sh keeps the binaries.
func cacheDir() string {
	if d := os.Getenv("PROBED_KUBE_CACHE"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "probed-kube")
}

// envSh runs test/kube/env.sh (found next to this package's source) with
// args, failing the test with its output on error.
func envSh(t testing.TB, args ...string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "test", "kube", "env.sh")
	if _, err := os.Stat(script); err != nil { // built with -trimpath: look up from the package's directory
		for dir, _ := os.Getwd(); ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				script = filepath.Join(dir, "test", "kube", "env.sh")
				break
			}
			if dir == filepath.Dir(dir) {
				t.Fatalf("test/kube/env.sh not found (no go.mod above the working directory)")
			}
		}
	}
	out, err := exec.Command("bash", append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("env.sh %v: %v\n%s", args, err, out)
	}
}
