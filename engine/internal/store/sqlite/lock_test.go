package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlite"
)

// TestLockHelperProcess is the child of TestSecondProcessIsRefusedUntilTheOwnerIsKilled: it
// owns the database named by DCCFLOW_LOCK_HELPER_DB, prints "owner", and waits to be killed.
func TestLockHelperProcess(t *testing.T) {
	path := os.Getenv("DCCFLOW_LOCK_HELPER_DB")
	if path == "" {
		t.Skip("helper process of TestSecondProcessIsRefusedUntilTheOwnerIsKilled")
	}
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	defer s.Close()
	fmt.Println("owner")
	time.Sleep(time.Minute)
	os.Exit(3)
}

// A second process is refused while the first owns the database (flock and an OFD lock on
// Linux, LockFileEx on Windows), told the owner's pid, and can read beside it; once the owner
// is killed (SIGKILL, TerminateProcess: no Close), the OS drops its locks and the next Open
// owns the database. The path has spaces (and, on Windows, a drive letter; the reader
// opens it with forward slashes).
func TestSecondProcessIsRefusedUntilTheOwnerIsKilled(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "Some User", "dcc flow")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "flow.db")
	if runtime.GOOS == "windows" && filepath.VolumeName(path) == "" {
		t.Fatalf("no drive letter in %s", path)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$")
	cmd.Env = append(os.Environ(), "DCCFLOW_LOCK_HELPER_DB="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "owner" {
		t.Fatalf("the helper did not open the database: %q", sc.Text())
	}

	var le *sqlite.LockedError
	_, err = sqlite.Open(ctx, path)
	if !errors.As(err, &le) || !strings.HasPrefix(le.Holder, fmt.Sprintf("pid %d ", cmd.Process.Pid)) ||
		!strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "open it read-only") {
		t.Fatalf("second owner while the helper owns %s: %v", path, err)
	}
	ro, err := sqlite.OpenReadOnly(ctx, filepath.ToSlash(path)) // C:/… on Windows
	if err != nil {
		t.Fatalf("read-only beside the owner: %v", err)
	}
	if _, err := ro.ListRuns(ctx, store.RunFilter{}); err != nil {
		t.Fatalf("read-only read: %v", err)
	}
	ro.Close()

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// Windows drops the locks of an ended process soon after it ends, not always at once.
	var s *sqlite.Store
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if s, err = sqlite.Open(ctx, path); err == nil || !errors.As(err, &le) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("opening after the owner was killed: %v", err)
	}
	s.Close()
}
