//go:build !unix

package filehash

import (
	"io/fs"
	"os"
)

// devIno returns 0, 0: the OS does not say without opening the file (Same then compares size
// and modification time only).
func devIno(fs.FileInfo) (dev, ino uint64) { return 0, 0 }

// openFlags: Windows has no FIFO a path could name (named pipes are device paths, which Clean
// refuses).
const openFlags = os.O_RDONLY
