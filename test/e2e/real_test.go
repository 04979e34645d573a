package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// realDir holds the real public manifests and SOURCES.md, which lists each
// probe's stand-in; the test skips when it is absent.
const realDir = "../../../shared/manifests/real"

// realRow is the row `probed check` must print for one probe.
type realRow struct {
	pod, container, probe, handler string
	// port is the stand-in port the probe targets (0 for exec): when it
	// cannot be bound here the row is skipped.
	port   int
	result string
	// msg must be contained in MESSAGE ("{ip}" is the run's pod IP); ""
	// means MESSAGE must be empty.
	msg string
	// absent: the row is asserted only when this host path does not exist
	// (an exec probe's absolute path that would otherwise exist).
	absent string
}

// ok is a passing probe: MESSAGE is "HTTP 200" for HTTP, empty otherwise.
func ok(pod, container, probe, handler string, port int) realRow {
	r := realRow{pod: pod, container: container, probe: probe, handler: handler, port: port, result: "success"}
	if handler == "http" {
		r.msg = "HTTP 200"
	}
	return r
}

func failed(pod, container, probe, handler string, port int, msg string) realRow {
	return realRow{pod: pod, container: container, probe: probe, handler: handler, port: port, result: "failure", msg: msg}
}

// realRun is one `probed check -f FILE --pod-ip IP --allow-host-exec` with
// its stand-ins bound to IP.
type realRun struct {
	label    string
	ip       string
	args     []string // more flags (--container, --probe)
	standIns []standIn
	rows     []realRow
	// stderr lines expected ("{file}" is the file's path); without them
	// stderr must be empty.
	stderr []string
	// tolerate are prefixes of stderr lines that may or may not appear
	// (timing): known issues, reported elsewhere.
	tolerate []string
	// files are put in the exec stubs' private root; execCalls are the
	// stub calls expected (sorted).
	files     map[string]string
	execCalls []string
	// requires are host paths without which the run is skipped.
	requires []string
}

type realPlan struct {
	section int
	file    string
	runs    []realRun
}

// realPlans follows SOURCES.md. Every file gets loopback addresses of its
// own, 127.0.<section>.<run>, so files never collide and their stand-ins
// never meet a local service on 127.0.0.1. probed check has one --pod-ip
// for every pod of a file: pods of one file that share a port share a
// stand-in, which counts all their requests; where two pods need different
// protocols on one port (#18: 8080 is HTTP for frontend and gRPC for two
// others), the file is checked twice, once with each stand-in, and the
// probes that meet the other protocol must fail.
//
// The stand-ins hold state: realPlans returns new ones on every call.
func realPlans() []realPlan {
	return []realPlan{
		{11, "metrics-server-base-deployment-https-named-port.yaml", []realRun{{
			standIns: []standIn{httpsAt(10250, get("/livez", 1), get("/readyz", 1))},
			rows: []realRow{
				ok("kube-system/metrics-server", "metrics-server", "readiness", "http", 10250),
				ok("kube-system/metrics-server", "metrics-server", "liveness", "http", 10250),
			},
			// A Deployment without a selector is loaded, with a warning.
			stderr: []string{"{file}: document 1: pod kube-system/metrics-server: warning: spec.selector: Required value"},
		}}},
		{12, "kube-prometheus-prometheus-adapter-startup-https.yaml", []realRun{{
			standIns: []standIn{httpsAt(6443, get("/livez", 2), get("/readyz", 1))},
			rows: []realRow{
				ok("monitoring/prometheus-adapter", "prometheus-adapter", "startup", "http", 6443),
				ok("monitoring/prometheus-adapter", "prometheus-adapter", "readiness", "http", 6443),
				ok("monitoring/prometheus-adapter", "prometheus-adapter", "liveness", "http", 6443),
			},
		}}},
		{13, "kube-state-metrics-named-ports.yaml", []realRun{{
			standIns: []standIn{httpAt(8080, get("/livez", 1)), httpAt(8081, get("/readyz", 1))},
			rows: []realRow{
				ok("kube-system/kube-state-metrics", "kube-state-metrics", "readiness", "http", 8081),
				ok("kube-system/kube-state-metrics", "kube-state-metrics", "liveness", "http", 8080),
			},
		}}},
		{14, "ingress-nginx-cloud-deploy-multi-with-jobs.yaml", []realRun{{
			standIns: []standIn{httpAt(10254, get("/healthz", 2))},
			rows: []realRow{
				ok("ingress-nginx/ingress-nginx-controller", "controller", "readiness", "http", 10254),
				ok("ingress-nginx/ingress-nginx-controller", "controller", "liveness", "http", 10254),
			},
		}}},
		{15, "argocd-repo-server-query-path.yaml", []realRun{{
			// The query must reach the server as a query, not as %3F.
			standIns: []standIn{httpAt(8084, get("/healthz?full=true", 1), get("/healthz", 1))},
			rows: []realRow{
				ok("default/argocd-repo-server", "argocd-repo-server", "readiness", "http", 8084),
				ok("default/argocd-repo-server", "argocd-repo-server", "liveness", "http", 8084),
			},
		}}},
		{16, "contour-deployment-http-tcp.yaml", []realRun{{
			standIns: []standIn{httpAt(8000, get("/healthz", 1)), tcpAt(8001, 1)},
			rows: []realRow{
				ok("projectcontour/contour", "contour", "readiness", "tcp", 8001),
				ok("projectcontour/contour", "contour", "liveness", "http", 8000),
			},
		}}},
		{17, "contour-envoy-daemonset-lifecycle-hooks.yaml", []realRun{{
			// :8090 is envoy's preStop httpGet hook: never probed.
			standIns: []standIn{httpAt(8002, get("/ready", 1)), httpAt(8090)},
			rows: []realRow{
				ok("projectcontour/envoy", "envoy", "readiness", "http", 8002),
			},
		}}},
		{18, "onlineboutique-release-v0.10.6-multi.yaml", []realRun{
			{
				label:    "8080 is frontend's HTTP",
				standIns: boutiqueStandIns(httpAt(8080, get("/_healthz", 1, "Cookie", "shop_session-id=x-liveness-probe"), get("/_healthz", 1, "Cookie", "shop_session-id=x-readiness-probe"))),
				rows: boutiqueRows(
					[2]realRow{ok("default/frontend", "server", "readiness", "http", 8080), ok("default/frontend", "server", "liveness", "http", 8080)},
					`failed to connect service "{ip}:8080"`),
			},
			{
				label:    "8080 is recommendationservice's and emailservice's gRPC",
				standIns: boutiqueStandIns(grpcAt(8080, "", 4)),
				// The gRPC server sends its SETTINGS frame as soon as frontend's
				// probe connects; when that beats the request, Go's HTTP client
				// logs those bytes with the standard log package, straight to
				// stderr: response bytes reaching the logs, against BR-22
				// (reported, outside this package).
				tolerate: []string{"Unsolicited response received on idle HTTP channel"},
				rows: boutiqueRows(
					[2]realRow{
						failed("default/frontend", "server", "readiness", "http", 8080, `Get "http://{ip}:8080/_healthz"`),
						failed("default/frontend", "server", "liveness", "http", 8080, `Get "http://{ip}:8080/_healthz"`),
					}, ""),
			},
		}},
		{19, "onlineboutique-v0.7.0-cartservice-exec-grpc-health-probe.yaml", []realRun{{
			// /bin/grpc_health_probe is not on this host: a command that cannot
			// be started is an errored probe, not a failure.
			rows: []realRow{
				{pod: "default/cartservice", container: "server", probe: "readiness", handler: "exec", result: "error",
					msg: "fork/exec /bin/grpc_health_probe: no such file or directory", absent: "/bin/grpc_health_probe"},
				{pod: "default/cartservice", container: "server", probe: "liveness", handler: "exec", result: "error",
					msg: "fork/exec /bin/grpc_health_probe: no such file or directory", absent: "/bin/grpc_health_probe"},
			},
		}}},
		{20, "gateway-api-inference-conformance-grpc-service.yaml", []realRun{{
			standIns: []standIn{httpAt(3000, get("/", 4)), httpAt(3002, get("/", 1)), httpAt(3004, get("/", 1)), grpcAt(9003, "inference-extension", 10)},
			rows: func() []realRow {
				const ns = "inference-conformance-app-backend/"
				echo := func(pod, c string, port int) realRow { return ok(ns+pod, c, "readiness", "http", port) }
				epp := func(pod string) []realRow {
					return []realRow{ok(ns+pod, "epp", "readiness", "grpc", 9003), ok(ns+pod, "epp", "liveness", "grpc", 9003)}
				}
				var rows []realRow
				rows = append(rows, echo("primary-inference-model-server-deployment", "echoserver", 3000),
					echo("secondary-inference-model-server-deployment", "echoserver", 3000),
					echo("appprotocol-inference-model-server-deployment", "echoserver", 3000))
				rows = append(rows, epp("primary-app-endpoint-picker")...)
				rows = append(rows, epp("secondary-app-endpoint-picker")...)
				rows = append(rows, epp("appprotocol-http-app-endpoint-picker")...)
				rows = append(rows, epp("appprotocol-h2c-app-endpoint-picker")...)
				rows = append(rows, echo("dp-inference-model-server-deployment", "echoserver-3000", 3000),
					echo("dp-inference-model-server-deployment", "echoserver-3002", 3002),
					echo("dp-inference-model-server-deployment", "echoserver-3004", 3004))
				return append(rows, epp("dp-app-endpoint-picker")...)
			}(),
		}}},
		{21, "linkerd-injected-native-sidecar-two-deployments.yaml", []realRun{{
			standIns: []standIn{httpAt(4191, get("/ready", 4), get("/live", 2))},
			rows: []realRow{
				ok("default/redis", "linkerd-proxy", "startup", "http", 4191),
				ok("default/redis", "linkerd-proxy", "readiness", "http", 4191),
				ok("default/redis", "linkerd-proxy", "liveness", "http", 4191),
				ok("default/nginx", "linkerd-proxy", "startup", "http", 4191),
				ok("default/nginx", "linkerd-proxy", "readiness", "http", 4191),
				ok("default/nginx", "linkerd-proxy", "liveness", "http", 4191),
			},
		}}},
		{22, "istio-injected-job-native-sidecar.yaml", []realRun{{
			standIns: []standIn{httpAt(15021, get("/healthz/ready", 2))},
			rows: []realRow{
				ok("default/pi", "istio-proxy", "startup", "http", 15021),
				ok("default/pi", "istio-proxy", "readiness", "http", 15021),
			},
			// The preStop hook (pilot-agent request ... drain) is no probe.
			execCalls: nil,
		}}},
		{23, "istio-injected-kind-list.yaml", []realRun{{
			standIns: []standIn{httpAt(15021, get("/healthz/ready", 4))},
			rows: []realRow{
				ok("default/hello-v1", "istio-proxy", "startup", "http", 15021),
				ok("default/hello-v1", "istio-proxy", "readiness", "http", 15021),
				ok("default/hello-v2", "istio-proxy", "startup", "http", 15021),
				ok("default/hello-v2", "istio-proxy", "readiness", "http", 15021),
			},
		}}},
		{24, "istio-hello-probes-named-port-per-container.yaml", []realRun{
			{
				label: "healthy file present",
				// The named port http is 80 in hello and 90 in world; :91 and
				// :93 are lifecycle hooks, never probed.
				standIns: []standIn{httpAt(80, get("/", 1)), httpAt(3333, get("/", 1)), httpAt(90, get("/", 1)), httpAt(91), tcpAt(93, 0)},
				files:    map[string]string{"/tmp/healthy": "ok\n"},
				rows: []realRow{
					ok("default/hello", "hello", "readiness", "http", 3333),
					ok("default/hello", "hello", "liveness", "http", 80),
					ok("default/hello", "world", "readiness", "exec", 0),
					ok("default/hello", "world", "liveness", "http", 90),
				},
				execCalls: []string{"cat /tmp/healthy"},
			},
			{
				label: "healthy file absent",
				args:  []string{"--container", "world", "--probe", "readiness"},
				rows: []realRow{
					failed("default/hello", "world", "readiness", "exec", 0, "tmp/healthy: No such file or directory"),
				},
				execCalls: []string{"cat /tmp/healthy"},
			},
		}},
		{25, "cassandra-statefulset-exec-bash.yaml", []realRun{{
			requires: []string{"/bin/bash"},
			rows: []realRow{
				// /ready-probe.sh is not on this host: bash starts and exits
				// 127, a failure (the command did run).
				{pod: "default/cassandra", container: "cassandra", probe: "readiness", handler: "exec", result: "failure",
					msg: "/ready-probe.sh: No such file or directory", absent: "/ready-probe.sh"},
				ok("default/cassandra", "cassandra", "liveness", "exec", 0),
			},
			// nodetool status (liveness), not nodetool drain (the preStop hook).
			execCalls: []string{"nodetool status"},
		}}},
	}
}

// boutiqueStandIns are the stand-ins of #18 with s on port 8080.
func boutiqueStandIns(s standIn) []standIn {
	if h, ok := s.(*httpStandIn); ok {
		h.grpcClients = true // recommendationservice's and emailservice's probes
	}
	return []standIn{s, grpcAt(9555, "", 2), grpcAt(7000, "", 2), grpcAt(7070, "", 2), tcpAt(6379, 2),
		grpcAt(5050, "", 2), grpcAt(50051, "", 4), grpcAt(3550, "", 2)}
}

// boutiqueRows are the rows of #18: frontend's, then the others; the gRPC
// probes on 8080 fail with grpc8080Msg when it is not "".
func boutiqueRows(frontend [2]realRow, grpc8080Msg string) []realRow {
	g := func(pod string, port int) []realRow {
		if port == 8080 && grpc8080Msg != "" {
			return []realRow{failed("default/"+pod, "server", "readiness", "grpc", port, grpc8080Msg),
				failed("default/"+pod, "server", "liveness", "grpc", port, grpc8080Msg)}
		}
		return []realRow{ok("default/"+pod, "server", "readiness", "grpc", port), ok("default/"+pod, "server", "liveness", "grpc", port)}
	}
	rows := frontend[:]
	rows = append(rows, g("adservice", 9555)...)
	rows = append(rows, g("currencyservice", 7000)...)
	rows = append(rows, g("cartservice", 7070)...)
	rows = append(rows, ok("default/redis-cart", "redis", "readiness", "tcp", 6379), ok("default/redis-cart", "redis", "liveness", "tcp", 6379))
	rows = append(rows, g("recommendationservice", 8080)...)
	rows = append(rows, g("checkoutservice", 5050)...)
	rows = append(rows, g("emailservice", 8080)...)
	rows = append(rows, g("paymentservice", 50051)...)
	rows = append(rows, g("shippingservice", 50051)...)
	return append(rows, g("productcatalogservice", 3550)...)
}

// TestRealManifests runs `probed check` on every real public manifest
// against local stand-ins (SOURCES.md) and asserts every probe's row, the
// exit status, what each stand-in saw (so a check that does not really
// probe fails) and which exec commands ran.
func TestRealManifests(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(realDir)
	if os.IsNotExist(err) {
		t.Skipf("%s is absent", realDir)
	}
	if err != nil {
		t.Fatal(err)
	}
	if l, err := net.Listen("tcp", "127.0.11.1:0"); err != nil {
		t.Skipf("loopback addresses other than 127.0.0.1 cannot be bound here (%v); the stand-ins need them", err)
	} else {
		_ = l.Close()
	}
	planned := map[string]bool{}
	plans := realPlans()
	for _, p := range plans {
		planned[p.file] = true
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json")) && !planned[name] {
			t.Errorf("%s has no stand-in plan: add one to realPlans, from SOURCES.md", name)
		}
	}
	stubs := installExecStubs(t)
	for _, plan := range plans {
		t.Run(fmt.Sprintf("%02d-%s", plan.section, strings.TrimSuffix(plan.file, ".yaml")), func(t *testing.T) {
			t.Parallel()
			path, err := filepath.Abs(filepath.Join(realDir, plan.file))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); err != nil {
				t.Skipf("%s: %v", plan.file, err)
			}
			for i, run := range plan.runs {
				run.ip = fmt.Sprintf("127.0.%d.%d", plan.section, i+1)
				if len(plan.runs) > 1 {
					t.Run(run.label, func(t *testing.T) { checkRealRun(t, path, stubs, run) })
				} else {
					checkRealRun(t, path, stubs, run)
				}
			}
		})
	}
}

func checkRealRun(t *testing.T, path, stubs string, run realRun) {
	t.Helper()
	for _, p := range run.requires {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("this run needs %s: %v", p, err)
		}
	}
	unbound := map[int]bool{}
	var live []standIn
	for _, s := range run.standIns {
		if err := s.start(t, run.ip); err != nil {
			t.Logf("SKIP the probes on port %d: cannot bind %s:%d here: %v", s.port(), run.ip, s.port(), err)
			unbound[s.port()] = true
			continue
		}
		live = append(live, s)
	}
	env, stubLog := execEnv(t, stubs, run.files)
	args := append([]string{"check", "-f", path, "--pod-ip", run.ip, "--allow-host-exec"}, run.args...)
	stdout, stderr, code := runProbed(t, env, args...)
	t.Logf("probed %s → exit %d\n%s%s", strings.Join(args[1:], " "), code, stdout, stderr)

	rows := parseTable(t, stdout)
	if len(rows) != len(run.rows) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(run.rows), stdout)
	}
	skipped := len(unbound) > 0
	wantCode := 0
	for i, want := range run.rows {
		got := rows[i]
		id := fmt.Sprintf("%s %s %s", want.pod, want.container, want.probe)
		if got.Pod != want.pod || got.Container != want.container || got.Probe != want.probe || got.Handler != want.handler {
			t.Errorf("row %d = %s, want %s %s", i, got, id, want.handler)
			continue
		}
		if unbound[want.port] {
			t.Logf("SKIP %s: its stand-in port %d cannot be bound (row: %s)", id, want.port, got)
			continue
		}
		if want.absent != "" {
			if _, err := os.Stat(want.absent); err == nil {
				t.Logf("SKIP %s: %s exists on this host, so the result depends on it (row: %s)", id, want.absent, got)
				skipped = true
				continue
			}
		}
		if want.result != "success" {
			wantCode = 1
		}
		msg := strings.ReplaceAll(want.msg, "{ip}", run.ip)
		if got.Result != want.result || (msg == "" && got.Message != "") || !strings.Contains(got.Message, msg) {
			t.Errorf("%s: %s %q, want %s with message %q", id, got.Result, got.Message, want.result, msg)
		}
	}
	if !skipped && code != wantCode {
		t.Errorf("exit status %d, want %d", code, wantCode)
	}
	var wantErr []string
	for _, s := range run.stderr {
		wantErr = append(wantErr, strings.ReplaceAll(s, "{file}", path))
	}
	var gotErr []string
	for _, l := range strings.Split(strings.TrimRight(stderr, "\n"), "\n") {
		tolerated := l == ""
		for _, p := range run.tolerate {
			// The standard log package prefixes a date and a time.
			tolerated = tolerated || strings.HasPrefix(l, p) || (len(l) > 20 && strings.HasPrefix(l[20:], p))
		}
		if tolerated {
			if l != "" {
				t.Logf("tolerated stderr line (known issue): %s", l)
			}
			continue
		}
		gotErr = append(gotErr, l)
	}
	if len(gotErr) != len(wantErr) {
		t.Errorf("stderr has %d lines, want %d:\n%s", len(gotErr), len(wantErr), stderr)
	} else {
		for i := range wantErr {
			if !strings.HasPrefix(gotErr[i], wantErr[i]) {
				t.Errorf("stderr line %q, want it to start with %q", gotErr[i], wantErr[i])
			}
		}
	}
	for _, s := range live {
		s.verify(t)
	}
	wantCalls := append([]string(nil), run.execCalls...)
	sort.Strings(wantCalls)
	if calls := stubCalls(stubLog); !reflect.DeepEqual(calls, wantCalls) && !(len(calls) == 0 && len(wantCalls) == 0) {
		t.Errorf("exec stubs called %q, want %q", calls, wantCalls)
	}
}
