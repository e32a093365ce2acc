//go:build !unix && !windows

package remote

import (
	"os"
	"os/exec"
)

// inNewGroup does nothing where there are no process groups: only the child itself is killed.
func inNewGroup(*exec.Cmd) {}

type procGroup struct{}

func joinGroup(*os.Process) *procGroup { return nil }
func (*procGroup) kill()               {}
func (*procGroup) release()            {}
