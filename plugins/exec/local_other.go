//go:build !linux

package exec

import (
	"context"
	"errors"
	"time"
)

// DefaultWaitDelay is LocalRunner's default for WaitDelay.
const DefaultWaitDelay = 250 * time.Millisecond

// LocalRunner runs exec probe commands on this host. It is implemented on
// Linux only (it relies on process groups and waitid); elsewhere every run
// returns an error, so exec probes are errored (P5).
type LocalRunner struct {
	// WaitDelay is unused on this platform.
	WaitDelay time.Duration
	// ProcessGroupOnly is unused on this platform.
	ProcessGroupOnly bool
}

// HostTreeKill reports the process-group mode: no command runs here.
func HostTreeKill() TreeKill {
	return TreeKill{Mode: TreeKillProcessGroup, Reason: "host exec is supported on Linux only"}
}

// Mode is "host": exec probes run on this host.
func (*LocalRunner) Mode(string) string { return "host" }

// TreeKill returns HostTreeKill().
func (r *LocalRunner) TreeKill() TreeKill { return HostTreeKill() }

// RunInContainer returns an error: host exec is supported on Linux only.
func (r *LocalRunner) RunInContainer(context.Context, string, []string, time.Duration) ([]byte, error) {
	return nil, errors.New("exec: host exec is supported on Linux only")
}
