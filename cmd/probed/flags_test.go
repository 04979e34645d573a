package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/probed/probed/internal/version"
)

// TestVersionFlagHasNoShorthand: `probed --version` prints
// the version line, and -v is not the version (kubectl's -v is log
// verbosity): it is an unknown flag, exit 2, and the help lists
// --version without it.
func TestVersionFlagHasNoShorthand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := execute([]string{"--version"}, &out, &errOut); code != 0 || out.String() != "probed "+version.Get().String()+"\n" {
		t.Errorf("--version: exit %d, %q %q", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := execute([]string{"-v"}, &out, &errOut); code != 2 || strings.Contains(out.String(), version.Get().String()) ||
		!strings.Contains(errOut.String(), "unknown shorthand flag: 'v' in -v") {
		t.Errorf("-v: exit %d, stdout %q, stderr %q; want an unknown flag", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := execute([]string{"--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "      --version ") || strings.Contains(out.String(), "-v, --version") {
		t.Errorf("--help: exit %d:\n%s", code, out.String())
	}
}

// TestClusterOptionsFromTheEnvironment: --liveness-action, --exec-mode and
// --container-runtime-endpoint take their defaults from
// PROBED_LIVENESS_ACTION, PROBED_EXEC_MODE and
// PROBED_CONTAINER_RUNTIME_ENDPOINT (the plain DaemonSet's switches), and a
// flag given wins over the variable; unset or empty, the built-in default.
func TestClusterOptionsFromTheEnvironment(t *testing.T) {
	flags := func() *kubeFlags {
		k := &kubeFlags{}
		k.add(&cobra.Command{Use: "run"})
		return k
	}
	if k := flags(); k.livenessAction != "event" || k.execMode != "execsync" || k.criEndpoint != "" {
		t.Errorf("unset: %q %q %q", k.livenessAction, k.execMode, k.criEndpoint)
	}
	t.Setenv(EnvLivenessAction, "restart")
	t.Setenv(EnvExecMode, "resident")
	t.Setenv(EnvContainerRuntimeEndpoint, "unix:///run/cri/cri.sock")
	if k := flags(); k.livenessAction != "restart" || k.execMode != "resident" || k.criEndpoint != "unix:///run/cri/cri.sock" {
		t.Errorf("from the environment: %q %q %q", k.livenessAction, k.execMode, k.criEndpoint)
	}
	cmd := &cobra.Command{Use: "run"}
	k := &kubeFlags{}
	k.add(cmd)
	if err := cmd.Flags().Parse([]string{"--liveness-action=evict"}); err != nil || k.livenessAction != "evict" {
		t.Errorf("a flag given: %q, %v; want it to win", k.livenessAction, err)
	}
	t.Setenv(EnvLivenessAction, "")
	if k := flags(); k.livenessAction != "event" {
		t.Errorf("empty: %q, want the default", k.livenessAction)
	}
}

// TestWebhookFlagsRefuseWhatTheAgentsCannotDo: `probed webhook` refuses,
// exit 2 with the reason, settings no node agent could run with: restart
// without the container runtime, an unknown liveness action, a cert file
// without its key, its own certificate's flags beside another party's,
// and no namespace of its own.
func TestWebhookFlagsRefuseWhatTheAgentsCannotDo(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"webhook", "--kubeconfig", "x"}, "--namespace (or $POD_NAMESPACE) is required"},
		{[]string{"webhook", "--namespace", "probed", "--liveness-action", "restart"}, "give --agent-container-runtime too"},
		{[]string{"webhook", "--namespace", "probed", "--liveness-action", "kill"}, `--liveness-action "kill"`},
		{[]string{"webhook", "--namespace", "probed", "--tls-cert-file", "c.pem"}, "--tls-cert-file and --tls-private-key-file go together"},
		{[]string{"webhook", "--namespace", "probed", "--min-probe-period", "10ms"}, "--min-probe-period 10ms"},
		{[]string{"webhook", "--namespace", "probed"}, "--kubeconfig or --in-cluster"},
	} {
		var out, errOut bytes.Buffer
		if code := execute(tc.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// TestLivenessActionMaxGracePeriod: the cap of a restart's grace period is
// a minute by default, at least the kubelet's minimum of 2 s, and cluster
// mode's.
func TestLivenessActionMaxGracePeriod(t *testing.T) {
	parse := func(args ...string) (*kubeFlags, *cobra.Command) {
		t.Helper()
		cmd := &cobra.Command{Use: "run"}
		k := &kubeFlags{}
		k.add(cmd)
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		return k, cmd
	}
	if k, _ := parse(); k.livenessActionMaxGracePeriod != time.Minute {
		t.Errorf("default %v, want 1m", k.livenessActionMaxGracePeriod)
	}
	k, cmd := parse("--kubeconfig=/nonexistent", "--liveness-action-max-grace-period=1s")
	if _, err := k.cluster(cmd, "node-a"); err == nil || !strings.Contains(err.Error(), "at least 2s") {
		t.Errorf("1s: %v", err)
	}
	k, cmd = parse("--liveness-action-max-grace-period=30s")
	if _, err := k.cluster(cmd, "node-a"); err == nil || !strings.Contains(err.Error(), "needs cluster mode") {
		t.Errorf("manifest mode: %v", err)
	}
}
