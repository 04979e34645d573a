package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/probed/probed/agent/kube/offload"
	"github.com/probed/probed/runtime/bound"
)

// MaxReviewBytes bounds the body of an AdmissionReview: a pod is at most
// about 1.5 MiB in etcd, and the review carries one.
const MaxReviewBytes = 6 << 20

// warningBytes bounds a text quoted in a warning (kubectl prints each on a
// line of its own).
const warningBytes = 120

// MirrorAnnotation marks the mirror pod of a static pod (the kubelet
// creates it; its probes are the static pod's, which the kubelet runs
// whatever the mirror says).
const MirrorAnnotation = "kubernetes.io/config.mirror"

// Admission answers the API server's AdmissionReviews of pods: for the
// creation of a pod of a selected namespace, the JSON patch of
// offload.Move; for the update of a moved pod, that of offload.KeepMoved.
// Every answer allows the pod: what cannot be decided leaves the pod as it
// came, with its probes for the kubelet.
type Admission struct {
	// Config is what the node agents do (offload.Config).
	Config offload.Config
	// Selected says whether the pods of a namespace are to be moved;
	// known is false while the namespaces have not been read.
	Selected func(namespace string) (selected, known bool)
	// Excluded are namespaces whose pods are never moved, whatever
	// Selected says: kube-system and probed's own.
	Excluded []string
	// Logger; nil: slog.Default().
	Logger *slog.Logger

	metrics *metrics
}

// Outcomes of a review (the result label of
// probed_offload_admissions_total).
const (
	// OutcomeMoved: some probes moved (others may have been left).
	OutcomeMoved = "moved"
	// OutcomeLeft: the pod has probes and all stayed with the kubelet.
	OutcomeLeft = "left"
	// OutcomeUntouched: nothing to do (no probes, not a pod creation, a
	// namespace not selected or excluded, a mirror pod).
	OutcomeUntouched = "untouched"
	// OutcomeUndecided: the webhook could not decide (the namespaces not
	// read yet, a pod it cannot decode): the pod is left as it came.
	OutcomeUndecided = "undecided"
)

// ServeHTTP implements the webhook's endpoint: POST an
// admission.k8s.io/v1 AdmissionReview, get it back with its response. A
// request that is not a review is answered 400.
func (a *Admission) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxReviewBytes))
	if err != nil {
		http.Error(w, "reading the review: "+err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "not an admission.k8s.io/v1 AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	review.Response = a.Review(review.Request)
	review.Request = nil
	review.APIVersion, review.Kind = admissionv1.SchemeGroupVersion.String(), "AdmissionReview"
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// Review answers one request: always allowed, with the JSON patch of the
// move when probes moved, and a warning when probes of the pod stay with
// the kubelet or the webhook could not decide.
func (a *Admission) Review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	start := time.Now()
	resp, outcome := a.review(req)
	resp.UID, resp.Allowed = req.UID, true
	a.metrics.observe(outcome, time.Since(start))
	return resp
}

var podKind = metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "Pod"}

func (a *Admission) review(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, string) {
	untouched := &admissionv1.AdmissionResponse{}
	if req.Kind != podKind || req.SubResource != "" || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return untouched, OutcomeUntouched
	}
	if slices.Contains(a.Excluded, req.Namespace) {
		return untouched, OutcomeUntouched
	}
	if req.Operation == admissionv1.Update {
		return a.update(req)
	}
	if a.Selected == nil {
		return untouched, OutcomeUntouched
	}
	selected, known := a.Selected(req.Namespace)
	if !known {
		return warn("probed offload: the namespaces are not read yet; this pod's probes stay with the kubelet"), OutcomeUndecided
	}
	if !selected {
		return untouched, OutcomeUntouched
	}
	pod, resp := decode(req)
	if resp != nil {
		return resp, OutcomeUndecided
	}
	if _, mirror := pod.Annotations[MirrorAnnotation]; mirror {
		return untouched, OutcomeUntouched
	}
	moved, res := offload.Move(pod, a.Config)
	resp, err := a.patch(req, pod, moved)
	if err != nil {
		return resp, OutcomeUndecided
	}
	left := 0
	for _, l := range res.Note.Left {
		left += len(l.Probes)
	}
	if left > 0 {
		resp.Warnings = []string{fmt.Sprintf("probed offload: %d probes stay with the kubelet (the pod's annotation %s says why)", left, offload.NoteAnnotation)}
	}
	a.log().Debug("offload", "namespace", req.Namespace, "pod", name(pod), "moved", res.Moved, "left", left, "dryRun", req.DryRun != nil && *req.DryRun)
	switch {
	case len(res.Moved) > 0:
		return resp, OutcomeMoved
	case left > 0:
		return resp, OutcomeLeft
	}
	return resp, OutcomeUntouched
}

// update answers the update of a pod: for one Move moved, the patch that
// takes out of the spec again the moved probes the update puts back
// (offload.KeepMoved: `kubectl apply` of the pod's manifest).
func (a *Admission) update(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, string) {
	pod, resp := decode(req)
	if resp != nil {
		return resp, OutcomeUndecided
	}
	if !offload.Offloaded(pod) {
		return &admissionv1.AdmissionResponse{}, OutcomeUntouched
	}
	resp, err := a.patch(req, pod, offload.KeepMoved(pod))
	if err != nil || resp.Patch == nil {
		return resp, OutcomeUntouched
	}
	return resp, OutcomeMoved
}

// decode reads the request's pod strictly; a pod that does not decode, or
// has a field this probed's v1.Pod lacks (a newer API server: a patch
// computed without it might drop it), is answered with a warning.
func decode(req *admissionv1.AdmissionRequest) (*v1.Pod, *admissionv1.AdmissionResponse) {
	var pod v1.Pod
	strict, err := sigsjson.UnmarshalStrict(req.Object.Raw, &pod, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, warn("probed offload: the pod does not decode; its probes stay with the kubelet")
	}
	if len(strict) > 0 {
		return nil, warn("probed offload: the pod has fields this probed does not know (" + bound.Cut(strict[0].Error(), warningBytes) + "); its probes stay with the kubelet")
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	return &pod, nil
}

// patch is the response that turns pod into changed: a JSON patch, none
// when they are equal; on an error (not expected: both marshal) a warning.
func (a *Admission) patch(req *admissionv1.AdmissionRequest, pod, changed *v1.Pod) (*admissionv1.AdmissionResponse, error) {
	ops, err := diff(pod, changed)
	var b []byte
	if err == nil && len(ops) > 0 {
		b, err = json.Marshal(ops)
	}
	if err != nil {
		a.log().Error("offload: computing the patch", "namespace", req.Namespace, "pod", name(pod), "err", err)
		return warn("probed offload: internal error; this pod's probes stay with the kubelet"), err
	}
	resp := &admissionv1.AdmissionResponse{}
	if b != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = b, &pt
	}
	return resp, nil
}

// diff is the JSON patch from pod to moved, both through the same types
// (so only what Move changed differs), none when they are equal.
func diff(pod, moved *v1.Pod) ([]jsonpatch.Operation, error) {
	before, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	after, err := json.Marshal(moved)
	if err != nil {
		return nil, err
	}
	return jsonpatch.CreatePatch(before, after)
}

func warn(msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Warnings: []string{msg}}
}

func (a *Admission) log() *slog.Logger {
	if a.Logger == nil {
		return slog.Default()
	}
	return a.Logger
}

// name is the pod's name, or its generateName with a "*".
func name(pod *v1.Pod) string {
	if pod.Name == "" && pod.GenerateName != "" {
		return pod.GenerateName + "*"
	}
	return pod.Name
}
