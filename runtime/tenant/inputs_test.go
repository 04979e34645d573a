package tenant_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/agent/actuate"
	"github.com/probed/probed/agent/kube/panicthreshold"
	"github.com/probed/probed/manager/customprobe"
)

// Every field a tenant can write is an input of the one rule: the
// probed.io/probes annotation's schema (manager/customprobe.Probe, v1.Probe
// inside it, expect's checks), the offload record's
// (customprobe.Offloaded) and, in cluster mode, every field of the pod
// the agent caches (v1.Pod). TestEveryTenantInputHasAHostileCase walks both
// by reflection and fails when a field has no row here, so that a field
// added later (to the annotation, or by a Kubernetes release to v1.Pod)
// is not served before someone says what bounds it and where its hostile
// case is tested. Each row is also a row of docs/cluster.md's table
// ("Every input a tenant controls").

// input is one row: the fields it covers, the bound, and the tests that
// hold its hostile case (huge, deep, slow, never-ending, many at once).
type input struct {
	// Fields are paths ("annotation:httpGet.path", "pod:spec.containers[].env")
	// or prefixes of paths (a row covers every field under it that no
	// longer row covers).
	Fields []string
	// Doc is the first cell of the row in docs/cluster.md.
	Doc string
	// Tests are "dir.TestName" (the package's directory from the
	// module's root) of tests that hold the hostile case of what is
	// bounded now.
	Tests []string
	// Pending says what is not bounded yet: a row whose bound other work
	// is to bring (its Tests hold what is bounded already).
	Pending string
}

// inputs are the rows. Keep them in the order of docs/cluster.md's table.
var inputs = []input{
	// The annotation.
	{Fields: []string{"annotation:[]"}, Doc: "the annotation (its size, its elements)",
		Tests: []string{"manager/customprobe.TestParseTooLong", "manager/customprobe.TestLimitsMaxProbesRefusesTheWholeAnnotation", "test/e2e.TestClusterHostilePodsStayUnderTheMemoryLimit"}},
	{Fields: []string{"annotation:container", "annotation:type"}, Doc: "`container`, `type`",
		Tests: []string{"manager/customprobe.TestParseErrors", "agent.TestAgent_HostileStringsAreBoundedEverywhere", "agent/kube/limits.TestRefusalMessageIsBounded"}},
	{Fields: []string{"annotation:periodSeconds", "annotation:periodMilliseconds", "annotation:unhealthyPeriodSeconds", "annotation:unhealthyPeriodMilliseconds",
		"annotation:transitionPeriodSeconds", "annotation:transitionPeriodMilliseconds"}, Doc: "periods (`periodSeconds`, by state, milliseconds)",
		Tests: []string{"manager/customprobe.TestLimitsMinPeriodHoldsForStatePeriods", "agent/kube/limits.TestBudgetAdmitsInOrderAndRefusesWhatDoesNotFit",
			"agent/kube/limits.TestBudgetShareRefusesOnlyTheNamespaceOverItsShare", "agent/kube/limits.TestBudgetShareTooLargeAndLeavingTheLine",
			"test/e2e.TestClusterProbeBudgetRefusesThenAdmits", "test/e2e.TestClusterProbeBudgetShareRefusesOnlyTheNamespaceOverIt"}},
	{Fields: []string{"annotation:timeoutSeconds", "annotation:timeoutMilliseconds"}, Doc: "`timeoutSeconds`, `timeoutMilliseconds`",
		Tests: []string{"manager.TestSharesKeepAHostilePodFromStarvingOthers", "runtime.TestSharesBoundOnePodAndLetOthersRun"}},
	{Fields: []string{"annotation:initialDelaySeconds", "annotation:initialDelayMilliseconds", "annotation:successThreshold", "annotation:failureThreshold"},
		Doc: "`initialDelaySeconds`, thresholds", Tests: []string{"manager/probespec.TestValidateTiming", "manager/customprobe.TestParseMillisecondsInvalid"}},
	{Fields: []string{"annotation:terminationGracePeriodSeconds"}, Doc: "`terminationGracePeriodSeconds`",
		Tests:   []string{"agent/kube/restart.TestPreStopTakesFromTheGracePeriod"},
		Pending: "a restart waits the whole grace period a pod asks for, holding a restart worker: a cap, and the workers shared fairly by namespace (tenant.Shares)"},
	{Fields: []string{"annotation:exec.command[]"}, Doc: "`exec.command`",
		Tests: []string{"agent/kube/cri.TestRunnerOutputFloodIsBounded", "agent/kube/resident.TestCRIHelperRunFloodIsKilled", "test/e2e.TestClusterCRIExecOnlyInThePodsContainer"}},
	{Fields: []string{"annotation:httpGet.path"}, Doc: "`httpGet.path`", Tests: []string{"agent.TestAgent_HostilePathIsBoundedEverywhere"}},
	{Fields: []string{"annotation:httpGet.keepAlive"}, Doc: "`httpGet.keepAlive`", Tests: []string{"plugins/http.TestKeepAliveHostileManyProbesTargetNeverCloses"}},
	{Fields: []string{"annotation:httpGet.host", "annotation:tcpSocket.host"}, Doc: "`httpGet.host`, `tcpSocket.host`",
		Tests: []string{"manager/customprobe.TestParseHostUnderTheEgressRule", "plugins/http.TestEgressRefusesAHostThatIsNotThePod", "agent.TestAgent_HostileStringsAreBoundedEverywhere"}},
	{Fields: []string{"annotation:httpGet.port", "annotation:tcpSocket.port", "annotation:grpc.port", "annotation:plugin.port", "annotation:httpGet.scheme",
		"annotation:httpGet.protocol", "annotation:grpc.mode"},
		Doc: "ports, `httpGet.scheme`, `httpGet.protocol`, `grpc.mode`", Tests: []string{"manager/customprobe.TestParseErrors", "plugins/tcp.TestEgressRefusesAHostThatIsNotThePod", "plugins/grpc.TestG1_TLSMode"}},
	{Fields: []string{"annotation:httpGet.httpHeaders[].name", "annotation:httpGet.httpHeaders[].value"}, Doc: "`httpGet.httpHeaders`",
		Tests: []string{"agent.TestAgent_HostileStringsAreBoundedEverywhere", "agent/api.TestPods_SecretsInPathsCommandsAndParamsRedacted"}},
	{Fields: []string{"annotation:grpc.service"}, Doc: "`grpc.service`", Tests: []string{"agent.TestAgent_HostileStringsAreBoundedEverywhere"}},
	{Fields: []string{"annotation:plugin.name", "annotation:plugin.params{}"}, Doc: "`plugin.name`, `plugin.params`",
		Tests: []string{"agent.TestAgent_HostileStringsAreBoundedEverywhere", "runtime/pluginhost.TestInFlightCap", "agent/api.TestPods_PluginSecretParamsRedacted"}},
	{Fields: []string{"annotation:expect.status[]", "annotation:expect.maxLatencyMilliseconds", "annotation:expect.certificateExpiresAfterDays"},
		Doc: "`expect.status`, `maxLatencyMilliseconds`, `certificateExpiresAfterDays`", Tests: []string{"runtime/expect.TestValidate"}},
	{Fields: []string{"annotation:expect.bodyRegex"}, Doc: "`expect.bodyRegex`",
		Tests: []string{"runtime/expect.TestRegexBoundedByItsProgram", "test/e2e.TestHostileChecksRefusedAndOthersOnTime", "test/e2e.TestClusterHostileChecksRefusedAndOthersOnTime"}},
	{Fields: []string{"annotation:expect.jsonPath.path", "annotation:expect.jsonPath.value"}, Doc: "`expect.jsonPath`",
		Tests: []string{"runtime/expect.TestJSONPathRefusesUnboundedForms", "runtime/expect.TestJSONPathCheckMemoryIsBoundedOnHostileBodies",
			"test/e2e.TestHostileChecksRefusedAndOthersOnTime", "test/e2e.TestClusterHostileChecksRefusedAndOthersOnTime"}},

	// The offload webhook's record, which a tenant may write by hand too.
	{Fields: []string{"offloaded:[]"}, Doc: "the offload record `probed.io/offloaded` (its size, its elements)",
		Tests: []string{"manager/podprobes.TestOffloadedHostile", "manager/podprobes.TestOffloadedCountsWithTheAnnotation", "agent/kube/offload.TestMoveForgedRecord"}},
	{Fields: []string{"offloaded:container", "offloaded:type"}, Doc: "the record's `container`, `type`",
		Tests: []string{"manager/podprobes.TestOffloadedRefusedLikeAnnotationProbes", "manager/podprobes.TestOffloadedAnnotationWins"}},
	{Fields: []string{"offloaded:probe"}, Doc: "the record's `probe`",
		Tests: []string{"manager/podprobes.TestOffloadedRefusedLikeAnnotationProbes", "agent.TestClusterOffloadedProbes", "agent/kube/webhook.TestOffloadWebhookOnTheAPIServer"}},

	// The pod, in cluster mode.
	{Fields: []string{"pod:status.containerStatuses[].containerID", "pod:status.initContainerStatuses[].containerID", "pod:status.ephemeralContainerStatuses[].containerID"},
		Doc: "a container's ID in the status", Tests: []string{"agent/kube/cri.TestRunnerRefusesAContainerNotThePods", "agent/kube/restart.TestRestartRefusesAContainerNotThePods",
			"test/e2e.TestClusterCRIExecOnlyInThePodsContainer", "test/e2e.TestClusterCRIRestartOnlyThePodsContainer"}},
	{Fields: []string{"pod:status.podIP", "pod:status.podIPs"}, Doc: "the pod's IPs in the status",
		Tests: []string{"plugins/http.TestEgressRefusesAHostThatIsNotThePod", "plugins/tcp.TestEgressRefusesAHostThatIsNotThePod"}},
	{Fields: []string{"pod:spec.containers[].lifecycle", "pod:spec.initContainers[].lifecycle", "pod:spec.terminationGracePeriodSeconds"},
		Doc: "`lifecycle.preStop`, the pod's `terminationGracePeriodSeconds`", Tests: []string{"agent/kube/restart.TestPreStopTakesFromTheGracePeriod"},
		Pending: "a probe-triggered restart waits the whole grace period and preStop hook: a cap after which the container is stopped anyway"},
	{Fields: []string{"pod:spec.containers[].env", "pod:spec.initContainers[].env", "pod:spec.ephemeralContainers[].env"}, Doc: "containers' `env`",
		Tests:   []string{"plugins/exec.TestE1_ExpandCommand"},
		Pending: "the cache keeps every value (1 MB of env a pod): the informer's transform is to keep only what probing needs"},
	{Fields: []string{"pod:spec.containers[].livenessProbe", "pod:spec.containers[].readinessProbe", "pod:spec.containers[].startupProbe",
		"pod:spec.initContainers[].livenessProbe", "pod:spec.initContainers[].readinessProbe", "pod:spec.initContainers[].startupProbe",
		"pod:spec.ephemeralContainers[].livenessProbe", "pod:spec.ephemeralContainers[].readinessProbe", "pod:spec.ephemeralContainers[].startupProbe"},
		Doc: "spec probes", Tests: []string{"manager.TestSkipSpecProbes", "agent/statuspage.TestPod_HostileValuesAreText"}},
	{Fields: []string{"guard:" + panicthreshold.Annotation}, Doc: "`probed.io/panic-threshold`",
		Tests: []string{"agent/kube/share.TestParseHostile", "agent/kube/panicthreshold.TestHostileThresholds", "agent.TestClusterPanicThresholdTwoAgents"}},
	{Fields: []string{"guard:" + actuate.RestartBudgetAnnotation, "guard:" + actuate.RestartBudgetWindowAnnotation}, Doc: "`probed.io/restart-budget`, `probed.io/restart-budget-window`",
		Tests: []string{"agent/kube/share.TestParseHostile", "agent/actuate.TestRestartBudgetShareAndHostileValues", "agent.TestClusterRestartBudgetHoldsEvictions"}},
	{Fields: []string{"pod:metadata.annotations{}"}, Doc: "the pod's other annotations",
		Tests:   []string{"agent/kube/podsource.TestTransformDropsWhatProbedNeverReads"},
		Pending: "the cache keeps every annotation (250 KB a pod): the informer's transform is to keep only probed's"},
	{Fields: []string{"pod:metadata.managedFields"}, Doc: "`managedFields`", Tests: []string{"agent/kube/podsource.TestTransformDropsManagedFieldsFromTheCache"}},
	{Fields: []string{"pod:metadata", "pod:kind", "pod:apiVersion", "pod:spec.readinessGates", "pod:spec.nodeName", "pod:spec.restartPolicy",
		"pod:spec.containers[].name", "pod:spec.containers[].ports", "pod:spec.containers[].restartPolicy", "pod:spec.initContainers[].name",
		"pod:spec.initContainers[].ports", "pod:spec.initContainers[].restartPolicy", "pod:spec.ephemeralContainers[].name", "pod:status"},
		Doc: "the pod's identity, containers' names and ports, the kubelet's status", Tests: []string{"agent/statuspage.TestIndex_HostileValuesAreText", "agent/statuspage.TestPod_HostileValuesAreText"},
		Pending: "every field is cached whole, each pod's copy as large as the API server allows; `/pods` copies every pod per request"},
	{Fields: []string{"pod:spec", "pod:spec.containers[]", "pod:spec.initContainers[]", "pod:spec.ephemeralContainers[]"},
		Doc:     "every other field of the spec",
		Tests:   []string{"agent/kube/podsource.TestTransformDropsWhatProbedNeverReads"},
		Pending: "not read, yet cached: the informer's transform is to drop it"},
}

// guardAnnotations are the annotations cluster mode's guards read, each a
// value a tenant writes (docs/cluster.md "When a whole Service fails").
var guardAnnotations = []string{panicthreshold.Annotation, actuate.RestartBudgetAnnotation, actuate.RestartBudgetWindowAnnotation}

// root is the module's root, from this package's directory.
const root = "../.."

func TestEveryTenantInputHasAHostileCase(t *testing.T) {
	var leaves []string
	walk(reflect.TypeFor[customprobe.Probe](), "annotation:", &leaves, map[reflect.Type]bool{})
	leaves = append(leaves, "annotation:[]") // the list itself
	walk(reflect.TypeFor[customprobe.Offloaded](), "offloaded:", &leaves, map[reflect.Type]bool{})
	leaves = append(leaves, "offloaded:[]")
	walk(reflect.TypeFor[v1.Pod](), "pod:", &leaves, map[reflect.Type]bool{})
	// The guards' annotations: read by key, not fields of a type.
	for _, key := range guardAnnotations {
		leaves = append(leaves, "guard:"+key)
	}

	covered := map[string]int{} // field of a row → leaves it covers
	for _, leaf := range leaves {
		best := ""
		for _, in := range inputs {
			for _, f := range in.Fields {
				if covers(f, leaf) && len(f) > len(best) {
					best = f
				}
			}
		}
		if best == "" {
			t.Errorf("%s: a field a tenant writes, with no row in inputs (runtime/tenant/inputs_test.go): say what bounds its cost per run and name the test of its hostile case", leaf)
			continue
		}
		covered[best]++
	}
	tests := testFuncs(t)
	docs, err := os.ReadFile(filepath.Join(root, "docs", "cluster.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		for _, f := range in.Fields {
			if covered[f] == 0 {
				t.Errorf("row %q: %s covers no field (gone, or covered by a longer row)", in.Doc, f)
			}
		}
		if len(in.Tests) == 0 {
			t.Errorf("row %q names no test of its hostile case", in.Doc)
		}
		for _, name := range in.Tests {
			if !tests[name] {
				t.Errorf("row %q: no test %s", in.Doc, name)
			}
		}
		if !strings.Contains(string(docs), "\n| "+in.Doc+" |") {
			t.Errorf("row %q has no row in docs/cluster.md's table of tenant inputs", in.Doc)
		}
	}
}

// covers reports whether row field f covers leaf: the same path, or a
// prefix of it ending where a name ends.
func covers(f, leaf string) bool {
	if !strings.HasPrefix(leaf, f) {
		return false
	}
	rest := leaf[len(f):]
	return rest == "" || strings.HasSuffix(f, ":") || strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, "[") || strings.HasPrefix(rest, "{")
}

// annotationNames are customprobe.Probe's fields as the annotation names
// them; "" inlines a field's own JSON fields.
var annotationNames = map[string]string{"Container": "container", "Type": "type", "Probe": "", "Plugin": "plugin", "Milliseconds": "", "Periods": "", "Expect": "expect",
	"KeepAlive": "httpGet.keepAlive"}

// walk appends the leaf paths of t under path: a struct's fields by their
// JSON names, "[]" for a slice's element, "{}" for a map, and a leaf for
// anything with its own JSON form (IntOrString, Quantity, Time, a status
// range).
func walk(t reflect.Type, path string, out *[]string, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	leaf := func() { *out = append(*out, strings.TrimSuffix(path, ".")) }
	if t.Kind() == reflect.Struct && (reflect.PointerTo(t).Implements(jsonUnmarshaler) || t.Implements(jsonUnmarshaler)) {
		leaf()
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if seen[t] { // a recursive type (JSONSchemaProps-like): a leaf
			leaf()
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, ok := jsonName(t, f)
			if !ok {
				continue
			}
			p := path
			if name != "" {
				p += name + "."
			}
			walk(f.Type, p, out, seen)
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			leaf()
			return
		}
		walk(t.Elem(), strings.TrimSuffix(path, ".")+"[].", out, seen)
	case reflect.Map:
		*out = append(*out, strings.TrimSuffix(path, ".")+"{}")
	default:
		leaf()
	}
}

var jsonUnmarshaler = reflect.TypeFor[interface{ UnmarshalJSON([]byte) error }]()

// jsonName is f's name in its JSON form ("" for an inlined struct), false
// for a field that has none.
func jsonName(t reflect.Type, f reflect.StructField) (string, bool) {
	if t == reflect.TypeFor[customprobe.Probe]() {
		if n, ok := annotationNames[f.Name]; ok {
			return n, true
		}
		// A field added to the annotation without a name here: a leaf by
		// its Go name, which no row covers, so the walk's test fails
		// instead of skipping it.
		return f.Name, true
	}
	tag := strings.Split(f.Tag.Get("json"), ",")[0]
	switch {
	case tag == "-":
		return "", false
	case tag == "" && f.Anonymous:
		return "", true
	case tag == "":
		return f.Name, true
	}
	return tag, true
}

// testFuncs are the module's tests as "dir.TestName".
func testFuncs(t *testing.T) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`^func (Test\w+)\(`)
	out := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bench" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		dir, _ := filepath.Rel(root, filepath.Dir(p))
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if m := decl.FindStringSubmatch(sc.Text()); m != nil {
				out[filepath.ToSlash(dir)+"."+m[1]] = true
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The walk itself: the annotation's fields by their names in the
// annotation, and a field of v1.Pod the agent reads.
func TestWalkNamesFieldsAsTheAnnotationDoes(t *testing.T) {
	var leaves []string
	walk(reflect.TypeFor[customprobe.Probe](), "annotation:", &leaves, map[reflect.Type]bool{})
	for _, want := range []string{"annotation:container", "annotation:periodMilliseconds", "annotation:unhealthyPeriodSeconds", "annotation:httpGet.httpHeaders[].value",
		"annotation:expect.jsonPath.path", "annotation:expect.status[]", "annotation:plugin.params{}", "annotation:exec.command[]", "annotation:httpGet.port"} {
		if !slices.Contains(leaves, want) {
			t.Errorf("no %s among %v", want, leaves)
		}
	}
	var pod []string
	walk(reflect.TypeFor[v1.Pod](), "pod:", &pod, map[reflect.Type]bool{})
	if !slices.Contains(pod, "pod:status.containerStatuses[].containerID") || !slices.Contains(pod, "pod:metadata.annotations{}") {
		t.Errorf("pod leaves lack the container ID or the annotations: %d leaves", len(pod))
	}
}
