package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/probed/probed/deploy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// chartDir is the chart, relative to this package's directory (where go test runs).
const chartDir = "../../deploy/helm/probed"

// helmBinary is $PROBED_HELM, else the helm test/kube/env.sh builds into its
// cache; the test skips when neither exists.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROBED_HELM"); p != "" {
		return p
	}
	cache := os.Getenv("PROBED_KUBE_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "probed-kube")
	}
	p := filepath.Join(cache, "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no helm (%s; build it with test/kube/env.sh build, or set PROBED_HELM)", p)
	}
	return p
}

// helm runs the helm binary with args, with its state under a temporary
// directory (never the user's ~/.config/helm), and returns stdout; a failure
// fails the test with stderr.
func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := helmRun(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func helmRun(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config",
		"HELM_DATA_HOME="+home+"/data", "KUBECONFIG="+home+"/none")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &helmError{err: err, stderr: stderr.String() + stdout.String()}
	}
	return stdout.Bytes(), nil
}

type helmError struct {
	err    error
	stderr string
}

func (e *helmError) Error() string { return e.err.Error() + ": " + e.stderr }

// render runs helm template for release in namespace with the given values
// files and --set flags and decodes the output strictly.
func render(t *testing.T, release, namespace string, args ...string) []runtime.Object {
	t.Helper()
	out := helm(t, append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	objects, err := deploy.Decode("helm template "+release, out)
	if err != nil {
		t.Fatalf("rendered chart: %v\n%s", err, out)
	}
	return objects
}

// plain decodes every file of deploy/kubernetes.
func plain(t *testing.T, files ...string) []runtime.Object {
	t.Helper()
	var all []runtime.Object
	for _, f := range files {
		objects, err := deploy.File(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, objects...)
	}
	return all
}

// dump renders an object as JSON for a failure message.
func dump(o runtime.Object) string {
	b, err := json.Marshal(o)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
