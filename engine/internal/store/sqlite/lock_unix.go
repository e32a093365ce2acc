//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// tryLockFile takes an exclusive flock on f without waiting: held is false when another open
// file description holds it.
func tryLockFile(f *os.File) (held bool, err error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

func unlockFile(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// lockedError is the *LockedError for a database whose lock is held: when the holder the lock
// file names has exited, the lock is held by a process it forked (which inherited the lock):
// the error says so and names the processes that have the lock file open, when it can.
func lockedError(path, holder string, lockFileLost bool) *LockedError {
	le := &LockedError{Path: path, Holder: holder}
	if lockFileLost {
		// The lock file is not the owner's any more: its text is not about the owner.
		le.Holder, le.LockFileLost = "", true
		le.Others = openers(path)
		return le
	}
	var pid int
	if _, err := fmt.Sscanf(holder, "pid %d", &pid); err == nil && pid > 0 && !alive(pid) {
		le.HolderExited = true
		le.Others = openers(path + ".lock")
	}
	return le
}

// alive reports whether a process with this pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// openers returns up to 8 pids of other processes with name open (from /proc; none where there
// is no /proc).
func openers(name string) []int {
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, err := os.ReadDir("/proc/" + p.Name() + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if target, err := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name()); err == nil && target == abs {
				out = append(out, pid)
				break
			}
		}
		if len(out) == 8 {
			break
		}
	}
	return out
}

// removeLockFileHeld removes the lock file at name while f, its lock, is still locked, when f is
// still the file there; it reports whether that was done.
func removeLockFileHeld(f *os.File, name string) bool {
	if samePath(f, name) {
		_ = os.Remove(name)
	}
	return true
}

// removeLockFileClosed is not needed on Unix (removeLockFileHeld removed it).
func removeLockFileClosed(string) {}
