//go:build windows

package remote

import (
	"os"
	"os/exec"
	"sync"
	"unsafe"

	"golang.org/x/sys/windows"
)

// inNewGroup does nothing on Windows: joinGroup puts the child in a job object once started.
func inNewGroup(*exec.Cmd) {}

// procGroup is a job object holding a child and the processes it starts. The job kills them all
// when its last handle closes (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE), so they end with the engine
// even when it is killed. A child that starts a process before it is assigned to the job (in
// the first moments after start) leaves that one out.
type procGroup struct {
	mu  sync.Mutex
	job windows.Handle // 0 when the job could not be made or was released
}

// joinGroup makes a job object for p; nil (no group: only p itself is killed) when that fails.
func joinGroup(p *os.Process) *procGroup {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return nil
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{
		BasicLimitInformation: windows.JOBOBJECT_BASIC_LIMIT_INFORMATION{
			LimitFlags: windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
		},
	}
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		_ = windows.CloseHandle(job)
		return nil
	}
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(p.Pid))
	if err != nil {
		_ = windows.CloseHandle(job)
		return nil
	}
	defer windows.CloseHandle(h)
	if err := windows.AssignProcessToJobObject(job, h); err != nil {
		_ = windows.CloseHandle(job)
		return nil
	}
	return &procGroup{job: job}
}

// kill terminates every process of the job; a no-op once released or for a nil group.
func (g *procGroup) kill() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.job != 0 {
		_ = windows.TerminateJobObject(g.job, 1)
	}
}

// release closes the job's handle, which kills what is still in it.
func (g *procGroup) release() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.job != 0 {
		_ = windows.CloseHandle(g.job)
		g.job = 0
	}
}
