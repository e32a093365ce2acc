//go:build unix

package filehash

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRedteamUnreadableKinds: what is not a regular file is unreadable, and never opened (a
// FIFO would block the open until a writer came: the test would hang, not fail).
func TestRedteamUnreadableKinds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.usd")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link-to-pipe.usd")
	if err := os.Symlink("pipe.usd", link); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, path, err string }{
		{"fifo", fifo, "a named pipe (FIFO), which is never opened"},
		{"symlink to a fifo", link, "a named pipe (FIFO)"},
	}
	if _, err := os.Stat("/dev/null"); err == nil {
		cases = append(cases, struct{ name, path, err string }{"device", "/dev/null", "a device: name a regular file"})
	}
	// A socket (its path must be short: sun_path is ~104 bytes).
	if sdir, err := os.MkdirTemp("", "fh"); err == nil {
		defer os.RemoveAll(sdir)
		sock := filepath.Join(sdir, "s")
		if l, err := net.Listen("unix", sock); err == nil {
			defer l.Close()
			cases = append(cases, struct{ name, path, err string }{"socket", sock, "a socket"})
		}
	}
	for _, tc := range cases {
		r := HashFile(context.Background(), tc.path)
		if r.State != StateUnreadable || r.Hash != "" || !strings.Contains(r.Err, tc.err) || !strings.Contains(r.Err, tc.path) {
			t.Errorf("%s: HashFile = %+v, want unreadable with %q", tc.name, r, tc.err)
		}
	}
}

// TestHashFilePermissionDenied needs a user the mode bits apply to: root reads a 000 file (the
// directory-as-file and FIFO cases above are the unreadable files that work as root).
func TestHashFilePermissionDenied(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("running as root, whom mode 000 does not stop: the unreadable state is covered by TestHashFileStates and TestRedteamUnreadableKinds")
	}
	dir := t.TempDir()
	p := write(t, dir, "secret.usd", []byte("abc"))
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	r := HashFile(context.Background(), p)
	if r.State != StateUnreadable || !strings.Contains(r.Err, "permission denied: let the engine's user read it") {
		t.Errorf("HashFile(mode 000) = %+v, want unreadable (permission denied)", r)
	}
	// A directory that cannot be searched.
	sub := write(t, dir, "locked/a.usd", []byte("abc"))
	if err := os.Chmod(filepath.Dir(sub), 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(filepath.Dir(sub), 0o755) //nolint:errcheck // so that TempDir can remove it
	r = HashFile(context.Background(), sub)
	if r.State != StateUnreadable || !strings.Contains(r.Err, "permission denied") {
		t.Errorf("HashFile(in a directory mode 000) = %+v, want unreadable (permission denied)", r)
	}
}

// TestRedteamFIFOSwappedInBeforeOpen: a FIFO put at the path between the stat (a regular file)
// and the open must not block the hash: the open does not wait for a writer, and the fstat
// after it sees another file.
func TestRedteamFIFOSwappedInBeforeOpen(t *testing.T) {
	t.Parallel()
	p := write(t, t.TempDir(), "f.usd", []byte("abc"))
	done := make(chan Result, 1)
	go func() {
		done <- hashFile(context.Background(), p, &hooks{afterStat: func() {
			if err := os.Remove(p); err != nil {
				t.Error(err)
			}
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Error(err)
			}
		}})
	}()
	select {
	case r := <-done:
		if r.State != StateUnstable || r.Hash != "" || !strings.Contains(r.Err, "between its stat and its open") {
			t.Errorf("HashFile = %+v, want unstable (replaced between stat and open)", r)
		}
	case <-time.After(30 * time.Second): // a watchdog, not an assertion on timing
		t.Fatal("HashFile blocked on a FIFO swapped in before its open")
	}
}

// TestRedteamSymlinkLoopDoesNotHang: a long chain and a loop of symlinks end with an error.
func TestRedteamSymlinkLoopDoesNotHang(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// a0 → a1 → … → a99 → a0
	for i := range 100 {
		if err := os.Symlink(filepath.Join(dir, "a"+strconv.Itoa((i+1)%100)), filepath.Join(dir, "a"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(".", filepath.Join(dir, "self")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "a0"), filepath.Join(dir, "a57")} {
		r := HashFile(context.Background(), p)
		if r.State != StateUnreadable || !strings.Contains(r.Err, "symlink loop") {
			t.Errorf("HashFile(%s) = %+v, want unreadable (symlink loop)", p, r)
		}
		if _, err := Stat(p); err == nil {
			t.Errorf("Stat(%s): no error", p)
		}
	}
	// dir/self/…/self (30 links, under Linux's 40 a lookup may follow) is the directory
	// itself, not a loop: unreadable as a directory.
	deep := dir + strings.Repeat("/self", 30)
	if r := HashFile(context.Background(), deep); r.State != StateUnreadable || !strings.Contains(r.Err, "a directory") {
		t.Errorf("HashFile(self/self/…) = %+v, want unreadable (a directory)", r)
	}
}
