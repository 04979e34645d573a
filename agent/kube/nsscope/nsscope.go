// Package nsscope decides in which namespaces a liveness action may act
// (--liveness-action=evict or restart): those a label selector on Namespace
// objects selects (--liveness-action-namespaces, by default
// probed.io/liveness-actions=enabled). Whoever may annotate a pod could
// otherwise have it evicted or its containers stopped; the operator opts
// namespaces in. The shipped admission policy
// checks the same label for evictions.
//
// The namespaces are read through one informer that lists and watches only
// the selected namespaces (the selector is sent with every request; RBAC:
// namespaces get, list, watch), keeping only their names and labels.
package nsscope

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// LivenessActionsLabel is the namespace label of the default selector.
const LivenessActionsLabel = "probed.io/liveness-actions"

// DefaultSelector selects the namespaces labelled
// probed.io/liveness-actions=enabled.
const DefaultSelector = LivenessActionsLabel + "=enabled"

// Flag names the setting in messages.
const Flag = "--liveness-action-namespaces"

// Scope is the set of selected namespaces. Create it with New, then Run it;
// its methods are safe for concurrent use.
type Scope struct {
	selector   labels.Selector
	flag       string
	factory    informers.SharedInformerFactory
	namespaces corelisters.NamespaceLister
	synced     cache.InformerSynced
}

// New returns the scope of selector (labels.Parse syntax; "":
// DefaultSelector). It starts nothing. An empty selector (one that would
// select every namespace without saying so) is an error: every namespace
// carries kubernetes.io/metadata.name, so that key alone selects them all.
func New(client kubernetes.Interface, selector string) (*Scope, error) {
	if selector == "" {
		selector = DefaultSelector
	}
	return NewNamed(client, selector, Flag)
}

// NewNamed is New for another selection of namespaces (the offload
// webhook's --offload-namespaces): flag names the setting in the errors;
// an empty selector is an error.
func NewNamed(client kubernetes.Interface, selector, flag string) (*Scope, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", flag, selector, err)
	}
	if sel.Empty() {
		return nil, fmt.Errorf("%s %q: selects every namespace without saying so; to select them all, select kubernetes.io/metadata.name", flag, selector)
	}
	s := &Scope{selector: sel, flag: flag}
	s.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = sel.String()
	}))
	inf := s.factory.Core().V1().Namespaces()
	if err := inf.Informer().SetTransform(func(obj any) (any, error) {
		if ns, ok := obj.(*v1.Namespace); ok {
			return &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, Labels: ns.Labels, ResourceVersion: ns.ResourceVersion}}, nil
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	s.namespaces, s.synced = inf.Lister(), inf.Informer().HasSynced
	return s, nil
}

// String is the selector.
func (s *Scope) String() string { return s.selector.String() }

// Run watches the selected namespaces until ctx ends. It returns nil.
func (s *Scope) Run(ctx context.Context) error {
	s.factory.Start(ctx.Done())
	<-ctx.Done()
	s.factory.Shutdown()
	return nil
}

// Known says why a liveness action may not act in namespace ("" when it
// may); known is false while the namespaces have not been listed yet.
func (s *Scope) Known(namespace string) (why string, known bool) {
	if !s.synced() {
		return "", false
	}
	if ns, err := s.namespaces.Get(namespace); err == nil && s.selector.Matches(labels.Set(ns.Labels)) {
		return "", true
	}
	return fmt.Sprintf("namespace %s is not selected by %s=%s (label the namespace to allow liveness actions)", namespace, s.flag, s.selector), true
}

// Selects reports whether the selector selects namespace; known is false
// while the namespaces have not been listed yet.
func (s *Scope) Selects(namespace string) (selected, known bool) {
	if !s.synced() {
		return false, false
	}
	ns, err := s.namespaces.Get(namespace)
	return err == nil && s.selector.Matches(labels.Set(ns.Labels)), true
}

// HasSynced reports whether the namespaces have been listed.
func (s *Scope) HasSynced() bool { return s.synced() }

// Allows waits (within ctx) until the namespaces are listed and returns
// Known's verdict; the error says why they could not be read.
func (s *Scope) Allows(ctx context.Context, namespace string) (why string, err error) {
	if !cache.WaitForCacheSync(ctx.Done(), s.synced) {
		return "", fmt.Errorf("the namespaces selected by %s=%s could not be listed "+
			"(may the agent list and watch namespaces? deploy/kubernetes/options/clusterrole-eviction.yaml, options/clusterrole-restart.yaml)", s.flag, s.selector)
	}
	why, _ = s.Known(namespace)
	return why, nil
}
