// Package guards is what cluster mode's guards hold back now, as GET
// /guards serves it, `probed status` prints it and the status page shows
// it: the pods the readiness panic threshold keeps ready
// (agent/kube/panicthreshold) and the liveness failures the restart budget
// holds back (agent/actuate.Budget). Fields are never renamed or removed
// within an apiVersion; new ones may be added.
package guards

// The guards, as Held.Guard names them.
const (
	PanicThreshold = "panic-threshold"
	RestartBudget  = "restart-budget"
)

// Held is one pod (or container) a guard holds back.
type Held struct {
	// Guard is PanicThreshold or RestartBudget.
	Guard     string `json:"guard"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// Container is the failed container, for RestartBudget.
	Container string `json:"container,omitempty"`
	// Why gives the counts ("Service ns/web has 4 of 10 endpoints ready
	// without it, probed.io/panic-threshold=50% keeps 5").
	Why string `json:"why"`
}

// Report is GET /guards: every pod held now, the panic threshold's first,
// each guard's by namespace, pod and container; [] when none.
type Report struct {
	Held []Held `json:"held"`
}
