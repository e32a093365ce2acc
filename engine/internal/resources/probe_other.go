//go:build !unix

package resources

import "os/exec"

// setProcessGroup does nothing here: the cancel kills the probe's process only.
func setProcessGroup(*exec.Cmd) {}
