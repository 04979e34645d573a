package pluginhost

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel send the plugin SIGKILL when the
// thread that started it ends (Pdeathsig): the supervisor's thread, which
// lives as long as the agent's process. Together with
// the SDK's parent watch it leaves no orphan when the agent is killed.
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
