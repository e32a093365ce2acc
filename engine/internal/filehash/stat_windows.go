//go:build windows

package filehash

import (
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// devIno returns 0, 0: Windows says a file's volume and index only through an open handle
// (GetFileInformationByHandle), which Stat does not have; Same then compares size and
// modification time only.
func devIno(fs.FileInfo) (dev, ino uint64) { return 0, 0 }

// openFile opens p (cleaned, absolute) to read it, sharing read, write and delete: os.Open does
// not share delete, so a DCC removing the file (or, with POSIX semantics, saving over it) would
// be refused while it is hashed. Here it is not, and where the path changes the stat after
// reading sees it (unstable). Windows has no FIFO a path could name (named pipes are device
// paths, which Clean refuses).
func openFile(p string) (*os.File, error) {
	var long string // the \\?\ form lifts MAX_PATH; p is clean and absolute, as it requires
	if strings.HasPrefix(p, `\\`) {
		long = `\\?\UNC\` + p[2:]
	} else {
		long = `\\?\` + p
	}
	name, err := syscall.UTF16PtrFromString(long)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	h, err := syscall.CreateFile(name, syscall.GENERIC_READ,
		syscall.FILE_SHARE_READ|syscall.FILE_SHARE_WRITE|syscall.FILE_SHARE_DELETE,
		nil, syscall.OPEN_EXISTING, syscall.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(h), p), nil
}
