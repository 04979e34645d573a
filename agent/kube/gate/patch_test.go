package gate

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The patch holds the pod's UID and the one owned condition, every field of
// it spelled out (an omitted reason or message would keep the old value
// under a strategic merge), and no lastProbeTime (a zero one would be sent
// as null: delete).
func TestStatusPatchHoldsOnlyTheOwnedCondition(t *testing.T) {
	ltt := metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	data, err := statusPatchFor("uid-1", v1.PodCondition{
		Type: DefaultConditionType, Status: v1.ConditionFalse, Reason: ReasonProbeFailed, Message: "",
		LastTransitionTime: ltt,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"uid":"uid-1"},"status":{"conditions":[{"type":"probed.io/ready","status":"False","reason":"ProbeFailed","message":"","lastTransitionTime":"2026-12-01T12:00:00Z"}]}}`
	if string(data) != want {
		t.Errorf("patch\n got %s\nwant %s", data, want)
	}
}

// lastTransitionTime moves only when the status flips.
func TestNewConditionKeepsTransitionTimeUnlessFlipped(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC))
	now := metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	current := v1.PodCondition{Type: DefaultConditionType, Status: v1.ConditionFalse, Reason: ReasonProbeFailed, Message: "a", LastTransitionTime: then}
	sameStatus := Condition{Known: true, Status: v1.ConditionFalse, Reason: ReasonContainerNotStarted, Message: "b"}
	if c := newCondition(DefaultConditionType, sameStatus, current, true, now); !c.LastTransitionTime.Equal(&then) || c.Message != "b" {
		t.Errorf("same status: %+v, want lastTransitionTime %v kept and the new message", c, then)
	}
	flipped := Condition{Known: true, Status: v1.ConditionTrue, Reason: ReasonProbeSucceeded, Message: MessageProbesSucceeded}
	if c := newCondition(DefaultConditionType, flipped, current, true, now); !c.LastTransitionTime.Equal(&now) {
		t.Errorf("flip: lastTransitionTime %v, want %v", c.LastTransitionTime, now)
	}
	if c := newCondition(DefaultConditionType, sameStatus, v1.PodCondition{}, false, now); !c.LastTransitionTime.Equal(&now) {
		t.Errorf("new condition: lastTransitionTime %v, want %v", c.LastTransitionTime, now)
	}
}
