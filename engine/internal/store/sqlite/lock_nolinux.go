//go:build unix && !linux

package sqlite

import "os"

// lockDBFile does nothing where there are no OFD locks (macOS, the BSDs): the lock file alone
// guards the database, and an owner whose lock file is replaced finds out at its next write.
func lockDBFile(path string) (*os.File, error) { return nil, nil }
