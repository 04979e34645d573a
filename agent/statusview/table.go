package statusview

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/output"
	"github.com/probed/probed/agent/source"
)

// writeTable prints st as `probed status` does without -o json|yaml: the
// pods, then "REJECTED MANIFESTS" and "SKIPPED MANIFESTS" sections when
// there are any. Every text that comes from the agent goes through
// printable.
func writeTable(out io.Writer, st *Status, wide bool, now time.Time) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "NAMESPACE\tNAME\tREADY\tSTARTED\tRESTARTS\tSTATUS\tAGE\tIP\tPROBES\tLAST FAILURE")
	} else {
		fmt.Fprintln(tw, "NAMESPACE\tNAME\tREADY\tSTARTED\tRESTARTS\tSTATUS\tAGE\tLAST FAILURE")
	}
	for i := range st.Pods {
		p := &st.Pods[i]
		age := "-"
		if p.StartTime != nil {
			age = now.Sub(*p.StartTime).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d/%d\t%d\t%s\t%s\t", output.Printable(p.Namespace), output.Printable(p.Name),
			p.ReadyContainers, p.Containers, p.StartedContainers, p.Containers, p.Restarts, output.Printable(p.Status), age)
		if wide {
			fmt.Fprintf(tw, "%s\t%s\t", orDash(output.Printable(p.PodIP)), probesCell(p.Probes, p.Refused))
		}
		fmt.Fprintln(tw, failureCell(p.LastFailure))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if st.Guards != nil && len(st.Guards.Held) > 0 {
		fmt.Fprintf(out, "\nHELD BY THE GUARDS (%d)\n", len(st.Guards.Held))
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAMESPACE\tNAME\tCONTAINER\tGUARD\tWHY")
		for _, h := range st.Guards.Held {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", output.Printable(h.Namespace), output.Printable(h.Pod), orDash(output.Printable(h.Container)),
				output.Printable(h.Guard), cut(h.Why, wide))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if st.Manifests == nil {
		return nil
	}
	if rej := st.Manifests.Rejected; len(rej) > 0 {
		fmt.Fprintf(out, "\nREJECTED MANIFESTS (%d)\n", len(rej))
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FILE\tDOC\tLINE\tPOD\tSINCE\tSTALE\tERROR")
		for _, r := range rej {
			line := "-"
			if r.Line > 0 {
				line = strconv.Itoa(r.Line)
			}
			stale := "no"
			if r.Stale {
				stale = "yes"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", fileCell(r.File, wide), r.Document, line, orDash(output.Printable(r.Pod)),
				r.Since.UTC().Format(time.RFC3339), stale, rejectionCell(r, wide))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if sk := st.Manifests.Skipped; len(sk) > 0 {
		fmt.Fprintf(out, "\nSKIPPED MANIFESTS (%d)\n", len(sk))
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FILE\tDOC\tKIND\tREASON")
		for _, s := range sk {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", fileCell(s.File, wide), s.Document, orDash(output.Printable(s.Kind)), cut(s.Reason, wide))
		}
		return tw.Flush()
	}
	return nil
}

// fileCell is a manifest's file name; wide prints the whole path.
func fileCell(path string, wide bool) string {
	if !wide {
		path = filepath.Base(path)
	}
	return output.Printable(path)
}

// rejectionCell is the ERROR column of a rejected manifest document:
// wide, the whole message; else the part a user acts on, the field and
// what is wrong with it (the file, document and pod have their own
// columns), cut at errorRunes. An agent that serves no detail (older than
// the field) shows the message cut alike.
func rejectionCell(r source.Rejection, wide bool) string {
	if wide {
		return cut(r.Error, true)
	}
	msg := r.Error
	if r.Detail != "" {
		msg = r.Detail
		if r.Field != "" {
			msg = r.Field + ": " + r.Detail
		}
	}
	return cutAt(msg, errorRunes)
}

// errorRunes is the most of a rejected document's error the table prints
// without -o wide: a field path of a pod template's probe and the API
// server's words about it fit.
const errorRunes = 160

// probesCell is the wide PROBES column: container/type=last result of each
// probe ("app/readiness=success,app/liveness=failure"), prefixed with its
// origin when the agent says it ("annotation:app/readiness=success"), an
// exec probe's mode in parentheses ("spec:app/liveness(resident)=success");
// "-" without probes, "none" for a probe that has not run yet; then each
// refused probe once, "=refused" ("annotation:app/startup=refused").
func probesCell(probes []Probe, refused []history.Refused) string {
	if len(probes) == 0 && len(refused) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(probes)+len(refused))
	for _, p := range probes {
		r := p.LastResult
		if r == "" {
			r = "none"
		}
		mode := ""
		if p.ExecMode != "" {
			mode = "(" + p.ExecMode + ")"
		}
		parts = append(parts, output.Printable(origin(p.Origin)+p.Container+"/"+p.Type+mode+"="+r))
	}
	seen := map[string]bool{}
	for _, rf := range refused {
		name := origin(rf.Origin) + orDash(rf.Container) + "/" + orDash(rf.Type)
		if !seen[name] {
			seen[name] = true
			parts = append(parts, output.Printable(name+"=refused"))
		}
	}
	return strings.Join(parts, ",")
}

// origin is a probe's origin as the PROBES column prefixes it: "spec:",
// "annotation:"; "" when the agent did not say.
func origin(o string) string {
	if o == "" {
		return ""
	}
	return o + ":"
}

// failureCell is the LAST FAILURE column: "<container> <type>: <message>
// (<time>)", the message cut at 80 characters.
func failureCell(f *Failure) string {
	if f == nil {
		return ""
	}
	msg := f.Message
	if msg == "" {
		msg = f.Result
	}
	return fmt.Sprintf("%s: %s (%s)", output.Printable(f.Container+" "+f.Type), cut(msg, false), f.Time.UTC().Format(time.RFC3339))
}

// cut makes a message one printable line: line breaks become spaces and,
// unless wide, it is cut at 80 characters (whole characters: a cut inside
// a multi-byte character would print invalid UTF-8) with an ellipsis.
func cut(msg string, wide bool) string {
	if wide {
		return cutAt(msg, 0)
	}
	return cutAt(msg, 80)
}

// cutAt is cut at n characters (0: whole).
func cutAt(msg string, n int) string {
	msg = strings.ReplaceAll(msg, "\n", " ")
	if r := []rune(msg); n > 0 && len(r) > n {
		msg = string(r[:n]) + "…"
	}
	return output.Printable(msg)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
