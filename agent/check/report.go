package check

import (
	"io"
	"os"
	"strings"

	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/agent/output"
	"github.com/probed/probed/agent/source"
)

// ReportKind is the kind of the Report document.
const ReportKind = "CheckReport"

// Stdin is the -f value that reads the manifest from standard input, and
// the file name errors give it.
const Stdin = "-"

// Skipped is a document of a file that yields no pod.
type Skipped struct {
	File string // the file ("-": stdin)
	manifest.Skipped
}

// Report is the document `probed check -o json|yaml` prints: a Result
// with JSON names. Fields are never renamed or removed within an
// apiVersion; new ones may be added.
type Report struct {
	Kind       string `json:"kind"`       // ReportKind
	APIVersion string `json:"apiVersion"` // output.APIVersion
	// Files are the manifest files read, in order ("-" for stdin).
	Files []string `json:"files"`
	// ExitCode is the command's exit status: ExitOK, ExitFailed or
	// ExitBadInput.
	ExitCode int `json:"exitCode"`
	// Probes are the probes run, in file, pod and container order; [] when
	// none ran.
	Probes []ProbeResult `json:"probes"`
	// Skipped are the documents that hold no pod; [] when none.
	Skipped []SkippedDocument `json:"skipped"`
	// Warnings and Errors are the messages written to stderr, one per
	// entry, each naming file, document, pod, container and field; [] when
	// none. Errors make the exit status ExitBadInput and no probe runs.
	Warnings []string `json:"warnings"`
	Errors   []string `json:"errors"`
}

// ProbeResult is one probe's run.
type ProbeResult struct {
	File      string `json:"file"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"` // the pod's name (a workload's pod is named after it)
	Container string `json:"container"`
	Probe     string `json:"probe"` // liveness, readiness or startup
	// Origin is where the probe is declared: "spec" (the container's own),
	// "annotation" (the pod's probed.io/probes annotation) or "offloaded"
	// (the offload webhook's probed.io/offloaded record).
	Origin  string `json:"origin"`
	Handler string `json:"handler"` // http, tcp, exec, grpc or a plugin kind
	// Result is success, warning, failure, error (the probe could not
	// run) or not-run (exec without --allow-host-exec; a plugin kind:
	// check starts no plugin).
	Result     string  `json:"result"`
	DurationMS float64 `json:"durationMs"`
	// Message is the handler's output for a result other than success
	// (whole, unlike the table's MESSAGE column), "HTTP <code>" for an HTTP
	// success.
	Message string `json:"message,omitempty"`
	PodIP   string `json:"podIP"` // the address probed
}

// SkippedDocument is a document that yields no pod, with why.
type SkippedDocument struct {
	File string `json:"file"`
	// Document is 1-based; 0 for a file that holds no object at all.
	Document int    `json:"document"`
	Kind     string `json:"kind,omitempty"`
	Name     string `json:"name,omitempty"` // namespace/name, when the object has one
	Reason   string `json:"reason"`
}

// NewReport is res as a Report document.
func NewReport(res *Result) *Report {
	r := &Report{Kind: ReportKind, APIVersion: output.APIVersion, Files: res.Files, ExitCode: res.Code, Probes: []ProbeResult{},
		Skipped: []SkippedDocument{}, Warnings: res.Warnings, Errors: res.Errors}
	if r.Files == nil {
		r.Files = []string{}
	}
	if r.Warnings == nil {
		r.Warnings = []string{}
	}
	if r.Errors == nil {
		r.Errors = []string{}
	}
	for _, row := range res.Rows {
		ns, name, _ := strings.Cut(row.Pod, "/")
		r.Probes = append(r.Probes, ProbeResult{
			File: row.File, Namespace: ns, Pod: name, Container: row.Container, Probe: row.Probe, Origin: row.Origin, Handler: row.Handler,
			Result: row.Result, DurationMS: float64(row.Duration.Microseconds()) / 1000, Message: row.Message, PodIP: row.PodIP,
		})
	}
	for _, sk := range res.Skipped {
		name := sk.Name
		if name != "" && sk.Namespace != "" {
			name = sk.Namespace + "/" + name
		}
		r.Skipped = append(r.Skipped, SkippedDocument{File: sk.File, Document: sk.Doc, Kind: sk.Kind, Name: name, Reason: sk.Reason})
	}
	return r
}

// loaded is what load read from every file.
type loaded struct {
	Entries []manifest.Entry
	Errors  []error
	skipped []Skipped
	files   []string
}

// load reads Options.File: one file, every manifest file of a directory,
// or stdin, each bounded by manifest.DefaultMaxFileBytes. A directory is
// read as the agent reads it (source.ManifestFiles), and a pod defined
// twice is rejected as the agent rejects it (source.Conflicts): check
// probes what probed run would, no more.
func load(opts Options) *loaded {
	res := &loaded{files: []string{}}
	conflicts := source.NewConflicts()
	add := func(file string, r *manifest.Result) {
		res.files = append(res.files, file)
		for i := range r.Entries {
			if err := conflicts.Admit(source.NewPod(&r.Entries[i])); err != nil {
				res.Errors = append(res.Errors, err)
				continue
			}
			res.Entries = append(res.Entries, r.Entries[i])
		}
		res.Errors = append(res.Errors, r.Errors...)
		for _, sk := range r.Skipped {
			res.skipped = append(res.skipped, Skipped{File: file, Skipped: sk})
		}
	}
	if opts.File == Stdin {
		in := opts.Stdin
		if in == nil {
			in = os.Stdin
		}
		// One byte over the bound, so that DecodeAll refuses a larger input
		// whole without more being read.
		data, err := io.ReadAll(io.LimitReader(in, manifest.DefaultMaxFileBytes+1))
		if err != nil {
			res.files = append(res.files, Stdin)
			res.Errors = append(res.Errors, &manifest.Error{File: Stdin, Detail: "reading stdin", Err: err})
			return res
		}
		add(Stdin, manifest.DecodeAll(data, Stdin, manifest.Options{}))
		return res
	}
	fi, err := os.Stat(opts.File)
	if err != nil || !fi.IsDir() {
		// LoadFileAll says what is wrong with a path that is not a regular
		// file (missing, a FIFO, a device, ...).
		add(opts.File, manifest.LoadFileAll(opts.File, manifest.Options{}))
		return res
	}
	files, err := source.ManifestFiles(opts.File)
	if err != nil {
		res.Errors = append(res.Errors, &manifest.Error{File: opts.File, Detail: "reading the directory", Err: err})
		return res
	}
	if len(files) == 0 {
		res.Errors = append(res.Errors, &manifest.Error{File: opts.File, Detail: "the directory holds no manifest file (*.yaml, *.yml, *.json)"})
	}
	for _, f := range files {
		add(f, manifest.LoadFileAll(f, manifest.Options{}))
	}
	return res
}

// wholeLine is the wide MESSAGE column: the whole message on one line,
// trailing white space dropped, line breaks and other control characters
// escaped as `probed status` escapes them (output.Printable: "\n",
// "\x1b"); quotes stay quotes (Get "http://…").
func wholeLine(s string) string {
	return output.Printable(strings.TrimRight(s, " \t\r\n"))
}
