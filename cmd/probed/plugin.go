package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/probed/probed/internal/version"
	"github.com/probed/probed/plugins/builtin"
)

// newPluginCmd is `probed plugin`: `probed plugin serve KIND...` serves
// built-in probe kinds out of process over the plugin contract
// (probeplugin.v1), for probed's plugin host to start (docs/plugins.md).
func newPluginCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "Serve built-in probe kinds as plugins (started by probed, not by hand)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	kinds := strings.Join(builtin.Kinds(), "|")
	serve := &cobra.Command{
		Use:   "serve " + kinds + "...",
		Short: "Serve built-in probe kinds (" + kinds + ") over the plugin contract",
		Long: `Serve runs the built-in handlers of the given kinds as a probed plugin: probed
starts it (list it in --plugin-config with args [plugin, serve, KIND]) and then
runs those kinds' probes out of process, with the same verdicts as in process.
Exec commands run on the plugin's host. It writes nothing to stdout but the
plugin handshake, and exits when probed stops it or dies.`,
		Args:      cobra.MinimumNArgs(1),
		ValidArgs: builtin.Kinds(),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := builtin.Serve(version.Get().Version, args...); err != nil {
				return fmt.Errorf("plugin serve: %w", err)
			}
			return errors.New("plugin serve: returned unexpectedly")
		},
	}
	serve.SetOut(stderr) // stdout carries the go-plugin handshake only
	serve.SetErr(stderr)
	cmd.AddCommand(serve)
	return cmd
}
