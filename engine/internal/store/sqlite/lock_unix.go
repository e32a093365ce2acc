//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// lockOwner takes the exclusive owner lock of the database at path: an flock on path+".lock",
// held until release is called or the process ends (the kernel drops it on a crash or SIGKILL,
// so a dead owner never blocks the next one). The file says who holds it, for the error the
// next process reports. A lock held elsewhere returns a *LockedError at once, without waiting.
func lockOwner(path string) (release func(), err error) {
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the lock file of %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path + ".lock")
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Path: path, Holder: strings.TrimSpace(string(holder))}
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(holderText()), 0)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func holderText() string {
	cmd := strings.Join(os.Args, " ")
	if len(cmd) > 200 {
		cmd = cmd[:200] + "…"
	}
	return fmt.Sprintf("pid %d (%s) since %s\n", os.Getpid(), cmd, time.Now().Format(time.RFC3339))
}
