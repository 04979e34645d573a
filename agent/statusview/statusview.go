// Package statusview prints the pods of a running agent like `kubectl get
// pods`: `probed status`. It reads GET /pods and, per pod, GET
// /pods/{namespace}/{name}/probes for the last failure.
package statusview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/runtime"
)

// Options configure Print.
type Options struct {
	// Server is the agent's API base URL, e.g. http://127.0.0.1:8089.
	Server string
	// Client; nil: a client with a 10 s timeout.
	Client *http.Client
	// Now for the AGE column; nil: time.Now.
	Now func() time.Time
}

// Print writes the table: NAMESPACE NAME READY STARTED RESTARTS STATUS AGE
// LAST FAILURE. READY and STARTED count containers (and sidecars) as
// ready/total and started/total.
func Print(ctx context.Context, opts Options, out io.Writer) error {
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	base := strings.TrimRight(opts.Server, "/")
	var list v1.PodList
	if err := getJSON(ctx, opts.Client, base+"/pods", &list); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tREADY\tSTARTED\tRESTARTS\tSTATUS\tAGE\tLAST FAILURE")
	for i := range list.Items {
		p := &list.Items[i]
		var hist struct {
			Probes []history.Probe `json:"probes"`
		}
		lastFailure := ""
		if err := getJSON(ctx, opts.Client, fmt.Sprintf("%s/pods/%s/%s/probes", base, url.PathEscape(p.Namespace), url.PathEscape(p.Name)), &hist); err == nil {
			lastFailure = newestFailure(hist.Probes)
		}
		ready, started, total, restarts := 0, 0, 0, int32(0)
		statuses := append([]v1.ContainerStatus{}, p.Status.ContainerStatuses...)
		for j := range p.Status.InitContainerStatuses {
			if isSidecar(p, p.Status.InitContainerStatuses[j].Name) {
				statuses = append(statuses, p.Status.InitContainerStatuses[j])
			}
		}
		for _, cs := range statuses {
			total++
			if cs.Ready {
				ready++
			}
			if cs.Started != nil && *cs.Started {
				started++
			}
			restarts += cs.RestartCount
		}
		age := "-"
		if p.Status.StartTime != nil {
			age = opts.Now().Sub(p.Status.StartTime.Time).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d/%d\t%d\t%s\t%s\t%s\n", printable(p.Namespace), printable(p.Name), ready, total, started, total, restarts,
			printable(phase(p)), age, lastFailure)
	}
	return tw.Flush()
}

func isSidecar(p *v1.Pod, name string) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return runtime.IsRestartable(&c)
		}
	}
	return false
}

// phase is the STATUS column as kubectl's printPod computes it for the
// regular containers: the pod's reason or phase, replaced by the reason of
// the first container that is waiting (CrashLoopBackOff while a restart backs
// off) or terminated (its reason, else Signal:N or ExitCode:N); a Running
// pod whose Ready condition is not true is NotReady.
func phase(p *v1.Pod) string {
	reason := string(p.Status.Phase)
	if p.Status.Reason != "" {
		reason = p.Status.Reason
	}
	for i := len(p.Status.ContainerStatuses) - 1; i >= 0; i-- {
		st := p.Status.ContainerStatuses[i].State
		switch {
		case st.Waiting != nil && st.Waiting.Reason != "":
			reason = st.Waiting.Reason
		case st.Terminated != nil && st.Terminated.Reason != "":
			reason = st.Terminated.Reason
		case st.Terminated != nil && st.Terminated.Signal != 0:
			reason = fmt.Sprintf("Signal:%d", st.Terminated.Signal)
		case st.Terminated != nil:
			reason = fmt.Sprintf("ExitCode:%d", st.Terminated.ExitCode)
		}
	}
	if reason != string(v1.PodRunning) {
		return reason
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady && c.Status != v1.ConditionTrue {
			return "NotReady"
		}
	}
	return reason
}

// newestFailure formats the most recent failed or errored probe run of a
// pod: "<container> <type>: <message> (<age>)".
func newestFailure(probes []history.Probe) string {
	var best *history.Record
	var who string
	for i := range probes {
		if f := probes[i].LastFailure; f != nil && (best == nil || f.Time.After(best.Time)) {
			best = f
			who = probes[i].Container + " " + probes[i].Type
		}
	}
	if best == nil {
		return ""
	}
	msg := best.Message
	if msg == "" {
		msg = best.Result
	}
	// Cut at 80 characters, not bytes: a cut inside a multi-byte
	// character would print invalid UTF-8.
	if r := []rune(msg); len(r) > 80 {
		msg = string(r[:80]) + "…"
	}
	return fmt.Sprintf("%s: %s (%s)", printable(who), printable(strings.ReplaceAll(msg, "\n", " ")), best.Time.UTC().Format(time.RFC3339))
}

// printable makes text from the agent safe to print on a terminal: every
// character that is not printable (strconv.IsPrint: C0 controls such as
// ESC, BEL, CR and TAB, DEL, C1 controls U+0080–U+009F, format characters
// such as the bidi overrides) is escaped as strconv.Quote escapes it,
// without the quotes ("\x1b", "\r", "\a", "\u009b"); invalid UTF-8 shows
// as U+FFFD. Probe output can carry terminal escape sequences that would
// otherwise move the cursor, rewrite the screen or set the window title.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if !strconv.IsPrint(r) || r == utf8.RuneError {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if strconv.IsPrint(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r) // '\x1b'
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

func getJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the agent: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v)
}
