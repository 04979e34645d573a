package source

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/manifest"
)

// StaleOf returns the rejection that keeps pod uid at its last valid
// version, if the last scan delivered it stale.
func (s *Source) StaleOf(uid types.UID) (Rejection, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.stale[uid]
	return r, ok
}

// ConditionManifestStale is the pod condition GET /pods shows on a pod
// probed at its last valid version because its manifest no longer decodes
// or validates: status True, reason ManifestInvalid, the error as message,
// lastTransitionTime when the error was first seen. kubectl describe lists
// it with the pod's other conditions; `kubectl wait
// --for=condition=probed.io/ManifestStale` waits for it. A custom condition
// type is domain-prefixed, as readiness gates' are.
const ConditionManifestStale v1.PodConditionType = "probed.io/ManifestStale"

// MarkStale adds (or replaces) the ConditionManifestStale condition of pod
// for r. It changes pod in place: give it a copy.
func MarkStale(pod *v1.Pod, r Rejection) {
	c := v1.PodCondition{Type: ConditionManifestStale, Status: v1.ConditionTrue, Reason: "ManifestInvalid",
		Message:            "the manifest no longer loads; probing the last valid version: " + r.Error,
		LastTransitionTime: metav1.NewTime(r.Since)}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == ConditionManifestStale {
			pod.Status.Conditions[i] = c
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, c)
}

// keepStale returns the pods path delivered at the last scan that errs now
// reject and fresh does not define again, marked stale; staleBy records,
// for each error, the pod it keeps stale.
func (s *Source) keepStale(path string, fresh []*Pod, errs []*manifest.Error, staleBy map[*manifest.Error]*Pod) []*Pod {
	if len(errs) == 0 {
		return nil
	}
	defined := map[string]bool{}
	for _, p := range fresh {
		defined[p.Pod.Namespace+"/"+p.Pod.Name] = true
	}
	var out []*Pod
	for _, p := range s.delivered[path] {
		name := p.Pod.Namespace + "/" + p.Pod.Name
		if defined[name] {
			continue
		}
		for _, e := range errs {
			if e.Doc == 0 || e.Pod == name || (e.Pod == "" && e.Doc == p.Doc) {
				if _, taken := staleBy[e]; !taken || e.Doc == 0 {
					staleBy[e] = p
				}
				out = append(out, staleCopy(p, e))
				break
			}
		}
	}
	return out
}

// staleCopy returns p marked stale by e (Rejection filled in by finish).
func staleCopy(p *Pod, e *manifest.Error) *Pod {
	c := *p
	r := rejectionOf(e)
	r.Pod, r.Stale = p.Pod.Namespace+"/"+p.Pod.Name, true
	c.Stale = &r
	return &c
}
