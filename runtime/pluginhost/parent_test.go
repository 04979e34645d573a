package pluginhost_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/probed/probed/runtime/pluginhost"
	"github.com/probed/probed/runtime/pluginhost/pluginhosttest"
	"github.com/probed/probed/runtime/pluginproto"
)

const (
	parentModeEnv   = "PLUGINHOST_TEST_PARENT"
	parentPluginEnv = "PLUGINHOST_TEST_PLUGIN"
)

// runParent is the helper process of TestPluginExitsWhenAgentDies. It
// starts the test plugin — mode "host" through a Host (Pdeathsig and the
// SDK's parent watch), mode "bare" through go-plugin alone (no Pdeathsig:
// only the SDK's parent watch can stop it) — prints the plugin's PID and
// waits to be killed.
func runParent(mode string) {
	path := os.Getenv(parentPluginEnv)
	var pid int
	switch mode {
	case "host":
		h, err := pluginhost.New(context.Background(), pluginhost.Options{
			Plugins: []pluginhost.PluginConfig{{Name: "t", Path: path}},
			Logger:  newLogger(io.Discard),
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pid = h.Status()[0].PID
	case "bare":
		c := plugin.NewClient(&plugin.ClientConfig{
			HandshakeConfig:  pluginproto.Handshake,
			VersionedPlugins: pluginproto.VersionedPlugins(nil),
			Cmd:              exec.Command(path),
			AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
			AutoMTLS:         true,
			Logger:           hclog.NewNullLogger(),
		})
		if _, err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pid = c.ReattachConfig().Pid
	}
	fmt.Println(pid)
	time.Sleep(time.Minute)
	os.Exit(0)
}

// TestPluginExitsWhenAgentDies: when the agent is SIGKILLed, its plugins
// do not outlive it (no orphans), both through the host's Pdeathsig and,
// for a plugin started without it, through the SDK's parent watch.
func TestPluginExitsWhenAgentDies(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"host", "bare"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), parentModeEnv+"="+mode, parentPluginEnv+"="+testPlugin())
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("reading the plugin PID from the helper: %v", err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil || pid <= 0 {
				t.Fatalf("helper printed %q", line)
			}
			if !pluginhosttest.Alive(pid) {
				t.Fatalf("plugin %d is not running", pid)
			}
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			took := waitFor(t, 3*time.Second, "plugin exits after its parent died", func() bool { return !pluginhosttest.Alive(pid) })
			t.Logf("plugin %d gone %s after its parent was killed", pid, took)
		})
	}
}
