//go:build unix

package remote

import (
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// inNewGroup makes cmd start in a process group of its own (its pid is the group's id), so that
// what it forks (a render, a licence helper) can be killed with it: the engine's own group is
// left alone, and a terminal's Ctrl-C reaches the engine, which cancels the calls, rather than
// every worker at once.
func inNewGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// procGroup is a child's process group.
type procGroup struct {
	mu       sync.Mutex
	pgid     int
	released bool
}

func joinGroup(p *os.Process) *procGroup { return &procGroup{pgid: p.Pid} }

// kill sends SIGKILL to every process of the group; a no-op once released or for a nil group.
func (g *procGroup) kill() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.released && g.pgid > 0 {
		_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
	}
}

// release forgets the group: after it, kill does nothing (its id may be reused).
func (g *procGroup) release() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.released = true
	g.mu.Unlock()
}
