package events

import (
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/probed/probed/runtime"
)

// Tee returns a runtime.Recorder that passes every event to each of
// recorders, in order: the agent records to its local ring and log (Recorder)
// and, in cluster mode, to the API server (package kube/kevents) through one
// recorder. Nil recorders are skipped. Each recorder must not block, as
// runtime.Recorder requires.
func Tee(recorders ...runtime.Recorder) runtime.Recorder {
	var t tee
	for _, r := range recorders {
		if r != nil {
			t = append(t, r)
		}
	}
	if len(t) == 1 {
		return t[0]
	}
	return t
}

type tee []runtime.Recorder

func (t tee) Eventf(object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	for _, r := range t {
		r.Eventf(object, eventtype, reason, messageFmt, args...)
	}
}

// ProbeEventf passes the probe's origin to the recorders that keep it
// (runtime.ProbeRecorder) and the event alone to the others.
func (t tee) ProbeEventf(origin runtime.Origin, object k8sruntime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	for _, r := range t {
		if pr, ok := r.(runtime.ProbeRecorder); ok {
			pr.ProbeEventf(origin, object, eventtype, reason, messageFmt, args...)
			continue
		}
		r.Eventf(object, eventtype, reason, messageFmt, args...)
	}
}
