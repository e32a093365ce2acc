//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ownerLock is the exclusive owner lock of a database (see lockOwner).
type ownerLock struct {
	path string // the database file

	mu   sync.Mutex
	lock *os.File // path+".lock", flocked
	db   *os.File // the database file with the byte lock of lockDBFile (Linux), or nil
}

// lockOwner takes the exclusive owner lock of the database at path, held until release is
// called or the process ends (the kernel drops it on a crash or SIGKILL, so a dead owner never
// blocks the next one). A lock held elsewhere returns a *LockedError at once, without waiting.
//
// The lock is two locks, both on open file descriptions (flock and, on Linux, an OFD byte
// lock), so a second Engine of the same process on the same database is refused too:
//   - an flock on path+".lock", a file that says who holds it (for the next process's error).
//     After taking it, the locked file must still be the one at that path (another process may
//     have deleted or replaced it in between); else the lock is taken again.
//   - on Linux, a write lock on one byte of the database file itself, far from the bytes SQLite
//     locks (lockDBFile): deleting the lock file cannot hand the database to a second process.
//
// Both descriptors are close-on-exec, and SetForkHook tells the C side to close them in a
// child forked without exec (a fork child holding them would keep the database locked after
// the owner is gone).
func lockOwner(path string) (release func(), check func() error, err error) {
	o := &ownerLock{path: path}
	if err := o.takeLockFile(); err != nil {
		return nil, nil, err
	}
	db, err := lockDBFile(path)
	if err != nil {
		o.release()
		return nil, nil, err
	}
	o.db = db
	if db != nil {
		forkHook(int(db.Fd()), true)
	}
	o.writeHolder()
	return o.release, o.check, nil
}

// writeHolder writes who holds the lock in the lock file (once both locks are taken: a process
// refused at the database lock must not overwrite what the file says).
func (o *ownerLock) writeHolder() {
	_ = o.lock.Truncate(0)
	_, _ = o.lock.WriteAt([]byte(holderText()), 0)
}

// takeLockFile flocks path+".lock" and writes the holder text in it.
func (o *ownerLock) takeLockFile() error {
	name := o.path + ".lock"
	for range 8 {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("opening the lock file of %s: %w", o.path, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			holder, _ := os.ReadFile(name)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return lockedError(o.path, strings.TrimSpace(string(holder)), false)
			}
			return fmt.Errorf("locking %s: %w", o.path, err)
		}
		if !samePath(f, name) {
			f.Close() // deleted or replaced between open and flock: lock the file there now
			continue
		}
		o.lock = f
		forkHook(int(f.Fd()), true)
		return nil
	}
	return fmt.Errorf("locking %s: its lock file %s keeps being replaced", o.path, name)
}

// check makes sure the owner's lock file is still the file at its path: when it was deleted or
// replaced (a cleanup script, a user), it locks the file at the path again, so that the next
// process is told who owns the database. It fails (a *LockedError) when another process holds
// that file: ownership is lost, and the store must not write any more.
func (o *ownerLock) check() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lock == nil || samePath(o.lock, o.path+".lock") {
		return nil
	}
	old := o.lock
	if err := o.takeLockFile(); err != nil {
		o.lock = old
		if o.db == nil {
			return err // no database lock (not Linux): the other process may own the database now
		}
		return nil // the database byte lock still makes this process the owner
	}
	o.writeHolder()
	forkHook(int(old.Fd()), false)
	old.Close()
	return nil
}

func (o *ownerLock) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.db != nil {
		forkHook(int(o.db.Fd()), false)
		o.db.Close()
		o.db = nil
	}
	if o.lock != nil {
		forkHook(int(o.lock.Fd()), false)
		_ = syscall.Flock(int(o.lock.Fd()), syscall.LOCK_UN)
		o.lock.Close()
		o.lock = nil
	}
}

// samePath reports whether f is the file at name (same device and inode).
func samePath(f *os.File, name string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(name)
	if err != nil {
		return false
	}
	return os.SameFile(a, b)
}

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

func holderText() string {
	cmd := strings.Join(os.Args, " ")
	if len(cmd) > 200 {
		cmd = cmd[:200] + "…"
	}
	return fmt.Sprintf("pid %d (%s) since %s\n", os.Getpid(), cmd, time.Now().Format(time.RFC3339))
}
