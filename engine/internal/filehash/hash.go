package filehash

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zeebo/blake3"
)

// Info is what a stat tells of a file: enough to know it unchanged without reading it (Same).
type Info struct {
	// Path is the path as Clean returns it (the one asked for, not a symlink's target).
	Path string
	// Size in bytes.
	Size int64
	// ModTime is the modification time in nanoseconds since the Unix epoch, as precise as the
	// file system keeps it (1 ns on ext4, XFS, APFS and NTFS; 1 s on HFS+ and some NFS
	// servers; 2 s on FAT).
	ModTime int64
	// Dev and Ino are the device and inode (syscall.Stat_t); 0 on Windows and other OSes that
	// do not say without opening the file.
	Dev, Ino uint64
	// Mode is the mode of the file the path names, after following symlinks.
	Mode fs.FileMode
}

// Modified returns ModTime as a time.Time (UTC).
func (i Info) Modified() time.Time { return time.Unix(0, i.ModTime).UTC() }

// Same reports whether i and o describe the same unchanged file, as git's index does: size,
// modification time, device and inode all equal. Path and Mode are not compared. Where the OS
// gives no device and inode (0 in both), size and modification time decide alone.
func (i Info) Same(o Info) bool {
	return i.Size == o.Size && i.ModTime == o.ModTime && i.Dev == o.Dev && i.Ino == o.Ino
}

// State says what HashFile learnt of a file. Its values are those of store.FileState.
type State string

// States (store.FileOK, FileMissing, FileUnreadable, FileUnstable).
const (
	// StateOK: the file was read whole and did not change meanwhile; Result.Hash is set.
	StateOK State = "ok"
	// StateMissing: there is no file at the path (nor at a symlink's target), or it vanished
	// between the stat and the open.
	StateMissing State = "missing"
	// StateUnreadable: something is at the path but cannot be hashed: permission denied, a
	// directory, a symlink loop, a FIFO, a device or a socket, a read error; or the hash was
	// canceled. Result.Err says why.
	StateUnreadable State = "unreadable"
	// StateUnstable: the file changed while it was hashed (its size, modification time, device
	// or inode moved, at the path or in the open file): never hashed, never cached.
	StateUnstable State = "unstable"
)

// HashPrefix starts every Result.Hash: "blake3:" and then 64 lower-case hex digits (32 bytes).
const HashPrefix = "blake3:"

// RacyWindow is how close to its hashing a file's modification time may be before the stat
// cache stops trusting it (Result.Racy): longer than the coarsest timestamps of the file
// systems a studio uses (2 s on FAT, 1 s on HFS+ and some NFS servers).
const RacyWindow = 2 * time.Second

// BufferSize is the size of the buffer a file is streamed through: the memory one HashFile
// holds whatever the file's size (buffers are reused across calls).
const BufferSize = 256 << 10

// Result is what HashFile learnt of one file.
type Result struct {
	// Info is the stat taken before the file was read (Path alone when there was no file).
	Info
	State State
	// Hash is HashPrefix and 64 hex digits when State is StateOK, else "".
	Hash string
	// Err says why the file is missing, unreadable or unstable, naming the path and what to do;
	// "" when State is StateOK.
	Err string
	// Racy is true when the file was modified less than RacyWindow before it was stat'ed (or
	// after, by the clock of the machine that hashed): another write within the same timestamp
	// tick could leave size and modification time as they were, so Recheck hashes such a file
	// again instead of trusting the stat. It is git's "racily clean" entry: IsRacy(ModTime,
	// ReadAt).
	Racy bool
	// ReadAt is when the hash was read: the wall clock (Unix ns) just before the stat of the
	// read it comes from (HashFile's own; for a hash Recheck trusts without reading, the
	// recorded result's ReadAt). 0 when unknown, and when State is not StateOK.
	ReadAt int64
}

// IsRacy is the racy rule (git's "racily clean"): a hash read at readAt (Unix ns, the wall
// clock just before the read's stat) of a file modified at modTime (Unix ns) is racy — a stat
// equal to the one read then does not prove the content unchanged — unless the file was
// modified RacyWindow or more before the read: modTime <= readAt - RacyWindow. Edge values:
// exactly RacyWindow before is not racy; RacyWindow - 1 ns before is; a modification time
// after readAt (a file server's clock ahead) is; readAt <= 0 (unknown) is always racy.
//
// Why a read that is not racy lets a later equal stat stand for its hash: a write after the read
// gives the file a modification time of at least the read's time less one timestamp tick (2 s at
// the coarsest, FAT), which is after modTime; so while size, modification time, device and inode
// are as read (Info.Same), nothing wrote to the file since, up to the limits of Same
// (a modification time set back by hand).
func IsRacy(modTime, readAt int64) bool {
	return readAt <= 0 || modTime > readAt-int64(RacyWindow)
}

// hooks lets tests act at fixed points of a hash (nil in HashFile).
type hooks struct {
	afterStat   func()            // after the first stat, before the open
	afterOpen   func()            // after the open, before the first read
	afterBuffer func(total int64) // after each buffer hashed
	afterRead   func()            // after the last read, before the final fstat and stat
}

// wallNow is the clock of ReadAt (a test's hook).
var wallNow = time.Now

var bufPool = sync.Pool{New: func() any { b := make([]byte, BufferSize); return &b }}

// Stat stats the file at path (Clean'ed), following symlinks: Info describes the file the path
// leads to, under the path asked for. A missing file, a dangling symlink, a symlink loop (the
// OS's ELOOP: an error, never a hang) or a permission problem is an error naming the path and
// the fix; errors.Is(err, fs.ErrNotExist) tells a missing file. A directory is no error here
// (HashFile refuses it).
func Stat(path string) (Info, error) {
	p, err := Clean(path)
	if err != nil {
		return Info{Path: path}, err
	}
	info, _, err := stat(p)
	return info, err
}

// stat is Stat of a cleaned path, with the State a failure means.
func stat(p string) (Info, State, error) {
	fi, err := os.Stat(p)
	if err != nil {
		st, perr := describe(p, err)
		return Info{Path: p}, st, perr
	}
	return infoOf(p, fi), StateOK, nil
}

func infoOf(p string, fi fs.FileInfo) Info {
	dev, ino := devIno(fi)
	return Info{Path: p, Size: fi.Size(), ModTime: fi.ModTime().UnixNano(), Dev: dev, Ino: ino, Mode: fi.Mode()}
}

// pathError is an error of one path: what is wrong and what to do, wrapping the OS's error.
type pathError struct {
	path, reason, fix string
	err               error
}

func (e *pathError) Error() string {
	return e.path + ": " + e.reason + ": " + e.fix
}

func (e *pathError) Unwrap() error { return e.err }

// describe turns the error of a stat or an open of p into a State and an error naming p.
func describe(p string, err error) (State, error) {
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		if target, lerr := os.Readlink(p); lerr == nil {
			return StateMissing, &pathError{p, "a symlink to " + target + ", which does not exist", "create the target or fix the link", err}
		}
		return StateMissing, &pathError{p, "no such file", "check the path, or that the step wrote it", err}
	case errors.Is(err, syscall.ELOOP):
		return StateUnreadable, &pathError{p, "a symlink loop (too many levels of symbolic links)", "fix the links so that they lead to a file", err}
	case errors.Is(err, fs.ErrPermission):
		return StateUnreadable, &pathError{p, "permission denied", "let the engine's user read it (and search its directories)", err}
	}
	reason := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		reason = pe.Err.Error()
	}
	return StateUnreadable, &pathError{p, reason, "check the file and the file system it is on", err}
}

// kindError returns the error of a path whose mode is not a regular file's, or nil.
func kindError(p string, m fs.FileMode) error {
	var reason, fix string
	switch {
	case m.IsRegular():
		return nil
	case m.IsDir():
		reason, fix = "a directory", "name the files in it, or a glob such as "+p+string(os.PathSeparator)+"**"
	case m&fs.ModeNamedPipe != 0:
		reason, fix = "a named pipe (FIFO), which is never opened (it would wait for a writer)", "name a regular file"
	case m&fs.ModeSocket != 0:
		reason, fix = "a socket", "name a regular file"
	case m&fs.ModeDevice != 0:
		reason, fix = "a device", "name a regular file"
	default:
		reason, fix = "not a regular file (mode "+m.String()+")", "name a regular file"
	}
	return &pathError{path: p, reason: reason, fix: fix}
}

// HashFile hashes the file at path (Clean'ed; symlinks followed) with BLAKE3, streamed through
// one BufferSize buffer whatever its size. It stats the path, refuses what is not a regular
// file before opening it (a FIFO is never opened), opens it, reads it whole, then stats the open
// file and the path again: if the size, modification time, device or inode moved at any point,
// or the file grew past its size while read, the State is StateUnstable and there is no hash.
// A file that vanished before the open is StateMissing. ctx is checked before each buffer: when
// it ends the State is StateUnreadable with Err saying so (a caller that cancels discards the
// Result). HashFile never returns an error: Result.State and Result.Err say what happened.
func HashFile(ctx context.Context, path string) Result {
	return hashFile(ctx, path, nil)
}

func hashFile(ctx context.Context, path string, h *hooks) Result {
	p, err := Clean(path)
	if err != nil {
		return Result{Info: Info{Path: path}, State: StateUnreadable, Err: err.Error()}
	}
	fail := func(info Info, st State, err error) Result {
		return Result{Info: info, State: st, Err: err.Error()}
	}
	now := wallNow() // the file system's clock, not the engine's: a wall clock, not a clock.Clock
	pre, st, err := stat(p)
	if err != nil {
		return fail(pre, st, err)
	}
	if err := kindError(p, pre.Mode); err != nil {
		return fail(pre, StateUnreadable, err)
	}
	if h != nil && h.afterStat != nil {
		h.afterStat()
	}
	f, err := openFile(p)
	if err != nil {
		st, err := describe(p, err)
		if st == StateMissing {
			err = &pathError{p, "vanished between its stat and its open", "check what removes or renames it while the step's files are recorded", err}
		}
		return fail(pre, st, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return fail(pre, StateUnreadable, &pathError{p, "fstat: " + err.Error(), "check the file system", err})
	} else if d := diff(pre, infoOf(p, fi)); d != "" {
		return fail(pre, StateUnstable, unstable(p, d+" between its stat and its open"))
	}
	if h != nil && h.afterOpen != nil {
		h.afterOpen()
	}

	hasher := blake3.New()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return fail(pre, StateUnreadable, &pathError{p, fmt.Sprintf("hashing was canceled after %d of %d bytes (%v)", total, pre.Size, context.Cause(ctx)), "hash it again", err})
		}
		n, err := f.Read(buf)
		if n > 0 {
			total += int64(n)
			if total > pre.Size {
				return fail(pre, StateUnstable, unstable(p, fmt.Sprintf("grew past its size %d while it was read", pre.Size)))
			}
			hasher.Write(buf[:n]) //nolint:errcheck // never fails
			if h != nil && h.afterBuffer != nil {
				h.afterBuffer(total)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(pre, StateUnreadable, &pathError{p, "read error after " + fmt.Sprint(total) + " bytes: " + errText(err), "check the file and the file system it is on", err})
		}
	}
	if h != nil && h.afterRead != nil {
		h.afterRead()
	}
	if total != pre.Size {
		return fail(pre, StateUnstable, unstable(p, fmt.Sprintf("was %d bytes at its stat and %d when read", pre.Size, total)))
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(pre, StateUnreadable, &pathError{p, "fstat: " + err.Error(), "check the file system", err})
	}
	if d := diff(pre, infoOf(p, fi)); d != "" {
		return fail(pre, StateUnstable, unstable(p, d+" while it was read"))
	}
	post, _, err := stat(p)
	if err != nil {
		return fail(pre, StateUnstable, unstable(p, "was removed or renamed while it was hashed"))
	}
	if d := diff(pre, post); d != "" {
		return fail(pre, StateUnstable, unstable(p, d+" at its path while it was hashed"))
	}
	return Result{
		Info:   pre,
		State:  StateOK,
		Hash:   HashPrefix + hex.EncodeToString(hasher.Sum(nil)),
		Racy:   IsRacy(pre.ModTime, now.UnixNano()),
		ReadAt: now.UnixNano(),
	}
}

func unstable(p, what string) error {
	return &pathError{path: p, reason: "unstable: it " + what, fix: "record it once nothing writes to it any more (it is not cached meanwhile)"}
}

func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// diff says how b differs from a (size, modification time, device or inode), or "".
func diff(a, b Info) string {
	switch {
	case a.Dev != b.Dev || a.Ino != b.Ino:
		return fmt.Sprintf("was replaced by another file (device/inode %d/%d → %d/%d)", a.Dev, a.Ino, b.Dev, b.Ino)
	case a.Size != b.Size:
		return fmt.Sprintf("changed size (%d → %d bytes)", a.Size, b.Size)
	case a.ModTime != b.ModTime:
		return fmt.Sprintf("changed modification time (%s → %s)", a.Modified().Format(time.RFC3339Nano), b.Modified().Format(time.RFC3339Nano))
	case a.Mode.Type() != b.Mode.Type():
		return fmt.Sprintf("changed type (%s → %s)", a.Mode, b.Mode)
	}
	return ""
}

// Recheck is the stat cache: it stats path (Clean'ed) and, when recorded is a StateOK result
// that is not Racy and the stat is Same as recorded.Info, returns the recorded hash with the new
// stat (and the recorded ReadAt) WITHOUT reading the file. Otherwise (changed, missing, recorded not ok, or racy) it
// returns HashFile(ctx, path). Same compares size, modification time, device and inode: a
// change that keeps all four (a write within one timestamp tick after the hash, caught by Racy;
// a content change whose modification time was set back by hand, as `touch -d` or `cp -p` can)
// goes unseen, as in git.
func Recheck(ctx context.Context, path string, recorded Result) Result {
	if recorded.State == StateOK && recorded.Hash != "" && !recorded.Racy {
		if p, err := Clean(path); err == nil {
			if info, _, err := stat(p); err == nil && info.Mode.IsRegular() && info.Same(recorded.Info) {
				return Result{Info: info, State: StateOK, Hash: recorded.Hash, ReadAt: recorded.ReadAt}
			}
		}
	}
	return HashFile(ctx, path)
}

// HashFiles hashes paths (HashFile each) with workers goroutines at once (≤ 0: runtime.NumCPU;
// never more than len(paths)) and returns their results in the order of paths. Memory is one
// BufferSize buffer per worker. When ctx ends, the files not hashed yet are StateUnreadable
// with Err saying the hash was canceled.
func HashFiles(ctx context.Context, paths []string, workers int) []Result {
	out := make([]Result, len(paths))
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	if workers > len(paths) {
		workers = len(paths)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(paths) {
					return
				}
				out[i] = HashFile(ctx, paths[i])
			}
		}()
	}
	wg.Wait()
	return out
}
