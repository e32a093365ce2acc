//go:build unix

package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlite"
)

// Red-team regression (issue 33, defect 4): `dcc-flow serve --token T` wrote its command line,
// token included, into <db>.lock, mode 0644, left after exit; the database and its WAL were
// 0644. Now the lock file names the process without its arguments, and the lock, database, -wal
// and -shm files are 0600 whatever the umask; a clean close removes the lock file.
func TestRedteamLockAndDatabaseFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0) // the most permissive umask: the modes must not come from it
	defer syscall.Umask(old)
	args := os.Args
	os.Args = append(append([]string{}, args...), "serve", "--token", "s3cr3t-t0ken-in-argv")
	defer func() { os.Args = args }()

	path := filepath.Join(t.TempDir(), "flow.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(path + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(text), "s3cr3t") || strings.Contains(string(text), "--token") || !strings.HasPrefix(string(text), "pid ") {
		t.Errorf("the lock file holds the command line: %q", text)
	}
	for _, suffix := range []string{".lock", "", "-wal", "-shm"} {
		fi, err := os.Stat(path + suffix)
		if err != nil {
			t.Errorf("%s: %v", suffix, err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("flow.db%s has mode %#o, want 0600", suffix, fi.Mode().Perm())
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".lock"); !os.IsNotExist(err) {
		t.Errorf("the lock file is left after a clean close: %v", err)
	}

	// A database an older dcc-flow left readable by every account is made private when opened
	// for writing; one shared with a group on purpose (0640) keeps its mode.
	for _, c := range []struct{ before, after os.FileMode }{{0o644, 0o600}, {0o640, 0o640}} {
		if err := os.Chmod(path, c.before); err != nil {
			t.Fatal(err)
		}
		s, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if fi, err := os.Stat(path + suffix); err == nil && fi.Mode().Perm() != c.after {
				t.Errorf("a database of mode %#o: flow.db%s is %#o after Open, want %#o", c.before, suffix, fi.Mode().Perm(), c.after)
			}
		}
		if fi, err := os.Stat(path + ".lock"); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("the lock file beside a database of mode %#o: %v %v", c.before, fi.Mode(), err)
		}
		s.Close()
	}
}
