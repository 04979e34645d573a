//go:build !linux

package pluginhost

import "os/exec"

// setParentDeathSignal does nothing outside Linux: plugins built with
// plugins/sdk exit on their own when their parent is gone.
func setParentDeathSignal(*exec.Cmd) {}
