package filehash

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/zeebo/blake3"
)

// write creates dir/name with data, its modification time an hour ago (not racy), and returns
// its path.
func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	return p
}

func blake3Of(data []byte) string {
	sum := blake3.Sum256(data)
	return HashPrefix + hex.EncodeToString(sum[:])
}

func TestHashFileOK(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*BufferSize/16+7) // several buffers and a tail
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		// The BLAKE3 test vectors of the empty input and "abc".
		{"empty", nil, "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"},
		{"abc", []byte("abc"), "blake3:6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"},
		{"one buffer", bytes.Repeat([]byte{7}, BufferSize), blake3Of(bytes.Repeat([]byte{7}, BufferSize))},
		{"big", big, blake3Of(big)},
	} {
		p := write(t, dir, tc.name, tc.data)
		r := HashFile(context.Background(), p)
		if r.State != StateOK || r.Hash != tc.want || r.Err != "" {
			t.Errorf("%s: HashFile = %+v, want ok %s", tc.name, r, tc.want)
		}
		if r.Path != p || r.Size != int64(len(tc.data)) || r.ModTime == 0 || !r.Mode.IsRegular() || r.Racy {
			t.Errorf("%s: Info = %+v", tc.name, r.Info)
		}
	}
}

func TestHashFileFollowsSymlinksAndCleans(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := write(t, dir, "a.usd", []byte("abc"))
	link := filepath.Join(dir, "link.usd")
	symlink(t, "a.usd", link)
	r := HashFile(context.Background(), dir+"/sub/../link.usd")
	if r.State != StateOK || r.Hash != blake3Of([]byte("abc")) || r.Path != link {
		t.Errorf("HashFile(link) = %+v", r)
	}
	info, err := Stat(link)
	if err != nil || info.Path != link || info.Size != 3 {
		t.Errorf("Stat(link) = %+v, %v", info, err)
	}
	target, _ := Stat(p)
	if !info.Same(target) {
		t.Errorf("a symlink's Info %+v is not Same as its target's %+v", info, target)
	}
}

func TestHashFileRacy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "fresh.usd")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := HashFile(context.Background(), p); r.State != StateOK || !r.Racy {
		t.Errorf("a file written just now: %+v, want ok and Racy", r)
	}
	future := time.Now().Add(time.Hour) // a file server's clock ahead of ours
	if err := os.Chtimes(p, future, future); err != nil {
		t.Fatal(err)
	}
	if r := HashFile(context.Background(), p); !r.Racy {
		t.Errorf("a file modified in the future: %+v, want Racy", r)
	}
	old := time.Now().Add(-RacyWindow - time.Second)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if r := HashFile(context.Background(), p); r.State != StateOK || r.Racy {
		t.Errorf("a file modified %v ago: %+v, want ok and not Racy", RacyWindow+time.Second, r)
	}
}

// TestHashFileStates covers every State but ok, each with the reason in Err.
func TestHashFileStates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := write(t, dir, "f.usd", []byte("abc"))
	if err := os.Mkdir(filepath.Join(dir, "d.usd"), 0o755); err != nil {
		t.Fatal(err)
	}
	type stateCase struct {
		name, path string
		state      State
		err        string // in Err
	}
	cases := []stateCase{
		{"missing", filepath.Join(dir, "none.usd"), StateMissing, "no such file: check the path"},
		{"under a file", filepath.Join(file, "x.usd"), StateMissing, "no such file"},
		{"directory", filepath.Join(dir, "d.usd"), StateUnreadable, "a directory: name the files in it, or a glob such as " + filepath.Join(dir, "d.usd") + string(os.PathSeparator) + "**"},
		{"empty path", "", StateUnreadable, "empty path"},
	}
	if noLinks() == "" {
		symlink(t, "nowhere.usd", filepath.Join(dir, "dangling.usd"))
		symlink(t, "loop2", filepath.Join(dir, "loop1"))
		symlink(t, "loop1", filepath.Join(dir, "loop2"))
		cases = append(cases,
			stateCase{"dangling symlink", filepath.Join(dir, "dangling.usd"), StateMissing, "a symlink to nowhere.usd, which does not exist"},
			stateCase{"symlink loop", filepath.Join(dir, "loop1"), StateUnreadable, "a symlink loop"})
		if _, err := Stat(filepath.Join(dir, "loop1")); err == nil || !strings.Contains(err.Error(), "symlink loop") {
			t.Errorf("Stat(loop) = %v, want a symlink loop error", err)
		}
	}
	for _, tc := range cases {
		r := HashFile(context.Background(), tc.path)
		if r.State != tc.state || r.Hash != "" || !strings.Contains(r.Err, tc.err) {
			t.Errorf("%s: HashFile = %+v, want %s with %q", tc.name, r, tc.state, tc.err)
		}
		if tc.path != "" && !strings.Contains(r.Err, tc.path) {
			t.Errorf("%s: Err %q does not name the path", tc.name, r.Err)
		}
	}
	if _, err := Stat(filepath.Join(dir, "none.usd")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(missing) = %v, want fs.ErrNotExist", err)
	}
}

// TestRedteamFileChangingWhileHashed changes the file at fixed points of the hash (hooks: no timing), each
// change an unstable result without a hash.
func TestRedteamFileChangingWhileHashed(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("x"), 2*BufferSize+1)
	// On Windows a file removed while open keeps its name until it is closed, and a rename over an
	// open file is refused (Wine 8; Windows without POSIX semantics): the path cannot change while
	// the file is hashed.
	const notOnWindows = "Windows keeps the path of an open file: a removal takes effect at the close, a rename over it is refused"
	for _, tc := range []struct {
		name    string
		change  func(t *testing.T, p string) hooks
		err     string
		windows string // why the case cannot happen on Windows, or ""
	}{
		{"appended while read", func(t *testing.T, p string) hooks {
			return hooks{afterRead: func() { appendTo(t, p, "more") }}
		}, "changed size", ""},
		{"appended before read", func(t *testing.T, p string) hooks {
			return hooks{afterOpen: func() { appendTo(t, p, "more") }}
		}, "grew past its size", ""},
		{"truncated before read", func(t *testing.T, p string) hooks {
			return hooks{afterOpen: func() {
				if err := os.Truncate(p, 10); err != nil {
					t.Error(err)
				}
			}}
		}, "bytes at its stat and 10 when read", ""},
		{"touched while read", func(t *testing.T, p string) hooks {
			return hooks{afterRead: func() {
				now := time.Now()
				if err := os.Chtimes(p, now, now); err != nil {
					t.Error(err)
				}
			}}
		}, "changed modification time", ""},
		{"rewritten in place, same size", func(t *testing.T, p string) hooks {
			return hooks{afterRead: func() {
				f, err := os.OpenFile(p, os.O_WRONLY, 0)
				if err != nil {
					t.Error(err)
					return
				}
				f.WriteAt([]byte("y"), 5) //nolint:errcheck
				f.Close()
			}}
		}, "changed modification time", ""},
		{"replaced by rename while read", func(t *testing.T, p string) hooks {
			return hooks{afterRead: func() {
				other := p + ".new"
				if err := os.WriteFile(other, data, 0o644); err != nil {
					t.Error(err)
				}
				if err := os.Rename(other, p); err != nil {
					t.Error(err)
				}
			}}
		}, "replaced", notOnWindows},
		{"replaced between stat and open", func(t *testing.T, p string) hooks {
			return hooks{afterStat: func() {
				other := p + ".new"
				if err := os.WriteFile(other, data, 0o644); err != nil {
					t.Error(err)
				}
				if err := os.Rename(other, p); err != nil {
					t.Error(err)
				}
			}}
		}, "between its stat and its open", ""},
		{"removed while read", func(t *testing.T, p string) hooks {
			return hooks{afterRead: func() {
				if err := os.Remove(p); err != nil {
					t.Error(err)
				}
			}}
		}, "removed or renamed while it was hashed", notOnWindows},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.windows != "" && runtime.GOOS == "windows" {
				t.Skip(tc.windows)
			}
			p := write(t, t.TempDir(), "f.usd", data)
			h := tc.change(t, p)
			r := hashFile(context.Background(), p, &h)
			if r.State != StateUnstable || r.Hash != "" || !strings.Contains(r.Err, tc.err) || !strings.Contains(r.Err, p) {
				t.Errorf("HashFile = %+v, want unstable with %q", r, tc.err)
			}
			if r.Size != int64(len(data)) {
				t.Errorf("Info.Size = %d, want the stat before reading (%d)", r.Size, len(data))
			}
		})
	}
}

func appendTo(t *testing.T, p, s string) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Error(err)
	}
}

func TestRedteamFileVanishedBeforeOpen(t *testing.T) {
	t.Parallel()
	p := write(t, t.TempDir(), "f.usd", []byte("abc"))
	r := hashFile(context.Background(), p, &hooks{afterStat: func() {
		if err := os.Remove(p); err != nil {
			t.Error(err)
		}
	}})
	if r.State != StateMissing || r.Hash != "" || !strings.Contains(r.Err, "vanished between its stat and its open") || r.Size != 3 {
		t.Errorf("HashFile = %+v, want missing (vanished) with the first stat", r)
	}
}

func TestHashFileCanceled(t *testing.T) {
	t.Parallel()
	p := write(t, t.TempDir(), "f.usd", bytes.Repeat([]byte("x"), 3*BufferSize))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := hashFile(ctx, p, &hooks{afterOpen: cancel})
	if r.State != StateUnreadable || r.Hash != "" || !strings.Contains(r.Err, "canceled after 0 of") {
		t.Errorf("HashFile(canceled) = %+v", r)
	}
	// Canceled after the first buffer: checked per buffer.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	r = hashFile(ctx2, p, &hooks{afterBuffer: func(total int64) { cancel2() }})
	if r.State != StateUnreadable || !strings.Contains(r.Err, fmt.Sprintf("canceled after %d of %d bytes", BufferSize, 3*BufferSize)) {
		t.Errorf("HashFile(canceled after a buffer) = %+v", r)
	}
}

func TestRecheckStatCache(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := write(t, dir, "in.usd", []byte("version 1"))
	ctx := context.Background()
	rec := HashFile(ctx, p)
	if rec.State != StateOK || rec.Racy {
		t.Fatalf("HashFile = %+v", rec)
	}
	// The content changes but size, modification time, device and inode are kept (a write
	// in place with the time set back): Recheck trusts the stat and does not read the file,
	// which is how this test tells it did not.
	if err := os.WriteFile(p, []byte("version 2"), 0o644); err != nil {
		t.Fatal(err)
	}
	mt := rec.Modified()
	if err := os.Chtimes(p, mt, mt); err != nil {
		t.Fatal(err)
	}
	if r := Recheck(ctx, p, rec); r.State != StateOK || r.Hash != rec.Hash || !r.Same(rec.Info) {
		t.Errorf("Recheck of an unchanged stat = %+v, want the recorded hash %s", r, rec.Hash)
	}
	v2 := blake3Of([]byte("version 2"))
	for _, tc := range []struct {
		name     string
		recorded func() Result
	}{
		{"racy", func() Result { r := rec; r.Racy = true; return r }},
		{"recorded unstable", func() Result { r := rec; r.State = StateUnstable; return r }},
		{"recorded without hash", func() Result { r := rec; r.Hash = ""; return r }},
		{"other size", func() Result { r := rec; r.Size++; return r }},
		{"other mtime", func() Result { r := rec; r.ModTime++; return r }},
		{"other inode", func() Result { r := rec; r.Ino++; return r }},
		{"other device", func() Result { r := rec; r.Dev++; return r }},
	} {
		if r := Recheck(ctx, p, tc.recorded()); r.State != StateOK || r.Hash != v2 {
			t.Errorf("Recheck (%s) = %+v, want the file hashed again (%s)", tc.name, r, v2)
		}
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if r := Recheck(ctx, p, rec); r.State != StateMissing || r.Hash != "" {
		t.Errorf("Recheck of a removed file = %+v, want missing", r)
	}
	// A directory where the file was, with a stat that happens to match, is not trusted.
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	d, _ := Stat(p)
	fake := rec
	fake.Info = d
	if r := Recheck(ctx, p, fake); r.State != StateUnreadable {
		t.Errorf("Recheck of a directory = %+v, want unreadable", r)
	}
}

func TestHashFilesInOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var paths, want []string
	for i := range 20 {
		data := bytes.Repeat([]byte{byte(i)}, i*1000)
		paths = append(paths, write(t, dir, "f"+string(rune('a'+i)), data))
		want = append(want, blake3Of(data))
	}
	paths = append(paths, filepath.Join(dir, "none"))
	want = append(want, "")
	for _, workers := range []int{-1, 0, 1, 2, 3, 100} {
		got := HashFiles(context.Background(), paths, workers)
		if len(got) != len(paths) {
			t.Fatalf("workers %d: %d results for %d paths", workers, len(got), len(paths))
		}
		for i, r := range got {
			if r.Path != paths[i] || r.Hash != want[i] {
				t.Errorf("workers %d: result %d = %+v, want %s %s", workers, i, r, paths[i], want[i])
			}
		}
		if got[len(got)-1].State != StateMissing {
			t.Errorf("workers %d: last = %+v, want missing", workers, got[len(got)-1])
		}
	}
	if got := HashFiles(context.Background(), nil, 4); len(got) != 0 {
		t.Errorf("HashFiles(nil) = %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, r := range HashFiles(ctx, paths[:3], 2) {
		if r.State != StateUnreadable || !strings.Contains(r.Err, "canceled") {
			t.Errorf("HashFiles(canceled) result %+v, want unreadable (canceled)", r)
		}
	}
}

// TestIsRacyEdges: the racy rule at its edge values, in nanoseconds.
func TestIsRacyEdges(t *testing.T) {
	t.Parallel()
	const read = int64(1_800_000_000_000_000_000)
	w := int64(RacyWindow)
	for _, tc := range []struct {
		name          string
		modTime, read int64
		racy          bool
	}{
		{"modified exactly RacyWindow before the read", read - w, read, false},
		{"modified RacyWindow and 1 ns before", read - w - 1, read, false},
		{"modified RacyWindow less 1 ns before", read - w + 1, read, true},
		{"modified at the read", read, read, true},
		{"modified after the read (a clock ahead)", read + 1, read, true},
		{"a modification time of 0, read long after", 0, read, false},
		{"read at an unknown time (0)", 0, 0, true},
		{"read at a negative time", -10 * w, -1, true},
	} {
		if got := IsRacy(tc.modTime, tc.read); got != tc.racy {
			t.Errorf("%s: IsRacy(%d, %d) = %v; want %v", tc.name, tc.modTime, tc.read, got, tc.racy)
		}
	}
}

// TestHashFileReadAt: ReadAt is the wall clock before the read's stat, and Racy is IsRacy of
// the file's modification time and ReadAt, to the nanosecond at the window's edge; Recheck's
// answer from a stat keeps the recorded ReadAt. Not parallel: it sets the clock hook.
func TestHashFileReadAt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.usd")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	mod := time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)
	if err := os.Chtimes(p, mod, mod); err != nil {
		t.Fatal(err)
	}
	info, err := Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	mod = time.Unix(0, info.ModTime) // as precise as the file system keeps it
	defer func() { wallNow = time.Now }()
	for _, tc := range []struct {
		at   time.Time
		racy bool
	}{
		{mod.Add(RacyWindow - time.Nanosecond), true},
		{mod.Add(RacyWindow), false},
	} {
		wallNow = func() time.Time { return tc.at }
		r := HashFile(context.Background(), p)
		if r.State != StateOK || r.ReadAt != tc.at.UnixNano() || r.Racy != tc.racy {
			t.Errorf("read %v after the modification: %+v; want ok, ReadAt %d, Racy %v", tc.at.Sub(mod), r, tc.at.UnixNano(), tc.racy)
		}
		if tc.racy {
			continue
		}
		again := Recheck(context.Background(), p, r)
		if again.Hash != r.Hash || again.ReadAt != r.ReadAt || again.Racy {
			t.Errorf("Recheck from the stat = %+v; want the hash and ReadAt of %+v", again, r)
		}
	}
}
