package source

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/manifest"
)

// Conflicts holds the rule that a pod is defined once among the manifests
// read together: a second definition of a namespace/name, or of a
// metadata.uid, is rejected and the first one (in file order) kept, the
// error naming both files. Scan applies it to a directory; `probed check`
// to what it reads, so that it probes what the agent would. The zero
// value is not ready: use NewConflicts.
type Conflicts struct {
	byName map[string]*Pod
	byUID  map[types.UID]*Pod
}

// NewConflicts returns an empty Conflicts.
func NewConflicts() *Conflicts {
	return &Conflicts{byName: map[string]*Pod{}, byUID: map[types.UID]*Pod{}}
}

// Admit records p, or returns the error that rejects it (file, document,
// pod and, for a UID, the field), leaving the first definition recorded.
func (c *Conflicts) Admit(p *Pod) *manifest.Error {
	name := p.Pod.Namespace + "/" + p.Pod.Name
	if first, dup := c.byName[name]; dup {
		return &manifest.Error{File: p.Source, Doc: p.Doc, Pod: name,
			Detail: fmt.Sprintf("already defined in %s (document %d); this definition is ignored", first.Source, first.Doc)}
	}
	if other, dup := c.byUID[p.Pod.UID]; dup {
		return &manifest.Error{File: p.Source, Doc: p.Doc, Pod: name,
			Field: "metadata.uid", Detail: fmt.Sprintf("%q is already used by pod %s/%s in %s; this definition is ignored", p.Pod.UID, other.Pod.Namespace, other.Pod.Name, other.Source)}
	}
	c.byName[name], c.byUID[p.Pod.UID] = p, p
	return nil
}
