//go:build unix

package resources

import (
	"os/exec"
	"syscall"
)

// setProcessGroup runs the probe in a process group of its own and makes the cancel kill the
// whole group, so that a shell script's children (a `sleep`) die with it.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
