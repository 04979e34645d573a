package manifest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime"
)

// realDir holds real-world manifests and SOURCES.md, which lists the exact
// probes of each file. The tests skip when it is absent.
const realDir = "../../../shared/manifests/real"

// realProbe is one row of a SOURCES.md probe table, in its own words:
//   - workload: "Kind/name", or "List.items[N]/Kind/name" inside a List;
//   - port: the number, or "name → number" for a named port, resolved
//     against the ports of the container that owns the probe; "—" for exec;
//   - target: "HTTP GET /path" (plus ", header Name: value"), "TCP connect",
//     `gRPC health Check, service ""`, or an exec argv `["a", "b"]`;
//   - timing: only the fields the file sets (initialDelay, timeout, period,
//     successThr, failureThr); "" for all defaults. The test applies the API
//     defaults (timeout 1, period 10, successThr 1, failureThr 3) to the rest.
type realProbe struct {
	workload, container string
	sidecar             bool // a restartable init container (restartPolicy: Always)
	probe, handler      string
	port, target        string
	timing              string
}

type realFile struct {
	section int
	file    string
	// entries are the pods the file yields, in file order, as
	// "Kind/name" or "List.items[N]/Kind/name".
	entries []string
	// skipped counts the non-workload documents and List items.
	skipped int
	// hooks counts the lifecycle handlers (postStart, preStop) of all
	// containers: they are decoded, and must not become probes.
	hooks int
	// warnings are the expected Entry.Warnings, "workload: warning".
	warnings []string
	probes   []realProbe
}

// realFiles transcribes SOURCES.md. Decisions on what it flags:
//   - #11: a Deployment without spec.selector (a kustomize base) is loaded,
//     with a warning: the API server would refuse it, but its probes are
//     well-formed and `probed check` should show them.
//   - #14, #17, #22, #24 (and #23, #25): lifecycle hooks (preStop/postStart
//     httpGet, exec, tcpSocket) are decoded as part of the container and
//     never become probes; `hooks` counts them to prove they were seen.
//   - #14: Jobs without probes are entries with no probes (nothing to
//     schedule); #22: a Job with restartPolicy Never and a native sidecar.
//   - #20, #18: custom kinds without a pod template (Gateway, InferencePool)
//     and all other non-workload kinds are skipped and counted.
//   - #21, #22, #23: the trailing bare `---` is an empty document, skipped.
//   - #23: `kind: List` after `items:` is a List.
//
// SOURCES.md announces 25 files, but the copy here holds sections 11–25 only
// and the directory holds exactly those 15 files. The traps of sections 1–10
// are covered by synthetic documents in decode_test.go instead: KYAML flow
// syntax (#2, #4: TestKYAML), a broken handler key (#5: TestDecodeStrict
// "misspelled gRPC", "handler key at the wrong level"), and unfilled
// template placeholders (#8–#10, which match kube-up's DNS add-ons:
// TestDecodeStrict "unfilled placeholder in a quantity" — an error, as
// kubectl gives, naming resources.limits[memory] and the placeholder —
// and TestPlaceholderInStringField — a warning for httpGet.host).
var realFiles = []realFile{
	{section: 11, file: "metrics-server-base-deployment-https-named-port.yaml",
		entries:  []string{"Deployment/metrics-server"},
		warnings: []string{"Deployment/metrics-server: spec.selector: Required value: the API server refuses a Deployment without a selector; probed loads its pod template anyway"},
		probes: []realProbe{
			{"Deployment/metrics-server", "metrics-server", false, "livenessProbe", "httpGet", "https → 10250", "HTTPS GET /livez", "period=10, failureThr=3"},
			{"Deployment/metrics-server", "metrics-server", false, "readinessProbe", "httpGet", "https → 10250", "HTTPS GET /readyz", "initialDelay=20, period=10, failureThr=3"},
		}},
	{section: 12, file: "kube-prometheus-prometheus-adapter-startup-https.yaml",
		entries: []string{"Deployment/prometheus-adapter"},
		probes: []realProbe{
			{"Deployment/prometheus-adapter", "prometheus-adapter", false, "startupProbe", "httpGet", "https → 6443", "HTTPS GET /livez", "period=10, failureThr=18"},
			{"Deployment/prometheus-adapter", "prometheus-adapter", false, "livenessProbe", "httpGet", "https → 6443", "HTTPS GET /livez", "period=5, failureThr=5"},
			{"Deployment/prometheus-adapter", "prometheus-adapter", false, "readinessProbe", "httpGet", "https → 6443", "HTTPS GET /readyz", "period=5, failureThr=5"},
		}},
	{section: 13, file: "kube-state-metrics-named-ports.yaml",
		entries: []string{"Deployment/kube-state-metrics"},
		probes: []realProbe{
			{"Deployment/kube-state-metrics", "kube-state-metrics", false, "livenessProbe", "httpGet", "http-metrics → 8080", "HTTP GET /livez", "initialDelay=5, timeout=5"},
			{"Deployment/kube-state-metrics", "kube-state-metrics", false, "readinessProbe", "httpGet", "telemetry → 8081", "HTTP GET /readyz", "initialDelay=5, timeout=5"},
		}},
	{section: 14, file: "ingress-nginx-cloud-deploy-multi-with-jobs.yaml",
		entries: []string{"Deployment/ingress-nginx-controller", "Job/ingress-nginx-admission-create", "Job/ingress-nginx-admission-patch"},
		skipped: 16, hooks: 1,
		probes: []realProbe{
			{"Deployment/ingress-nginx-controller", "controller", false, "livenessProbe", "httpGet", "10254", "HTTP GET /healthz", "initialDelay=10, timeout=1, period=10, successThr=1, failureThr=5"},
			{"Deployment/ingress-nginx-controller", "controller", false, "readinessProbe", "httpGet", "10254", "HTTP GET /healthz", "initialDelay=10, timeout=1, period=10, successThr=1, failureThr=3"},
		}},
	{section: 15, file: "argocd-repo-server-query-path.yaml",
		entries: []string{"Deployment/argocd-repo-server"},
		probes: []realProbe{
			{"Deployment/argocd-repo-server", "argocd-repo-server", false, "livenessProbe", "httpGet", "8084", "HTTP GET /healthz?full=true", "initialDelay=30, timeout=5, period=30, failureThr=3"},
			{"Deployment/argocd-repo-server", "argocd-repo-server", false, "readinessProbe", "httpGet", "8084", "HTTP GET /healthz", "initialDelay=5, period=10"},
		}},
	{section: 16, file: "contour-deployment-http-tcp.yaml",
		entries: []string{"Deployment/contour"},
		probes: []realProbe{
			{"Deployment/contour", "contour", false, "livenessProbe", "httpGet", "8000", "HTTP GET /healthz", ""},
			{"Deployment/contour", "contour", false, "readinessProbe", "tcpSocket", "8001", "TCP connect", "period=10"},
		}},
	{section: 17, file: "contour-envoy-daemonset-lifecycle-hooks.yaml",
		entries: []string{"DaemonSet/envoy"}, hooks: 2,
		probes: []realProbe{
			{"DaemonSet/envoy", "envoy", false, "readinessProbe", "httpGet", "8002", "HTTP GET /ready", "initialDelay=3, period=4"},
		}},
	{section: 18, file: "onlineboutique-release-v0.10.6-multi.yaml",
		entries: []string{"Deployment/frontend", "Deployment/adservice", "Deployment/currencyservice", "Deployment/cartservice",
			"Deployment/redis-cart", "Deployment/loadgenerator", "Deployment/recommendationservice", "Deployment/checkoutservice",
			"Deployment/emailservice", "Deployment/paymentservice", "Deployment/shippingservice", "Deployment/productcatalogservice"},
		skipped: 23,
		probes: []realProbe{
			{"Deployment/frontend", "server", false, "livenessProbe", "httpGet", "8080", "HTTP GET /_healthz, header Cookie: shop_session-id=x-liveness-probe", "initialDelay=10"},
			{"Deployment/frontend", "server", false, "readinessProbe", "httpGet", "8080", "HTTP GET /_healthz, header Cookie: shop_session-id=x-readiness-probe", "initialDelay=10"},
			{"Deployment/adservice", "server", false, "livenessProbe", "grpc", "9555", `gRPC health Check, service ""`, "initialDelay=20, period=15"},
			{"Deployment/adservice", "server", false, "readinessProbe", "grpc", "9555", `gRPC health Check, service ""`, "initialDelay=20, period=15"},
			{"Deployment/currencyservice", "server", false, "livenessProbe", "grpc", "7000", `gRPC health Check, service ""`, ""},
			{"Deployment/currencyservice", "server", false, "readinessProbe", "grpc", "7000", `gRPC health Check, service ""`, ""},
			{"Deployment/cartservice", "server", false, "livenessProbe", "grpc", "7070", `gRPC health Check, service ""`, "initialDelay=15, period=10"},
			{"Deployment/cartservice", "server", false, "readinessProbe", "grpc", "7070", `gRPC health Check, service ""`, "initialDelay=15"},
			{"Deployment/redis-cart", "redis", false, "livenessProbe", "tcpSocket", "6379", "TCP connect", "period=5"},
			{"Deployment/redis-cart", "redis", false, "readinessProbe", "tcpSocket", "6379", "TCP connect", "period=5"},
			{"Deployment/recommendationservice", "server", false, "livenessProbe", "grpc", "8080", `gRPC health Check, service ""`, "period=5"},
			{"Deployment/recommendationservice", "server", false, "readinessProbe", "grpc", "8080", `gRPC health Check, service ""`, "period=5"},
			{"Deployment/checkoutservice", "server", false, "livenessProbe", "grpc", "5050", `gRPC health Check, service ""`, ""},
			{"Deployment/checkoutservice", "server", false, "readinessProbe", "grpc", "5050", `gRPC health Check, service ""`, ""},
			{"Deployment/emailservice", "server", false, "livenessProbe", "grpc", "8080", `gRPC health Check, service ""`, "period=5"},
			{"Deployment/emailservice", "server", false, "readinessProbe", "grpc", "8080", `gRPC health Check, service ""`, "period=5"},
			{"Deployment/paymentservice", "server", false, "livenessProbe", "grpc", "50051", `gRPC health Check, service ""`, ""},
			{"Deployment/paymentservice", "server", false, "readinessProbe", "grpc", "50051", `gRPC health Check, service ""`, ""},
			{"Deployment/shippingservice", "server", false, "livenessProbe", "grpc", "50051", `gRPC health Check, service ""`, ""},
			{"Deployment/shippingservice", "server", false, "readinessProbe", "grpc", "50051", `gRPC health Check, service ""`, "period=5"},
			{"Deployment/productcatalogservice", "server", false, "livenessProbe", "grpc", "3550", `gRPC health Check, service ""`, ""},
			{"Deployment/productcatalogservice", "server", false, "readinessProbe", "grpc", "3550", `gRPC health Check, service ""`, ""},
		}},
	{section: 19, file: "onlineboutique-v0.7.0-cartservice-exec-grpc-health-probe.yaml",
		entries: []string{"Deployment/cartservice"}, skipped: 1,
		probes: []realProbe{
			{"Deployment/cartservice", "server", false, "livenessProbe", "exec", "—", `["/bin/grpc_health_probe", "-addr=:7070", "-rpc-timeout=5s"]`, "initialDelay=15, period=10"},
			{"Deployment/cartservice", "server", false, "readinessProbe", "exec", "—", `["/bin/grpc_health_probe", "-addr=:7070", "-rpc-timeout=5s"]`, "initialDelay=15"},
		}},
	{section: 20, file: "gateway-api-inference-conformance-grpc-service.yaml",
		entries: []string{"Deployment/primary-inference-model-server-deployment", "Deployment/secondary-inference-model-server-deployment",
			"Deployment/appprotocol-inference-model-server-deployment", "Deployment/primary-app-endpoint-picker",
			"Deployment/secondary-app-endpoint-picker", "Deployment/appprotocol-http-app-endpoint-picker",
			"Deployment/appprotocol-h2c-app-endpoint-picker", "Deployment/dp-inference-model-server-deployment", "Deployment/dp-app-endpoint-picker"},
		skipped: 16,
		probes: []realProbe{
			{"Deployment/primary-inference-model-server-deployment", "echoserver", false, "readinessProbe", "httpGet", "3000", "HTTP GET /", "initialDelay=3, period=5, failureThr=2"},
			{"Deployment/secondary-inference-model-server-deployment", "echoserver", false, "readinessProbe", "httpGet", "3000", "HTTP GET /", "initialDelay=3, period=5, failureThr=2"},
			{"Deployment/appprotocol-inference-model-server-deployment", "echoserver", false, "readinessProbe", "httpGet", "3000", "HTTP GET /", "initialDelay=3, period=5, failureThr=2"},
			{"Deployment/primary-app-endpoint-picker", "epp", false, "livenessProbe", "grpc", "9003", `gRPC health Check, service "inference-extension"`, "initialDelay=5, period=10"},
			{"Deployment/primary-app-endpoint-picker", "epp", false, "readinessProbe", "grpc", "9003", `gRPC health Check, service "inference-extension"`, "initialDelay=5, period=10"},
			{"Deployment/secondary-app-endpoint-picker", "epp", false, "livenessProbe", "grpc", "9003", `gRPC health Check, service "inference-extension"`, "initialDelay=5, period=10"},
			{"Deployment/secondary-app-endpoint-picker", "epp", false, "readinessProbe", "grpc", "9003", `gRPC health Check, service "inference-extension"`, "initialDelay=5, period=10"},
			{"Deployment/appprotocol-http-app-endpoint-picker", "epp", false, "livenessProbe", "grpc", "9003", `gRPC health Check, service "inference-extension"`, "initialDelay=5, period=10"},
			{"Deployment/appprotocol-http-app-endpoint-picker", "epp", false, "readinessProbe", "grpc", "9003", `gRPC health Check, service "inference-extension"`, "initialDelay=5, period=10"},
			{"Deployment/appprotocol-h2c-app-endpoint-picker", "epp", false, "livenessProbe", "grpc", "9003", `gRPC health Check, service "inference-extension"`, "initialDelay=5, period=10"},
			{"Deployment/appprotocol-h2c-app-endpoint-picker", "epp", false, "readinessProbe", "grpc", "9003", `gRPC health Check, service "inference-extension"`, "initialDelay=5, period=10"},
			{"Deployment/dp-inference-model-server-deployment", "echoserver-3000", false, "readinessProbe", "httpGet", "3000", "HTTP GET /", "initialDelay=3, period=5, failureThr=2"},
			{"Deployment/dp-inference-model-server-deployment", "echoserver-3002", false, "readinessProbe", "httpGet", "3002", "HTTP GET /", "initialDelay=3, period=5, failureThr=2"},
			{"Deployment/dp-inference-model-server-deployment", "echoserver-3004", false, "readinessProbe", "httpGet", "3004", "HTTP GET /", "initialDelay=3, period=5, failureThr=2"},
			{"Deployment/dp-app-endpoint-picker", "epp", false, "livenessProbe", "grpc", "9003", `gRPC health Check, service "inference-extension"`, "initialDelay=5, period=10"},
			{"Deployment/dp-app-endpoint-picker", "epp", false, "readinessProbe", "grpc", "9003", `gRPC health Check, service "inference-extension"`, "initialDelay=5, period=10"},
		}},
	{section: 21, file: "linkerd-injected-native-sidecar-two-deployments.yaml",
		entries: []string{"Deployment/redis", "Deployment/nginx"},
		probes: []realProbe{
			{"Deployment/redis", "linkerd-proxy", true, "startupProbe", "httpGet", "4191", "HTTP GET /ready", "period=1, failureThr=120"},
			{"Deployment/redis", "linkerd-proxy", true, "livenessProbe", "httpGet", "4191", "HTTP GET /live", "initialDelay=10, timeout=1"},
			{"Deployment/redis", "linkerd-proxy", true, "readinessProbe", "httpGet", "4191", "HTTP GET /ready", "initialDelay=2, timeout=1"},
			{"Deployment/nginx", "linkerd-proxy", true, "startupProbe", "httpGet", "4191", "HTTP GET /ready", "period=1, failureThr=120"},
			{"Deployment/nginx", "linkerd-proxy", true, "livenessProbe", "httpGet", "4191", "HTTP GET /live", "initialDelay=10, timeout=1"},
			{"Deployment/nginx", "linkerd-proxy", true, "readinessProbe", "httpGet", "4191", "HTTP GET /ready", "initialDelay=2, timeout=1"},
		}},
	{section: 22, file: "istio-injected-job-native-sidecar.yaml",
		entries: []string{"Job/pi"}, hooks: 1,
		probes: []realProbe{
			{"Job/pi", "istio-proxy", true, "startupProbe", "httpGet", "15021", "HTTP GET /healthz/ready", "timeout=3, period=1, failureThr=600"},
			{"Job/pi", "istio-proxy", true, "readinessProbe", "httpGet", "15021", "HTTP GET /healthz/ready", "timeout=3, period=15, failureThr=4"},
		}},
	{section: 23, file: "istio-injected-kind-list.yaml",
		entries: []string{"List.items[0]/Deployment/hello-v1", "List.items[1]/Deployment/hello-v2"}, hooks: 2,
		probes: []realProbe{
			{"List.items[0]/Deployment/hello-v1", "istio-proxy", true, "startupProbe", "httpGet", "15021", "HTTP GET /healthz/ready", "timeout=3, period=1, failureThr=600"},
			{"List.items[0]/Deployment/hello-v1", "istio-proxy", true, "readinessProbe", "httpGet", "15021", "HTTP GET /healthz/ready", "timeout=3, period=15, failureThr=4"},
			{"List.items[1]/Deployment/hello-v2", "istio-proxy", true, "startupProbe", "httpGet", "15021", "HTTP GET /healthz/ready", "timeout=3, period=1, failureThr=600"},
			{"List.items[1]/Deployment/hello-v2", "istio-proxy", true, "readinessProbe", "httpGet", "15021", "HTTP GET /healthz/ready", "timeout=3, period=15, failureThr=4"},
		}},
	{section: 24, file: "istio-hello-probes-named-port-per-container.yaml",
		entries: []string{"Deployment/hello"}, hooks: 2,
		probes: []realProbe{
			{"Deployment/hello", "hello", false, "livenessProbe", "httpGet", "http → 80", "HTTP GET /", ""},
			{"Deployment/hello", "hello", false, "readinessProbe", "httpGet", "3333", "HTTP GET /", ""},
			{"Deployment/hello", "world", false, "livenessProbe", "httpGet", "http → 90", "HTTP GET /", ""},
			{"Deployment/hello", "world", false, "readinessProbe", "exec", "—", `["cat", "/tmp/healthy"]`, ""},
		}},
	{section: 25, file: "cassandra-statefulset-exec-bash.yaml",
		entries: []string{"StatefulSet/cassandra"}, skipped: 1, hooks: 1,
		probes: []realProbe{
			{"StatefulSet/cassandra", "cassandra", false, "livenessProbe", "exec", "—", `["/bin/bash", "-c", "nodetool status"]`, "initialDelay=15, timeout=5, period=10, failureThr=3"},
			{"StatefulSet/cassandra", "cassandra", false, "readinessProbe", "exec", "—", `["/bin/bash", "-c", "/ready-probe.sh"]`, "initialDelay=15, timeout=5, period=10, failureThr=3"},
		}},
}

func realAvailable(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(realDir, "SOURCES.md")); err != nil {
		t.Skipf("real manifests not available: %v", err)
	}
}

// TestRealManifestsCovered: every file in the directory has expectations.
func TestRealManifestsCovered(t *testing.T) {
	realAvailable(t)
	files, err := filepath.Glob(filepath.Join(realDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range realFiles {
		known[f.file] = true
	}
	for _, f := range files {
		if !known[filepath.Base(f)] {
			t.Errorf("%s has no expectations in realFiles", filepath.Base(f))
		}
	}
}

func TestRealManifests(t *testing.T) {
	realAvailable(t)
	for _, rf := range realFiles {
		t.Run(fmt.Sprintf("%02d-%s", rf.section, strings.TrimSuffix(rf.file, ".yaml")), func(t *testing.T) {
			path := filepath.Join(realDir, rf.file)
			if _, err := os.Stat(path); err != nil {
				t.Skipf("%s: %v", rf.file, err)
			}
			r := LoadFileAll(path, Options{})
			if len(r.Errors) != 0 {
				t.Fatalf("errors:\n  %s", strings.Join(errStrings(t, r.Errors), "\n  "))
			}
			var entries, warnings []string
			hooks := 0
			var got []string
			for _, e := range r.Entries {
				if e.Source != path {
					t.Errorf("source %q", e.Source)
				}
				w := e.WorkloadKind + "/" + e.WorkloadName
				if e.Item >= 0 {
					w = fmt.Sprintf("List.items[%d]/%s", e.Item, w)
				}
				entries = append(entries, w)
				for _, s := range e.Warnings {
					warnings = append(warnings, w+": "+s)
				}
				if errs := ValidatePod(e.Pod); len(errs) != 0 {
					t.Errorf("%s: entry does not validate: %v", w, errs)
				}
				for _, list := range []struct {
					cs      []v1.Container
					sidecar bool
				}{{e.Pod.Spec.InitContainers, true}, {e.Pod.Spec.Containers, false}} {
					for i := range list.cs {
						c := &list.cs[i]
						if l := c.Lifecycle; l != nil {
							hooks += btoi(l.PreStop != nil) + btoi(l.PostStart != nil)
						}
						for _, pr := range containerProbes(c) {
							if pr.probe == nil {
								continue
							}
							if list.sidecar && !runtime.IsRestartable(c) {
								t.Errorf("%s/%s: probe on a regular init container", w, c.Name)
							}
							got = append(got, renderProbe(w, c, list.sidecar, pr.field, pr.probe))
						}
					}
				}
			}
			check := func(what string, got, want []string) {
				t.Helper()
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("%s:\ngot\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
				}
			}
			check("entries", entries, rf.entries)
			check("warnings", warnings, rf.warnings)
			if len(r.Skipped) != rf.skipped {
				t.Errorf("skipped %d documents, want %d: %+v", len(r.Skipped), rf.skipped, r.Skipped)
			}
			if hooks != rf.hooks {
				t.Errorf("lifecycle hooks: %d, want %d", hooks, rf.hooks)
			}
			var want []string
			for _, p := range rf.probes {
				want = append(want, p.String())
			}
			sort.Strings(got)
			sort.Strings(want)
			check("probes", got, want)
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// String renders a row with its timing completed by the API defaults.
func (p realProbe) String() string {
	t := map[string]int32{"initialDelay": 0, "timeout": 1, "period": 10, "successThr": 1, "failureThr": 3}
	if p.timing != "" {
		for _, kv := range strings.Split(p.timing, ", ") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.Atoi(v)
			if _, known := t[k]; !known || err != nil {
				panic("bad timing " + p.timing)
			}
			t[k] = int32(n)
		}
	}
	return fmt.Sprintf("%s | %s | sidecar=%v | %s | %s | %s | %s | initialDelay=%d, timeout=%d, period=%d, successThr=%d, failureThr=%d",
		p.workload, p.container, p.sidecar, p.probe, p.handler, p.port, p.target,
		t["initialDelay"], t["timeout"], t["period"], t["successThr"], t["failureThr"])
}

// renderProbe describes a decoded probe as a realProbe row.
func renderProbe(workload string, c *v1.Container, sidecar bool, field string, p *v1.Probe) string {
	r := realProbe{workload: workload, container: c.Name, sidecar: sidecar, probe: field, port: "—"}
	port := func(ps string, resolved int, err error) string {
		if err != nil {
			return fmt.Sprintf("%s → error %v", ps, err)
		}
		if ps != strconv.Itoa(resolved) {
			return ps + " → " + strconv.Itoa(resolved)
		}
		return ps
	}
	switch runtime.KindOf(p) {
	case runtime.KindExec:
		r.handler = "exec"
		q := make([]string, len(p.Exec.Command))
		for i, s := range p.Exec.Command {
			q[i] = strconv.Quote(s)
		}
		r.target = "[" + strings.Join(q, ", ") + "]"
	case runtime.KindHTTP:
		g := p.HTTPGet
		r.handler = "httpGet"
		n, err := runtime.ResolvePort(g.Port, c)
		r.port = port(g.Port.String(), n, err)
		r.target = fmt.Sprintf("%s GET %s", g.Scheme, g.Path)
		for _, h := range g.HTTPHeaders {
			r.target += fmt.Sprintf(", header %s: %s", h.Name, h.Value)
		}
		if g.Host != "" {
			r.target += ", host " + g.Host
		}
	case runtime.KindTCP:
		r.handler = "tcpSocket"
		n, err := runtime.ResolvePort(p.TCPSocket.Port, c)
		r.port = port(p.TCPSocket.Port.String(), n, err)
		r.target = "TCP connect"
	case runtime.KindGRPC:
		r.handler = "grpc"
		r.port = strconv.Itoa(int(p.GRPC.Port))
		svc := "<nil>"
		if p.GRPC.Service != nil {
			svc = strconv.Quote(*p.GRPC.Service)
		}
		r.target = "gRPC health Check, service " + svc
	}
	return fmt.Sprintf("%s | %s | sidecar=%v | %s | %s | %s | %s | initialDelay=%d, timeout=%d, period=%d, successThr=%d, failureThr=%d",
		r.workload, r.container, r.sidecar, r.probe, r.handler, r.port, r.target,
		p.InitialDelaySeconds, p.TimeoutSeconds, p.PeriodSeconds, p.SuccessThreshold, p.FailureThreshold)
}

// TestRealManifestsMutated: the real files with a broken handler key or an
// unknown field fail the right document only, naming it.
func TestRealManifestsMutated(t *testing.T) {
	realAvailable(t)
	data, err := os.ReadFile(filepath.Join(realDir, "onlineboutique-release-v0.10.6-multi.yaml"))
	if err != nil {
		t.Skip(err)
	}
	// The first grpc probe (adservice) gets a case-mangled handler key.
	broken := strings.Replace(string(data), "grpc:", "gRPC:", 1)
	r := DecodeAll([]byte(broken), "ob.yaml", Options{})
	got := errStrings(t, r.Errors)
	want := `ob.yaml: document 5: deployment default/adservice: container "server": spec.template.spec.containers[0].readinessProbe.gRPC: unknown field "gRPC" (did you mean "grpc"?)`
	if len(got) != 1 || got[0] != want {
		t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), want)
	}
	if len(r.Entries) != 11 || len(r.Skipped) != 23 {
		t.Errorf("entries %d skipped %d, want 11 and 23", len(r.Entries), len(r.Skipped))
	}
}
