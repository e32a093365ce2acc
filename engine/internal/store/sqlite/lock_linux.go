//go:build linux

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// dbLockByte is the byte of the database file the owner write-locks: SQLite locks bytes
// 0x40000000 to 0x400001FF (PENDING_BYTE, RESERVED_BYTE, the SHARED range) and no page data
// lives at 0x40000000 (the lock-byte page), so this lock never meets SQLite's own. Locks are
// advisory: the byte need not exist.
const dbLockByte = 0x40000000 + 4096

// F_OFD_SETLK (Linux ≥ 3.15): a byte lock owned by the open file description, like flock, so a
// second open in the same process conflicts, and closing another descriptor of the file (as
// SQLite does) does not release it.
const fOFDSetLk = 37

// lockDBFile write-locks dbLockByte of the database file at path (creating the file, empty,
// when missing: SQLite takes an empty file as a new database). A lock held elsewhere is a
// *LockedError.
func lockDBFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, privateMode) // makePrivate sets the mode whatever the umask
	if err != nil {
		return nil, &FaultError{Path: path, Err: err} // a file or folder this process may not write
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: dbLockByte, Len: 1}
	if err := syscall.FcntlFlock(f.Fd(), fOFDSetLk, &lk); err != nil {
		f.Close()
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
			return nil, lockedError(path, "", true)
		}
		if errors.Is(err, syscall.EINVAL) {
			return nil, nil // a kernel without OFD locks: the lock file alone guards the database
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return f, nil
}
