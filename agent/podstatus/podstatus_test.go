package podstatus_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/podstatus"
)

func entry(uid, namespace, name string, phase v1.PodPhase) *podstatus.Entry {
	return &podstatus.Entry{
		Pod:    &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: namespace, Name: name}},
		Status: v1.PodStatus{Phase: phase},
	}
}

// TestRecreatedPodKeepsItsName: a pod recreated under its name with a new
// UID (a StatefulSet pod; an edited static pod) is found by name whatever
// the order of the new pod's add and the old one's removal.
func TestRecreatedPodKeepsItsName(t *testing.T) {
	var tb podstatus.Table
	tb.Put(entry("old", "db", "pg-0", v1.PodRunning))
	tb.Put(entry("new", "db", "pg-0", v1.PodPending))
	tb.Delete("old")
	p, ok := tb.PodByName("db", "pg-0")
	if !ok || p.UID != "new" {
		t.Fatalf("PodByName after the old pod's removal = %v, %v; want the new pod", p, ok)
	}
	tb.Delete("new")
	if p, ok := tb.PodByName("db", "pg-0"); ok {
		t.Fatalf("PodByName after both removals = %v", p.UID)
	}
	if tb.Len() != 0 {
		t.Fatalf("Len = %d, want 0", tb.Len())
	}
}

// TestRenamedUID: a UID put again under another name is found only by the
// new name.
func TestRenamedUID(t *testing.T) {
	var tb podstatus.Table
	tb.Put(entry("u", "a", "one", v1.PodRunning))
	tb.Put(entry("u", "a", "two", v1.PodRunning))
	if _, ok := tb.PodByName("a", "one"); ok {
		t.Error("the old name still finds the pod")
	}
	if p, ok := tb.PodByName("a", "two"); !ok || p.UID != "u" {
		t.Errorf("PodByName(a, two) = %v, %v", p, ok)
	}
}

// TestCopies: what the readers get is sorted by namespace and name, carries
// the entry's status, and is a copy the reader may change.
func TestCopies(t *testing.T) {
	var tb podstatus.Table
	tb.Put(entry("3", "b", "a", v1.PodRunning))
	tb.Put(entry("1", "a", "z", v1.PodFailed))
	tb.Put(entry("2", "a", "b", v1.PodPending))
	var got []string
	for _, p := range tb.Pods() {
		got = append(got, p.Namespace+"/"+p.Name+":"+string(p.Status.Phase))
	}
	want := []string{"a/b:Pending", "a/z:Failed", "b/a:Running"}
	if len(got) != len(want) {
		t.Fatalf("Pods = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Pods = %v, want %v", got, want)
		}
	}
	p, _ := tb.Pod("1")
	p.Status.Phase, p.Name = v1.PodSucceeded, "changed"
	st, _ := tb.Status("1")
	st.Phase = v1.PodUnknown
	if e, _ := tb.Get("1"); e.Status.Phase != v1.PodFailed || e.Pod.Name != "z" {
		t.Errorf("a reader's change reached the table: %+v", e)
	}
	if _, ok := tb.Status("missing"); ok {
		t.Error("Status of an unknown pod reports ok")
	}
}
