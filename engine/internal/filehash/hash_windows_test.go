//go:build windows

package filehash

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHashFileLetsOthersRemoveTheFile: the file is opened sharing delete, so a DCC removing the
// file (or, with POSIX semantics, saving over it) while it is hashed is not refused, as it would
// be with os.Open.
func TestHashFileLetsOthersRemoveTheFile(t *testing.T) {
	t.Parallel()
	p := write(t, t.TempDir(), "f.usd", []byte("abc"))
	var removeErr error
	r := hashFile(context.Background(), p, &hooks{afterRead: func() { removeErr = os.Remove(p) }})
	if removeErr != nil {
		t.Errorf("removing the file while it was hashed: %v", removeErr)
	}
	if r.State != StateOK && r.State != StateUnstable {
		t.Errorf("HashFile = %+v, want ok (the name stays until the close) or unstable", r)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("after the hash the file is still there: %v", err)
	}
}

// TestHashFileLongPath: a path past MAX_PATH (260) is opened (the \\?\ form). Wine has no
// MAX_PATH, so only real Windows tells the prefix is needed.
func TestHashFileLongPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for len(dir) < 300 {
		dir = filepath.Join(dir, strings.Repeat("d", 40))
	}
	p := write(t, dir, "a.usd", []byte("abc"))
	if r := HashFile(context.Background(), p); r.State != StateOK || r.Hash != blake3Of([]byte("abc")) {
		t.Errorf("HashFile(%d characters) = %+v", len(p), r)
	}
}
