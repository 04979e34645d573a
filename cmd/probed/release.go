package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/agent/release"
	"github.com/probed/probed/internal/version"
)

// newReleaseCmd is `probed release`: the way off probed without stranding a
// pod (package agent/release; docs/cluster.md "Uninstall"). It runs as the
// operator, with a kubeconfig as kubectl's. Exit 0: no workload's template
// lists the gate (and, with --hand-back, every gated pod was handed back);
// 1: some still do, nothing written; 2: a usage or API error.
func newReleaseCmd(stdout io.Writer) *cobra.Command {
	var (
		kubeconfig, gate, namespace, format string
		handBack                            bool
	)
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Before and after uninstalling probed: check that no workload still lists its readiness gate, then hand the gated pods left back to the kubelet",
		Long: `probed release lists the workloads whose pod template still lists probed's readiness gate
(take it out of those first, while probed runs: their new pods would never turn Ready without it)
and the pods still gated. Run it before uninstalling: it exits 1 while any template lists the gate.
After uninstalling, "probed release --hand-back" writes each gated pod's condition one last time
(reason ProbedReleased): True where the kubelet's own readiness probes check every container
probed checked, so the pod's Ready is the kubelet's alone; False where probed's probe was a
container's only readiness check, so that pod stays out of its Services until it is replaced.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("-o %q: want text or json", format)
			}
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = kubeconfig
			cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
			if err != nil {
				return fmt.Errorf("kubeconfig: %w", err)
			}
			cfg.UserAgent = "probed-release/" + version.Get().Version
			c, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			report, err := release.Run(cmd.Context(), c, release.Options{Gate: gate, Namespace: namespace, Write: handBack})
			var gated *release.ErrTemplatesGated
			if err != nil && !errors.As(err, &gated) {
				return err
			}
			if format == "json" {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(report); err != nil {
					return err
				}
			} else {
				printReport(stdout, report, handBack)
			}
			if gated != nil {
				return exitError{code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, as kubectl)")
	f.StringVar(&gate, "readiness-gate", agent.DefaultReadinessGate, "the condition type probed owned (its --readiness-gate)")
	f.StringVarP(&namespace, "namespace", "n", "", "only this namespace (default: all, what an uninstall needs)")
	f.BoolVar(&handBack, "hand-back", false, "write each gated pod's last condition (after probed is uninstalled; refused while a template lists the gate)")
	f.StringVarP(&format, "output", "o", "text", "text or json")
	return cmd
}

// printReport writes the report for an operator: what to change first, or
// what was (or would be) written and which pods to replace.
func printReport(w io.Writer, r *release.Report, handBack bool) {
	if len(r.Templates) > 0 {
		fmt.Fprintf(w, "%d workloads still list the readiness gate %s in their pod template; take it out (and move their probed.io/probes readiness probes into the spec) while probed runs, then run probed release again:\n", len(r.Templates), r.Gate)
		for _, wl := range r.Templates {
			fmt.Fprintf(w, "  %s\n", wl)
		}
	}
	if len(r.Pods) == 0 {
		fmt.Fprintf(w, "no pod lists the readiness gate %s\n", r.Gate)
		return
	}
	verb := "would write"
	if handBack && len(r.Templates) == 0 {
		verb = "wrote"
	}
	fmt.Fprintf(w, "%d pods list the readiness gate %s:\n", len(r.Pods), r.Gate)
	for _, p := range r.Pods {
		owner := p.Owner
		if owner == "" {
			owner = "no controller"
		}
		what := "True: the kubelet's readiness checks decide"
		if !p.Ready {
			what = "False: probed alone checked container " + strings.Join(p.Unchecked, ", ") + "; replace the pod"
		}
		done := verb
		if handBack && len(r.Templates) == 0 && !p.Written {
			done = "already"
		}
		fmt.Fprintf(w, "  %s/%s (%s): %s %s\n", p.Namespace, p.Name, owner, done, what)
	}
	if !handBack && len(r.Templates) == 0 {
		fmt.Fprintln(w, "uninstall probed, then run probed release --hand-back")
	}
}
