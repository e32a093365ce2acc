package sqlite

import (
	"io/fs"
	"os"
)

// privateMode is the mode of the files of a database this package creates: the database, its
// -wal and -shm (SQLite gives them the database's mode) and its .lock file. They hold every
// run's inputs and outputs, so only the account that runs dcc-flow may read them
// (docs/operations/running.md, "Security").
const privateMode fs.FileMode = 0o600

// makePrivate sets the modes of the database at path before SQLite opens it, whatever the
// umask: a missing or empty database file (a new database) is created or set 0600; one that
// every account may access (other bits set: the 0644 older dcc-flow versions created) is set
// 0600; one shared with a group on purpose (0640) keeps its mode. Its -wal and -shm files are
// given no permission the database lacks. Failures are ignored (a file of another account,
// a file system without modes): the open that follows reports what matters.
func makePrivate(path string) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, privateMode)
	if err == nil {
		_ = f.Chmod(privateMode) // the umask may have removed the owner's bits
		f.Close()
	}
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	mode := fi.Mode().Perm()
	if fi.Size() == 0 || mode&0o007 != 0 {
		if os.Chmod(path, privateMode) == nil {
			mode = privateMode
		}
	}
	for _, side := range []string{path + "-wal", path + "-shm"} {
		if si, err := os.Stat(side); err == nil && si.Mode().Perm()&^mode != 0 {
			_ = os.Chmod(side, si.Mode().Perm()&mode)
		}
	}
}
