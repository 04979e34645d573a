package panicthreshold

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// trimTransform keeps of an EndpointSlice what the count reads: its name,
// namespace and Service, and per endpoint its first address, its ready and
// terminating conditions and its target's kind and UID (the informer's
// transform: a slice of 1,000 endpoints costs about 100 KB, not its
// megabyte of hints, ports and topology).
func trimTransform(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, ResourceVersion: s.ResourceVersion,
			Labels: map[string]string{discoveryv1.LabelServiceName: s.Labels[discoveryv1.LabelServiceName]}},
		AddressType: s.AddressType,
		Endpoints:   make([]discoveryv1.Endpoint, len(s.Endpoints)),
	}
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		t := discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: e.Conditions.Ready, Terminating: e.Conditions.Terminating}}
		if len(e.Addresses) > 0 {
			t.Addresses = []string{e.Addresses[0]}
		}
		if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
			t.TargetRef = &v1.ObjectReference{Kind: "Pod", UID: e.TargetRef.UID}
		}
		out.Endpoints[i] = t
	}
	return out, nil
}

func podIndex(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	var out []string
	for i := range s.Endpoints {
		if ref := s.Endpoints[i].TargetRef; ref != nil && ref.UID != "" {
			out = append(out, string(ref.UID))
		}
	}
	return out, nil
}

func serviceIndex(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
		return []string{s.Namespace + "/" + name}, nil
	}
	return nil, nil
}

// servicesOf are the Services (namespace/name) whose slices in the pod's
// namespace list the pod (a Service selects pods of its own namespace; a
// slice another tenant wrote elsewhere naming the pod's UID does not
// count). Under g.mu or not: the indexer is safe for concurrent use.
func (g *Guard) servicesOf(namespace string, uid types.UID) []string {
	objs, _ := g.indexer.ByIndex(byPod, string(uid))
	var out []string
	for _, obj := range objs {
		if obj.(*discoveryv1.EndpointSlice).Namespace != namespace {
			continue
		}
		keys, _ := serviceIndex(obj)
		for _, k := range keys {
			if !contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sliceReady reports whether a slice of the pod's namespace lists it as a
// ready endpoint.
func (g *Guard) sliceReady(namespace string, uid types.UID) bool {
	objs, _ := g.indexer.ByIndex(byPod, string(uid))
	for _, obj := range objs {
		s := obj.(*discoveryv1.EndpointSlice)
		if s.Namespace != namespace {
			continue
		}
		for i := range s.Endpoints {
			e := &s.Endpoints[i]
			if e.TargetRef != nil && e.TargetRef.UID == uid && isReady(e) {
				return true
			}
		}
	}
	return false
}

// counted is one Service's endpoints, as seen for one of its pods.
type counted struct {
	// total: the endpoints not terminating, the pod among them; ready:
	// those ready, without the pod.
	total, ready int
	// rank: the endpoints not ready, other than the pod, whose key (the
	// pod UID) orders before the pod's.
	rank int
}

// count counts svc's endpoints for pod uid, under g.mu: each endpoint once
// (by its pod's UID, else its first address: a dual-stack Service lists a
// pod in two slices), ready if any slice says so; a pod of this node the
// guard decided counts as the guard decided it.
func (g *Guard) count(svc string, uid types.UID) counted {
	objs, _ := g.indexer.ByIndex(byService, svc)
	ready := map[string]bool{}
	for _, obj := range objs {
		s := obj.(*discoveryv1.EndpointSlice)
		for i := range s.Endpoints {
			e := &s.Endpoints[i]
			if e.Conditions.Terminating != nil && *e.Conditions.Terminating {
				continue
			}
			key := ""
			switch {
			case e.TargetRef != nil && e.TargetRef.UID != "":
				key = string(e.TargetRef.UID)
			case len(e.Addresses) > 0:
				key = "address:" + e.Addresses[0]
			default:
				continue
			}
			ready[key] = ready[key] || isReady(e)
		}
	}
	var c counted
	for key, r := range ready {
		if st := g.pods[types.UID(key)]; st != nil && st.decided {
			r = st.held
		}
		c.total++
		switch {
		case key == string(uid):
		case r:
			c.ready++
		case key < string(uid):
			c.rank++
		}
	}
	return c
}

// isReady: a ready condition that is not false (nil means unknown, which
// consumers treat as ready: discovery.k8s.io/v1 EndpointConditions).
func isReady(e *discoveryv1.Endpoint) bool {
	return e.Conditions.Ready == nil || *e.Conditions.Ready
}
