//go:build unix

package filehash

import (
	"io/fs"
	"os"
	"syscall"
)

// devIno returns the device and inode of fi (from syscall.Stat_t).
func devIno(fi fs.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino) //nolint:unconvert // int32 on darwin
	}
	return 0, 0
}

// openFile opens p to read it, without blocking: were a FIFO put at the path between the stat
// and the open, the open returns at once (and the fstat after it tells the change) instead of
// waiting for a writer. O_NONBLOCK changes nothing for a regular file.
func openFile(p string) (*os.File, error) {
	return os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
