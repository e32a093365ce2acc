//go:build windows

package sqlite

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/windows"
)

// winLockOffset is the byte both owner locks take, in the lock file and in the database file.
// Windows byte locks are mandatory: no other handle may read or write a locked byte, not even
// one of the same process (SQLite's). So the byte lies past the end of any file: SQLite
// databases stop at 2^48 bytes (2^32 pages of 64 KiB) and the holder text is a line long.
// Locking past the end of a file is allowed, and SQLite's own locks (0x40000000 to
// 0x400001FF) are far from it.
const winLockOffset = 1 << 62

// tryLockFile takes an exclusive byte lock (LockFileEx) on f without waiting: held is false
// when another handle holds it. The lock belongs to this handle: a second open of the file in
// the same process is refused too, and Windows drops it when the handle is closed or the
// process ends.
func tryLockFile(f *os.File) (held bool, err error) {
	ol := windows.Overlapped{Offset: uint32(winLockOffset & 0xffffffff), OffsetHigh: uint32(winLockOffset >> 32)}
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, windows.ERROR_LOCK_VIOLATION), errors.Is(err, windows.ERROR_IO_PENDING):
		return false, nil
	}
	return false, err
}

func unlockFile(f *os.File) {
	ol := windows.Overlapped{Offset: uint32(winLockOffset & 0xffffffff), OffsetHigh: uint32(winLockOffset >> 32)}
	_ = windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &ol)
}

// lockDBFile locks winLockOffset of the database file at path (creating the file, empty, when
// missing: SQLite takes an empty file as a new database). The handle shares reading and
// writing, as SQLite's do. A lock held elsewhere is a *LockedError.
//
// On Windows an open file cannot be deleted or renamed unless every handle allows it, and
// neither Go nor SQLite allows it: while the owner runs, deleting flow.db or flow.db.lock fails
// ("The process cannot access the file because it is being used by another process"), so the
// lock file is always the owner's. This lock still guards the database should a file system
// behave otherwise (a network share).
func lockDBFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, privateMode)
	if err != nil {
		return nil, &FaultError{Path: path, Err: err} // a file or folder this process may not write
	}
	held, err := tryLockFile(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if !held {
		f.Close()
		return nil, lockedError(path, "", true)
	}
	return f, nil
}

// lockedError is the *LockedError for a database whose lock is held. Windows drops the locks
// of a process when it ends and child processes do not inherit them, so the holder the lock
// file names is alive (HolderExited is never set), and which processes have a file open is not
// looked up (Others stays empty).
func lockedError(path, holder string, lockFileLost bool) *LockedError {
	if lockFileLost {
		return &LockedError{Path: path, LockFileLost: true}
	}
	return &LockedError{Path: path, Holder: holder}
}

// removeLockFileHeld cannot remove an open file on Windows: removeLockFileClosed does, once
// closed.
func removeLockFileHeld(*os.File, string) bool { return false }

// removeLockFileClosed removes the lock file after its owner closed it; it fails, harmlessly,
// when another process has it open already (Windows refuses to delete an open file).
func removeLockFileClosed(name string) { _ = os.Remove(name) }
