package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestPluginServeRejectsUnknownKinds: `probed plugin serve` refuses kinds
// other than the built-in ones before writing anything to stdout (which
// carries the go-plugin handshake).
func TestPluginServeRejectsUnknownKinds(t *testing.T) {
	for _, args := range [][]string{{"serve", "redis"}, {"serve", "http", "http"}, {"serve"}} {
		var stdout, stderr bytes.Buffer
		cmd := newPluginCmd(&stdout, &stderr)
		cmd.SetArgs(args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if err == nil {
			t.Errorf("%v: no error", args)
		}
		if stdout.Len() != 0 {
			t.Errorf("%v: wrote to stdout: %q", args, stdout.String())
		}
		t.Logf("%v: %v", args, err)
	}
	var stdout, stderr bytes.Buffer
	cmd := newPluginCmd(&stdout, &stderr)
	cmd.SetArgs([]string{"serve", "--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if stdout.Len() != 0 || !strings.Contains(stderr.String(), "exec|grpc|http|tcp") {
		t.Errorf("help: stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}
