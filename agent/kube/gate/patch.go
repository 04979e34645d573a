package gate

import (
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// HasGate reports whether the pod lists conditionType in
// spec.readinessGates (KEP-580): only then does probed write it.
func HasGate(pod *v1.Pod, conditionType v1.PodConditionType) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == conditionType {
			return true
		}
	}
	return false
}

// findCondition returns the pod's condition of the type, if any.
func findCondition(pod *v1.Pod, conditionType v1.PodConditionType) (v1.PodCondition, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == conditionType {
			return c, true
		}
	}
	return v1.PodCondition{}, false
}

// sameCondition reports whether the written condition c already says what
// the wanted one v says: then nothing is written (status, reason and
// message compared, as the AWS load balancer controller does).
func sameCondition(c v1.PodCondition, v Condition) bool {
	return c.Status == v.Status && c.Reason == v.Reason && c.Message == v.Message
}

// newCondition is the condition written for the wanted one: lastTransitionTime
// moves (to now) only when the status flips or the condition is new.
func newCondition(conditionType v1.PodConditionType, v Condition, current v1.PodCondition, haveCurrent bool, now metav1.Time) v1.PodCondition {
	c := v1.PodCondition{Type: conditionType, Status: v.Status, Reason: v.Reason, Message: v.Message, LastTransitionTime: now}
	if haveCurrent && current.Status == v.Status && !current.LastTransitionTime.IsZero() {
		c.LastTransitionTime = current.LastTransitionTime
	}
	return c
}

// The shape of the status patch. The fields are spelled out rather than
// marshalled from v1.PodCondition: a zero lastProbeTime would be sent as
// null, which a strategic merge patch reads as "delete"; reason and message
// are always sent, since an omitted field would keep its old value.
type statusPatch struct {
	Metadata patchMetadata `json:"metadata"`
	Status   patchStatus   `json:"status"`
}

type patchMetadata struct {
	UID types.UID `json:"uid"`
}

type patchStatus struct {
	Conditions []patchCondition `json:"conditions"`
}

type patchCondition struct {
	Type               v1.PodConditionType `json:"type"`
	Status             v1.ConditionStatus  `json:"status"`
	Reason             string              `json:"reason"`
	Message            string              `json:"message"`
	LastTransitionTime metav1.Time         `json:"lastTransitionTime"`
}

// statusPatchFor builds the strategic-merge patch of the status subresource
// that sets one condition and nothing else:
//
//	{"metadata":{"uid":UID},"status":{"conditions":[{"type":T,"status":S,"reason":R,"message":M,"lastTransitionTime":LTT}]}}
//
// Pod conditions are a list with the patch merge key "type"
// (patchStrategy=merge on PodStatus.Conditions), so the element replaces
// the fields of the condition of that type and leaves every other condition
// as it is. The UID is a precondition: the API server refuses to change a
// pod's UID (kube-apiserver v1.37 answers 422 Invalid, "metadata.uid: field
// is immutable"; 409 Conflict when no pod of that name exists), so a write
// meant for a pod that was deleted and recreated under the same name fails
// instead of landing on the new pod.
func statusPatchFor(uid types.UID, c v1.PodCondition) ([]byte, error) {
	return json.Marshal(statusPatch{
		Metadata: patchMetadata{UID: uid},
		Status: patchStatus{Conditions: []patchCondition{{
			Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message,
			LastTransitionTime: c.LastTransitionTime,
		}}},
	})
}
