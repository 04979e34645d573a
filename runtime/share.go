package runtime

import "github.com/probed/probed/runtime/tenant"

// Shares: what one pod and one namespace may hold of a lane
// (Options.PodShare, Options.NamespaceShare). The accounting is the one
// rule of what a tenant may cost the agent (runtime/tenant: Lane); the
// runtime names each run's owner and runs a parked run in the slot its
// namespace frees.

// Owner names whom a probe run belongs to, for the lanes' shares: a pod and
// its namespace, each as a hash of its identity (tenant.Owner).
type Owner = tenant.Owner

// Owned is a Task that names its owner. With shares (Options.PodShare,
// Options.NamespaceShare), Submit bounds the slots of a lane held by one
// owner's tasks; a Task that is not Owned is never bounded.
type Owned interface {
	Task
	Owner() Owner
}
