package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/probed/probed/agent/kube/offload"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime/egress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// admission is an Admission for the agents' defaults with the container
// runtime and liveness restarts, namespaces "shop" and "kube-system" and
// "probed" selected, "plain" not, "unknown" not read yet.
func admission(t *testing.T) (*Admission, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return &Admission{
		Config: offload.Config{Policy: podprobes.Cluster(customprobe.Options{Limits: customprobe.Limits{MaxProbes: 32}}, ""),
			ReadinessGate: "probed.io/ready", Restarts: func(string) string { return "" }},
		Selected: func(ns string) (bool, bool) {
			switch ns {
			case "unknown":
				return false, false
			case "plain":
				return false, true
			}
			return true, true
		},
		Excluded: []string{KubeSystem, "probed"},
		metrics:  m,
	}, reg
}

func testPod() *v1.Pod {
	p := &v1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}}
	p.GenerateName, p.Namespace = "web-", "shop"
	p.Labels = map[string]string{"app": "web"}
	p.Spec.Containers = []v1.Container{{Name: "app", Image: "registry.invalid/app:1",
		ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080), Scheme: v1.URISchemeHTTP}},
			TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3},
		LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
			TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}}}
	return p
}

func request(t *testing.T, raw []byte, ns string, dryRun bool) *admissionv1.AdmissionRequest {
	return &admissionv1.AdmissionRequest{UID: "req-1", Kind: podKind, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: ns, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}, DryRun: ptr.To(dryRun)}
}

func raw(t *testing.T, p *v1.Pod) []byte {
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// applied applies the response's patch to the raw pod, as the API server
// does, and decodes the result.
func applied(t *testing.T, rawPod []byte, resp *admissionv1.AdmissionResponse) *v1.Pod {
	t.Helper()
	out := rawPod
	if resp.Patch != nil {
		if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("patch type %v", resp.PatchType)
		}
		patch, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatalf("patch %s: %v", resp.Patch, err)
		}
		if out, err = patch.Apply(rawPod); err != nil {
			t.Fatalf("apply %s: %v", resp.Patch, err)
		}
	}
	var p v1.Pod
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// The patch, applied to the pod as the API server has it, gives exactly
// offload.Move's pod; the answer allows the pod and carries the request's
// UID. A dry run gets the same answer (sideEffects: None); a second review
// of the patched pod (reinvocation) adds nothing.
func TestReviewPatchIsTheMove(t *testing.T) {
	a, reg := admission(t)
	pod := testPod()
	rawPod := raw(t, pod)
	resp := a.Review(request(t, rawPod, "shop", false))
	if !resp.Allowed || resp.UID != "req-1" || resp.Result != nil {
		t.Fatalf("response %+v", resp)
	}
	got := applied(t, rawPod, resp)
	want, _ := offload.Move(pod, a.Config)
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Fatalf("patched pod differs from the move:\n%+v\n%+v", got, want)
	}
	if got.Spec.Containers[0].ReadinessProbe != nil || got.Spec.Containers[0].LivenessProbe != nil || len(got.Spec.ReadinessGates) != 1 {
		t.Fatalf("patched pod %+v", got.Spec)
	}
	if dry := applied(t, rawPod, a.Review(request(t, rawPod, "shop", true))); !apiequality.Semantic.DeepEqual(dry, got) {
		t.Fatalf("a dry run answered another pod:\n%+v\n%+v", dry, got)
	}
	again := a.Review(request(t, raw(t, got), "shop", false))
	if again.Patch != nil || len(again.Warnings) != 0 {
		t.Fatalf("reinvocation patched %s, warned %q", again.Patch, again.Warnings)
	}
	if n := testutil.ToFloat64(a.metrics.reviews.WithLabelValues(OutcomeMoved)); n != 3 {
		t.Errorf("moved reviews %v, want 3", n)
	}
	if n := testutil.CollectAndCount(reg, "probed_offload_admission_duration_seconds"); n != 1 {
		t.Errorf("duration histogram: %d series", n)
	}
}

// Pods left as they came: kube-system and probed's own namespace even
// when selected, a namespace not selected, one not read yet (with a
// warning), a mirror pod, a deletion, another kind, a pod with a field this
// probed does not know (a newer API server: with a warning), and one that
// does not decode.
func TestReviewLeavesAlone(t *testing.T) {
	a, _ := admission(t)
	rawPod := raw(t, testPod())
	mirror := testPod()
	mirror.Annotations = map[string]string{MirrorAnnotation: "x"}
	deletion := request(t, rawPod, "shop", false)
	deletion.Operation = admissionv1.Delete
	other := request(t, rawPod, "shop", false)
	other.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	unknownField := bytes.Replace(rawPod, []byte(`"spec":{`), []byte(`"spec":{"futureField":true,`), 1)
	for name, tc := range map[string]struct {
		req  *admissionv1.AdmissionRequest
		warn string
	}{
		"kube-system":             {request(t, rawPod, "kube-system", false), ""},
		"probed's own":            {request(t, rawPod, "probed", false), ""},
		"not selected":            {request(t, rawPod, "plain", false), ""},
		"namespaces not read yet": {request(t, rawPod, "unknown", false), "not read yet"},
		"mirror pod":              {request(t, raw(t, mirror), "shop", false), ""},
		"delete":                  {deletion, ""},
		"a Deployment":            {other, ""},
		"unknown field":           {request(t, unknownField, "shop", false), "futureField"},
		"not a pod":               {request(t, []byte(`[1,2]`), "shop", false), "does not decode"},
	} {
		resp := a.Review(tc.req)
		if !resp.Allowed || resp.Patch != nil {
			t.Errorf("%s: allowed %v, patch %s", name, resp.Allowed, resp.Patch)
		}
		if w := strings.Join(resp.Warnings, " "); (tc.warn == "") != (w == "") || !strings.Contains(w, tc.warn) {
			t.Errorf("%s: warnings %q, want one saying %q", name, resp.Warnings, tc.warn)
		}
	}
}

// A pod whose probes all stay with the kubelet gets the note only and a
// warning that says where to read why.
func TestReviewWarnsOfWhatStays(t *testing.T) {
	a, _ := admission(t)
	a.Config.Restarts = func(string) string { return "no restarts here" }
	pod := testPod()
	pod.Spec.Containers[0].ReadinessProbe.HTTPGet.Host = "10.1.1.1"
	a.Config.Policy = podprobes.Cluster(customprobe.Options{Egress: egress.NewRule(nil)}, "")
	rawPod := raw(t, pod)
	resp := a.Review(request(t, rawPod, "shop", false))
	got := applied(t, rawPod, resp)
	if got.Spec.Containers[0].LivenessProbe == nil || got.Spec.Containers[0].ReadinessProbe == nil || len(got.Spec.ReadinessGates) != 0 {
		t.Fatalf("a probe moved: %+v", got.Spec)
	}
	if n, _ := offload.ReadNote(got); len(n.Left) != 2 {
		t.Fatalf("note %+v", n)
	}
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "2 probes stay with the kubelet") || !strings.Contains(resp.Warnings[0], offload.NoteAnnotation) {
		t.Fatalf("warnings %q", resp.Warnings)
	}
	if n := testutil.ToFloat64(a.metrics.reviews.WithLabelValues(OutcomeLeft)); n != 1 {
		t.Errorf("left reviews %v", n)
	}
}

// The HTTP endpoint: a review in, the review with its response out; not a
// review, 400; a body over MaxReviewBytes, 400; GET, 405.
func TestServeHTTP(t *testing.T) {
	a, _ := admission(t)
	srv := httptest.NewServer(a)
	defer srv.Close()
	rawPod := raw(t, testPod())
	body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: request(t, rawPod, "shop", false)})
	resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var review admissionv1.AdmissionReview
	err = json.NewDecoder(resp.Body).Decode(&review)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || review.Response == nil || review.Response.UID != "req-1" || review.Request != nil ||
		review.Kind != "AdmissionReview" || review.APIVersion != "admission.k8s.io/v1" || review.Response.Patch == nil {
		t.Fatalf("status %d, review %+v, err %v", resp.StatusCode, review, err)
	}
	for _, tc := range []struct {
		method, body string
		status       int
	}{
		{http.MethodPost, `{"kind":"AdmissionReview"}`, 400},
		{http.MethodPost, strings.Repeat(" ", MaxReviewBytes+1), 400},
		{http.MethodGet, "", 405},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %d bytes: %d, want %d", tc.method, len(tc.body), resp.StatusCode, tc.status)
		}
	}
}

// `kubectl apply` of a moved pod's manifest puts the moved probes back in
// an update; the webhook takes them out again, so the update changes no
// spec field and the API server accepts it. A probe the update changed
// stays in it (the API server refuses it, as without the webhook), and an
// update of a pod that was never moved is left alone.
func TestReviewUpdateKeepsTheMove(t *testing.T) {
	a, _ := admission(t)
	pod := testPod()
	rawPod := raw(t, pod)
	live := applied(t, rawPod, a.Review(request(t, rawPod, "shop", false)))
	reapplied := live.DeepCopy()
	reapplied.Spec.Containers[0].ReadinessProbe = pod.Spec.Containers[0].ReadinessProbe.DeepCopy()
	reapplied.Spec.Containers[0].LivenessProbe = pod.Spec.Containers[0].LivenessProbe.DeepCopy()
	reapplied.Labels["touched"] = "yes"
	upd := request(t, raw(t, reapplied), "shop", false)
	upd.Operation = admissionv1.Update
	got := applied(t, raw(t, reapplied), a.Review(upd))
	want := live.DeepCopy()
	want.Labels["touched"] = "yes"
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Fatalf("the update keeps a moved probe:\n%+v", got.Spec.Containers[0])
	}

	changed := reapplied.DeepCopy()
	changed.Spec.Containers[0].ReadinessProbe.PeriodSeconds = 3
	upd = request(t, raw(t, changed), "shop", false)
	upd.Operation = admissionv1.Update
	got = applied(t, raw(t, changed), a.Review(upd))
	if got.Spec.Containers[0].ReadinessProbe == nil || got.Spec.Containers[0].LivenessProbe != nil {
		t.Fatalf("changed probe: %+v", got.Spec.Containers[0])
	}

	plain := request(t, rawPod, "shop", false)
	plain.Operation = admissionv1.Update
	if resp := a.Review(plain); resp.Patch != nil {
		t.Fatalf("an update of a pod never moved was patched: %s", resp.Patch)
	}
}
