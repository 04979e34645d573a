// Package tenant is the one rule of what a pod can make the agent pay.
//
// In cluster mode every pod annotation and spec field is written by a
// tenant, and the agent serves every tenant of the node at once: if one
// pod can make it run out of memory or CPU, every readiness gate on the
// node freezes. So each cost a pod's annotation or spec can make the agent
// pay — the CPU of a check on a response, the memory of a command's output
// or of a helper session, a slot of a pool lane, a share of a node-wide
// budget, a restart worker's time — is
//
//  1. bounded per run: by the probe's own deadline and by a fixed size,
//     the constants below (each with its reason and, where an operator
//     may change it, its flag); an input that can never fit its bound is
//     refused when the pod is admitted, with the field named, and a run
//     that goes over its bound is a Failure whose message says so; and
//  2. charged to the pod's namespace: the namespace holds at most its
//     share of what the node has, and a namespace over its share waits,
//     or is refused, alone.
//
// The charge comes in two forms. A pool lane (Lane) gives each pod and each
// namespace a fixed share of its slots (--pod-pool-share,
// --namespace-pool-share) and parks a run over its share instead of
// queueing it in front of other tenants' runs. A node-wide budget (Shares:
// runs per second, restart workers, bytes) is divided among the namespaces
// that ask for it by max-min fairness (MaxMin): each namespace gets what it
// asks up to an equal split, and what the modest ones leave goes to the
// others.
//
// The lengths strings are cut to where they are kept or shown are
// runtime/bound's; the per-pod limits of the annotation (--max-probes-per-pod,
// --min-probe-period) and the node's run budget (--max-probe-rate) are
// agent/kube/limits'. docs/cluster.md ("Security model") lists every input
// a tenant controls and the bound that applies to it.
//
// The package imports nothing of the project, so that every package that
// makes the agent pay for something can charge it here.
package tenant

// Bounds of one run. Sizes are bytes unless named otherwise.
const (
	// OutputBytes is the most of a body or a command's output a run keeps
	// and checks: 10 KiB, the kubelet's limit for HTTP bodies and exec
	// output (spec H6, E2).
	OutputBytes = 10 << 10

	// ResponseHeaderBytes caps the response header bytes an HTTP run reads
	// (net/http Transport.MaxResponseHeaderBytes): 64 KiB. The kubelet
	// keeps Go's default of 10 MiB, so 30 probes of targets answering
	// 10 MiB headers took an agent to 605 MB; 64 KiB is room for large
	// cookies and security headers.
	ResponseHeaderBytes = 64 << 10

	// PatternBytes bounds an expression a pod gives (expect.bodyRegex,
	// expect.jsonPath.path).
	PatternBytes = 1024

	// ValueBytes bounds the value an expect.jsonPath must print as; the
	// printed results are read only up to one byte more (a longer text
	// cannot be equal).
	ValueBytes = 256

	// RegexInstructions bounds the compiled program of an expect.bodyRegex.
	// RE2 matches in time linear in the body, but the factor is the
	// program's size: `[a-z]{1000}b`, 12 bytes, compiles to 1,003
	// instructions, and one match of it on a 10 KiB body took 154 ms of a
	// core (measured on this project's 2-core machine; a pod with 32 such
	// probes at 1 s used both cores). A match costs at most about 25 ns per
	// instruction and byte of body, so 50 instructions on OutputBytes of
	// body cost at most about 10–15 ms (measured: 51 instructions, 10 ms),
	// and real patterns fit: `"status"\s*:\s*"(UP|ok|healthy)"` is 32, a
	// UUID 38, `(?i)database\s+(connected|ready)|cache\s+(warm|ready)` 49.
	// A pattern over the bound is refused at admission.
	RegexInstructions = 50

	// RegexSteps is what the bound on bodyRegex comes to: instructions ×
	// bytes of body, the work of one match at most.
	RegexSteps = RegexInstructions * OutputBytes

	// JSONDepth bounds how deep the JSON body of an expect.jsonPath check
	// may nest: decoding (and printing) a value recurses once per level,
	// and 10 KiB of "[" nests 5,000 deep, growing the stack of the pool's
	// goroutine that runs the check to megabytes, which it keeps until
	// the collector shrinks it (8 such probes took an agent from 51 to
	// 124 MiB). A body nested deeper is a Failure that says so; health
	// documents nest a few levels.
	JSONDepth = 100

	// ExecOutputBytes is the most a command of an exec probe (or of an
	// exec preStop hook) may print, stdout and stderr together, in one
	// run: 256 KiB. The kubelet keeps 10 KiB of it but lets the runtime
	// answer up to 16 MiB (its gRPC limit); 16 exec probes printing 15 MB
	// each took an agent from 55 to 277 MB. Through ExecSync the answer is
	// refused by gRPC before it is read (the runtime's answer for one call
	// is held once, so exec runs in flight × this is the memory exec can
	// take); through a resident helper the run is killed as soon as its
	// output passes it. Either way the run is a Failure that says so.
	ExecOutputBytes = 256 << 10

	// HelperEnvironmentBytes bounds the environment a resident exec helper
	// reports at its start (its exec's and a child's, each): 64 KiB, far
	// above a container's usual environment. A container whose helper
	// reports more runs its exec probes through ExecSync, as a container
	// that cannot host a helper does. The dumps are freed once the helper
	// is ready: a helper holds about 5 KiB of the agent's heap for its life.
	HelperEnvironmentBytes = 64 << 10

	// ExpandedEnvBytes bounds the env variables (names and values) the
	// agent keeps of a pod in cluster mode for the $(VAR) expansion of its
	// annotation exec probes' commands (spec E1): 64 KiB. The cache keeps
	// only the variables an annotation references; one past the bound is
	// not kept (its reference stays as written, as for a name not
	// declared), so a pod with 1 MB of env costs the agent at most this.
	ExpandedEnvBytes = 64 << 10
)
