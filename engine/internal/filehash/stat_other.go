//go:build !unix && !windows

package filehash

import (
	"io/fs"
	"os"
)

// devIno returns 0, 0: the OS does not say (Same then compares size and modification time
// only).
func devIno(fs.FileInfo) (dev, ino uint64) { return 0, 0 }

// openFile opens p to read it.
func openFile(p string) (*os.File, error) { return os.Open(p) }
