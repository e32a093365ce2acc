//go:build unix || windows

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ownerLock is the exclusive owner lock of a database (see lockOwner).
type ownerLock struct {
	path string // the database file

	mu   sync.Mutex
	lock *os.File // path+".lock", locked (tryLockFile)
	db   *os.File // the database file with the byte lock of lockDBFile (Linux, Windows), or nil
}

// lockOwner takes the exclusive owner lock of the database at path, held until release is
// called or the process ends (the kernel drops it on a crash, SIGKILL or TerminateProcess, so a
// dead owner never blocks the next one). A lock held elsewhere returns a *LockedError at once,
// without waiting.
//
// The lock is two locks, both on open files (flock and an OFD byte lock on Unix, LockFileEx
// on Windows: lock_unix.go, lock_windows.go), so a second Engine of the same process on the
// same database is refused too:
//   - a lock on path+".lock", a file that says who holds it (for the next process's error):
//     its pid, program name and start time, never its arguments (they may hold a token). The
//     file is 0600 and release removes it (a crash leaves it: the next owner takes it over).
//     After taking it, the locked file must still be the one at that path (another process may
//     have deleted or replaced it in between); else the lock is taken again.
//   - on Linux and Windows, a lock on one byte of the database file itself, where SQLite never
//     locks (lockDBFile): deleting the lock file cannot hand the database to a second process.
//
// On Unix both descriptors are close-on-exec, and SetForkHook tells the C side to close them in
// a child forked without exec (a fork child holding them would keep the database locked after
// the owner is gone). Windows has no fork, its handles are not inherited, and its locks belong
// to the process that took them.
func lockOwner(path string) (release func(), check func() error, err error) {
	deadline := time.Now().Add(ownLockRetry)
	for {
		release, check, err = lockOwnerOnce(path)
		var le *LockedError
		if !errors.As(err, &le) || !le.maybeThisProcess() || time.Now().After(deadline) {
			return release, check, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ownLockRetry is how long lockOwner keeps trying a lock that this process itself may still
// hold: an engine of this process closed it a moment ago, but a child this process was forking
// at that instant (any thread starting a subprocess: a pool worker, a tool's command) shares the
// locked file descriptions until it execs and drops them. A lock another process holds fails at
// once.
const ownLockRetry = 500 * time.Millisecond

// maybeThisProcess reports whether the lock may be held by this process: the lock file names
// this process, or the database lock is held while this process holds the lock file.
func (e *LockedError) maybeThisProcess() bool {
	var pid int
	_, err := fmt.Sscanf(e.Holder, "pid %d", &pid)
	return e.LockFileLost || err == nil && pid == os.Getpid()
}

func lockOwnerOnce(path string) (release func(), check func() error, err error) {
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

// takeLockFile locks path+".lock" (the holder text is written by writeHolder).
func (o *ownerLock) takeLockFile() error {
	name := o.path + ".lock"
	for range 8 {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, privateMode)
		if err != nil {
			return fmt.Errorf("opening the lock file of %s: %w", o.path, err)
		}
		_ = f.Chmod(privateMode) // whatever the umask, or the mode an older dcc-flow gave it
		if held, err := tryLockFile(f); err != nil || !held {
			holder, _ := os.ReadFile(name)
			f.Close()
			if err != nil {
				return fmt.Errorf("locking %s: %w", o.path, err)
			}
			return lockedError(o.path, strings.TrimSpace(string(holder)), false)
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
		// Removed while still locked (where the platform allows it): a process that opened
		// the file meanwhile finds it gone once it gets the lock, and locks a new one.
		removed := removeLockFileHeld(o.lock, o.path+".lock")
		forkHook(int(o.lock.Fd()), false)
		unlockFile(o.lock)
		o.lock.Close()
		o.lock = nil
		if !removed {
			removeLockFileClosed(o.path + ".lock")
		}
	}
}

// samePath reports whether f is the file at name (same device and inode; on Windows, same
// volume serial number and file index).
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

// holderText is what the lock file says: "pid 1234 (python3 dcc-flow) since 2026-11-23T10:02:00Z".
// It names the program (and the script it runs, when its first argument is a file), never the
// other arguments: a command line may hold a token (dcc-flow serve --token).
func holderText() string {
	return fmt.Sprintf("pid %d (%s) since %s\n", os.Getpid(), programName(os.Args), time.Now().Format(time.RFC3339))
}

// programName is the base name of args[0], and of args[1] when that is a file (a script: python3
// dcc-flow); "?" without arguments.
func programName(args []string) string {
	if len(args) == 0 || args[0] == "" {
		return "?"
	}
	name := filepath.Base(args[0])
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		if fi, err := os.Stat(args[1]); err == nil && fi.Mode().IsRegular() {
			name += " " + filepath.Base(args[1])
		}
	}
	return strings.Map(func(r rune) rune { // the text goes into error messages: no control characters
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, name)
}
