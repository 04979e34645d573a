package monitoring

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/probed/probed/runtime/pluginhost/pluginhosttest"
)

// pluginDir holds the http-match example plugin, built for the agent test
// so that the probed_plugin_* series exist.
var pluginDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "probed-monitoring-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := pluginhosttest.Build(dir, "github.com/probed/probed/examples/plugins/http-match"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	pluginDir = dir
	os.Setenv("GORACE", "atexit_sleep_ms=0") // race-built plugins exit at once
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(), goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}
