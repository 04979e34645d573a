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
	"github.com/probed/probed/agent/kube/offload"
	"github.com/probed/probed/agent/release"
	"github.com/probed/probed/internal/version"
)

// newReleaseCmd is `probed release`: the way off probed without stranding a
// pod (package agent/release; docs/cluster.md "Uninstall"). It runs as the
// operator, with a kubeconfig as kubectl's. Exit 0: no workload's template
// lists the gate and no pod is offloaded (and, with --hand-back, every
// gated pod was handed back); 1: some still do or are, nothing written; 2:
// a usage or API error.
func newReleaseCmd(stdout io.Writer) *cobra.Command {
	var (
		kubeconfig, gate, namespace, format, offloadNamespaces string
		handBack                                               bool
	)
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Before and after uninstalling probed: check that no workload still lists its readiness gate or has offloaded pods, then hand the gated pods left back to the kubelet",
		Long: `probed release lists the workloads whose pod template still lists probed's readiness gate
(take it out of those first, while probed runs: their new pods would never turn Ready without it),
the workloads whose pods the offload webhook moved probes of (take their namespace's
probed.io/offload label off and roll them first: with probed gone nobody runs those probes; see
"probed offload status") and the pods still gated. Run it before uninstalling: it exits 1 while
any template lists the gate or any pod is offloaded. After uninstalling, "probed release
--hand-back" writes each gated pod's condition one last time (reason ProbedReleased): True where
the kubelet's own readiness probes check every container probed checked, so the pod's Ready is the
kubelet's alone; False where probed's probe was a container's only readiness check, so that pod
stays out of its Services until it is replaced.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("-o %q: want text or json", format)
			}
			c, err := operatorClient(kubeconfig, "probed-release")
			if err != nil {
				return err
			}
			report, err := release.Run(cmd.Context(), c, release.Options{Gate: gate, Namespace: namespace, Write: handBack, OffloadNamespaces: offloadNamespaces})
			var gated *release.ErrTemplatesGated
			var offloaded *release.ErrOffloaded
			stopped := errors.As(err, &gated) || errors.As(err, &offloaded)
			if err != nil && !stopped {
				return err
			}
			if format == "json" {
				if err := writeJSON(stdout, report); err != nil {
					return err
				}
			} else {
				printReport(stdout, report, handBack)
			}
			if stopped {
				return exitError{code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, as kubectl)")
	f.StringVar(&gate, "readiness-gate", agent.DefaultReadinessGate, "the condition type probed owned (its --readiness-gate)")
	f.StringVarP(&namespace, "namespace", "n", "", "only this namespace (default: all, what an uninstall needs)")
	f.BoolVar(&handBack, "hand-back", false, "write each gated pod's last condition (after probed is uninstalled; refused while a template lists the gate or a pod is offloaded)")
	f.StringVar(&offloadNamespaces, "offload-namespaces", offload.DefaultNamespaceSelector, "the offload webhook's --offload-namespaces")
	f.StringVarP(&format, "output", "o", "text", "text or json")
	return cmd
}

// newOffloadCmd is `probed offload`: what the offload webhook did
// (docs/cluster.md "Offload a namespace").
func newOffloadCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "offload",
		Short: "What the offload webhook moved into probed's care, and how to give it back",
	}
	var kubeconfig, namespace, format, selector string
	status := &cobra.Command{
		Use:   "status",
		Short: "List the namespaces that opt in and the workloads with offloaded pods, with what rolling each restores; exit 1 while any pod is offloaded",
		Long: `probed offload status lists the namespaces whose new pods the offload webhook moves probes of
(label probed.io/offload=enabled) and every workload with pods it moved probes of: their pods,
the probes moved, the readiness gate added, and the command that gives them back to the kubelet
(its namespace's label off first, then a rollout: the template still has the probes). It exits 1
while any pod is offloaded, 0 when none is.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("-o %q: want text or json", format)
			}
			c, err := operatorClient(kubeconfig, "probed-offload")
			if err != nil {
				return err
			}
			report, err := release.ListOffloaded(cmd.Context(), c, namespace, selector)
			if err != nil {
				return err
			}
			if format == "json" {
				if err := writeJSON(stdout, report); err != nil {
					return err
				}
			} else {
				printOffload(stdout, report)
			}
			if len(report.Workloads) > 0 {
				return exitError{code: 1}
			}
			return nil
		},
	}
	f := status.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, as kubectl)")
	f.StringVarP(&namespace, "namespace", "n", "", "only this namespace (default: all)")
	f.StringVar(&selector, "offload-namespaces", offload.DefaultNamespaceSelector, "the offload webhook's --offload-namespaces")
	f.StringVarP(&format, "output", "o", "text", "text or json")
	cmd.AddCommand(status)
	return cmd
}

// operatorClient is a client with the operator's kubeconfig, as kubectl
// finds it.
func operatorClient(kubeconfig, agent string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = agent + "/" + version.Get().Version
	return kubernetes.NewForConfig(cfg)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printOffload writes the offload report for an operator.
func printOffload(w io.Writer, r *release.OffloadReport) {
	if len(r.Namespaces) > 0 {
		fmt.Fprintf(w, "%d namespaces opt in (%s): their new pods are offloaded while the webhook runs: %s\n", len(r.Namespaces), r.Selector, strings.Join(r.Namespaces, ", "))
	}
	if len(r.Workloads) == 0 {
		fmt.Fprintln(w, "no pod is offloaded")
		return
	}
	fmt.Fprintf(w, "%d workloads have offloaded pods; rolling each gives its probes back to the kubelet:\n", len(r.Workloads))
	for _, wl := range r.Workloads {
		fmt.Fprintf(w, "  %s (%d pods): restores %s\n    %s\n", wl, len(wl.Pods), wl.Restores(), wl.Roll)
	}
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
	if o := r.Offload; o != nil && (len(o.Workloads) > 0 || len(o.Namespaces) > 0) {
		printOffload(w, o)
	}
	stopped := len(r.Templates) > 0 || (r.Offload != nil && len(r.Offload.Workloads) > 0)
	if len(r.Pods) == 0 {
		fmt.Fprintf(w, "no pod lists the readiness gate %s\n", r.Gate)
		return
	}
	verb := "would write"
	if handBack && !stopped {
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
		if handBack && !stopped && !p.Written {
			done = "already"
		}
		fmt.Fprintf(w, "  %s/%s (%s): %s %s\n", p.Namespace, p.Name, owner, done, what)
	}
	if !handBack && !stopped {
		fmt.Fprintln(w, "uninstall probed, then run probed release --hand-back")
	}
}
