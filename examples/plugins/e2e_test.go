// End-to-end tests of the example plugins: real plugin binaries, built by
// the test into a plugin directory, started by a pluginhost.Host, driving
// a real manager through the probed.io/probes annotation.
package plugins_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/examples/plugins/internal/redistest"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/pluginhost"
	"github.com/probed/probed/runtime/pluginhost/pluginhosttest"
)

// pluginDir is the plugin directory the example plugins are built into.
var pluginDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "example-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := pluginhosttest.Build(dir, "./http-match", "./redis"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	pluginDir = dir
	os.Setenv("GORACE", "atexit_sleep_ms=0") // race-built plugins exit at once
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(), goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// env is a manager whose runtime has the example plugins' kinds.
type env struct {
	host     *pluginhost.Host
	mgr      manager.Manager
	statuses *pluginhosttest.Statuses
}

func newEnv(t *testing.T) *env {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	host, err := pluginhost.New(context.Background(), pluginhost.Options{Dir: pluginDir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(host.Kinds(), ","); got != "http-match,redis" {
		t.Fatalf("kinds from the plugin directory: %s", got)
	}
	rt, err := runtime.New(runtime.Options{PoolSize: 8, ExecPoolSize: 1, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Register(rt); err != nil {
		t.Fatal(err)
	}
	e := &env{host: host, statuses: &pluginhosttest.Statuses{}}
	ready := results.NewManager()
	stop := make(chan struct{})
	drained := make(chan struct{})
	go func() { // the kubelet's sync loop drains the updates
		defer close(drained)
		for {
			select {
			case <-ready.Updates():
			case <-stop:
				return
			}
		}
	}()
	e.mgr, err = manager.New(manager.Options{Status: e.statuses, Readiness: ready, Runtime: rt, Logger: log, FirstRunSpread: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.mgr.Close(ctx); err != nil {
			t.Error(err)
		}
		close(stop)
		<-drained
		if err := rt.Close(ctx); err != nil {
			t.Error(err)
		}
		if err := host.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return e
}

// knownKinds is the policy the agent reads a manifest's probes with: the
// kinds the host's plugins serve are known.
func (e *env) knownKinds() podprobes.Policy {
	return podprobes.Policy{Annotation: customprobe.Options{KnownKind: e.host.HasKind}}
}

// addPod adds a pod whose custom probes are annotation.
func (e *env) addPod(t *testing.T, uid, annotation string) *v1.Pod {
	t.Helper()
	pod, st := pluginhosttest.Pod(types.UID(uid), map[string]string{customprobe.Annotation: annotation})
	if errs := podprobes.Of(pod, e.knownKinds()).Errors(); len(errs) > 0 {
		t.Fatalf("annotation: %v", errs.ToAggregate())
	}
	e.statuses.Set(pod.UID, st)
	e.mgr.AddPod(context.Background(), pod)
	return pod
}

// ready is the container's Ready as the manager fills it in (M7).
func (e *env) ready(pod *v1.Pod) bool {
	st, _ := e.statuses.GetPodStatus(pod.UID)
	e.mgr.UpdatePodStatus(context.Background(), pod, &st)
	return st.ContainerStatuses[0].Ready
}

func (e *env) waitReady(t *testing.T, pod *v1.Pod, want bool, within time.Duration) {
	t.Helper()
	start := time.Now()
	for e.ready(pod) != want {
		if time.Since(start) > within {
			t.Fatalf("container Ready did not become %v within %s", want, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("Ready=%v after %s", want, time.Since(start).Round(time.Millisecond))
}

// TestHTTPMatchFlipsReady: an http-match readiness probe follows the
// target's body.
func TestHTTPMatchFlipsReady(t *testing.T) {
	t.Parallel()
	var state atomic.Value
	state.Store("ok")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ready" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, state.Load().(string))
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	e := newEnv(t)
	pod := e.addPod(t, "http-match", fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":1,"failureThreshold":1,
		"plugin":{"name":"http-match","port":%d,"params":{"path":"/ready","body":"^ok$","status":"200-299"}}}]`, port))
	e.waitReady(t, pod, true, 5*time.Second)
	state.Store("starting")
	e.waitReady(t, pod, false, 3*time.Second)
	state.Store("ok")
	e.waitReady(t, pod, true, 3*time.Second)
}

// TestRedisFlipsReady: a redis readiness probe follows the server.
func TestRedisFlipsReady(t *testing.T) {
	t.Parallel()
	redistest.Binary(t)
	srv := redistest.Start(t, redistest.Options{Password: "pw"})
	e := newEnv(t)
	pod := e.addPod(t, "redis", `[{"container":"app","type":"readiness","periodSeconds":1,"failureThreshold":1,
		"plugin":{"name":"redis","port":`+strconv.Itoa(srv.Port)+`,"params":{"password":"pw"}}}]`)
	e.waitReady(t, pod, true, 5*time.Second)
	srv.Stop()
	e.waitReady(t, pod, false, 3*time.Second)
	redistest.Start(t, redistest.Options{Port: srv.Port, Password: "pw"})
	e.waitReady(t, pod, true, 3*time.Second)
}

// TestUnknownKindIsAValidationError: with the host's HasKind as the known
// kinds, a probe of a kind no plugin serves is rejected at load time with
// the pod, the container and the kind named.
func TestUnknownKindIsAValidationError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pod, _ := pluginhosttest.Pod("u", map[string]string{customprobe.Annotation: `[{"container":"app","type":"readiness",
		"plugin":{"name":"dns","port":53}}]`})
	errs := podprobes.Of(pod, e.knownKinds()).Errors()
	if len(errs) != 1 {
		t.Fatalf("errors %v", errs)
	}
	msg := errs[0].Error()
	for _, want := range []string{`no plugin serves probe kind "dns"`, "default/pod-u", `container "app"`, "plugin.name"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not contain %q", msg, want)
		}
	}
}
