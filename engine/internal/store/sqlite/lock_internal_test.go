//go:build linux

package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Deleting <db>.lock while its owner runs does not let a second owner in (it would mark the
// first owner's live runs interrupted and race it for event sequence numbers), and the owner
// notices at its next write: it locks a new lock file that names it again.
func TestRedteamDeletedLockFileKeepsOwner(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	a, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := os.Remove(path + ".lock"); err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, path)
	var le *LockedError
	if err == nil {
		b.Close()
		t.Fatal("a second owner opened the database after its lock file was deleted")
	}
	if !errors.As(err, &le) || !le.LockFileLost || !strings.Contains(err.Error(), "lock file") {
		t.Fatalf("second owner: %v", err)
	}
	// The owner's next write puts a lock file naming it back.
	now := time.Now()
	if err := a.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r1", SpecJSON: []byte(`{}`), Status: run.StatusRunning, CreatedAt: now}}}); err != nil {
		t.Fatalf("the owner's write after its lock file was deleted: %v", err)
	}
	text, err := os.ReadFile(path + ".lock")
	if err != nil || !strings.HasPrefix(string(text), fmt.Sprintf("pid %d ", os.Getpid())) {
		t.Fatalf("lock file after the owner's write: %q, %v", text, err)
	}
	if _, err := Open(ctx, path); !errors.As(err, &le) || le.LockFileLost || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("a second owner once the lock file is back: %v", err)
	}
}

// An owner that finds its lock file taken by another process (an older dcc-flow that only
// locks the lock file) stops writing: its writes fail with code storage.
func TestRedteamOwnerLosingItsLockStopsWriting(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	a, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.unlock() // as if this platform had no database lock: the lock file alone guards it…
	o := &ownerLock{path: path}
	if err := o.takeLockFile(); err != nil { // …and another process took a new lock file
		t.Fatal(err)
	}
	defer o.release()
	lost := &ownerLock{path: path, lock: mustOpen(t, path+".lock.old")}
	a.checkLock = lost.check
	err = a.Write(ctx, &store.Batch{})
	var fe *FaultError
	if !errors.As(err, &fe) || !fe.Lost || run.CodeOf(err) != run.CodeStorage {
		t.Fatalf("write after losing the lock: %v", err)
	}
	if err := a.Write(ctx, &store.Batch{}); !errors.As(err, &fe) || !fe.Lost {
		t.Fatalf("the next write: %v", err)
	}
}

func mustOpen(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// When the process the lock file names has exited, the lock is held by a child it forked:
// the error says so instead of asking to stop a process that does not exist.
func TestRedteamLockHeldAfterOwnerExitedSaysSo(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	a, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Skip("no true(1) to get the pid of an exited process")
	}
	pid := gone.Process.Pid
	if err := os.WriteFile(path+".lock", []byte(fmt.Sprintf("pid %d (maya -batch) since 2026-11-25T03:00:00Z\n", pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, path)
	var le *LockedError
	if !errors.As(err, &le) || !le.HolderExited || !strings.Contains(err.Error(), "has exited") ||
		!strings.Contains(err.Error(), "fork") {
		t.Fatalf("lock held for an exited holder: %v", err)
	}
}

// A database lock this process let go of but a child still shares for a moment (a subprocess
// forked by another thread at that instant holds the locked descriptions until it execs) does
// not refuse the next Open of this process: it waits for it. A child that keeps it past
// ownLockRetry still gets the refusal.
func TestOpenWaitsForALockAChildStillShares(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flow.db")
	share := func(secs string) *exec.Cmd {
		t.Helper()
		f, err := lockDBFile(path)
		if err != nil || f == nil {
			t.Fatalf("lockDBFile: %v %v", f, err)
		}
		child := exec.Command("sleep", secs)
		child.ExtraFiles = []*os.File{f} // the child shares the locked description
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		f.Close() // this process lets go; the child still holds it
		return child
	}
	child := share("0.2")
	start := time.Now()
	release, _, err := lockOwner(path)
	if err != nil {
		t.Fatalf("lockOwner while a child shares a released lock for 0.2 s: %v", err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Fatalf("took the lock after %v, while the child still held it", waited)
	}
	release()
	_ = child.Wait()

	child = share("5")
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	_, _, err = lockOwner(path)
	var le *LockedError
	if !errors.As(err, &le) || !le.LockFileLost {
		t.Fatalf("lockOwner while a child keeps the lock = %v; want a LockedError", err)
	}
}
