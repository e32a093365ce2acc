package exec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/filehash"
)

// hashAll reads what it must, in the order of the paths asked, whether it reads them on its own
// goroutine (a few small files) or on several (parallelHashBytes and more to read); a missing
// file is missing either way.
func TestHashAllSmallAndLargeSetsAgreeWithHashFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, size int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Repeat(name[:1], size)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	small := []string{write("a", 10), filepath.Join(dir, "missing"), write("b", 100)}
	large := []string{write("c", 2<<20), write("d", 2<<20), filepath.Join(dir, "gone"), write("e", 1<<20), write("f", 5)}
	for name, paths := range map[string][]string{"small": small, "large": large} {
		var c hashCache
		got := c.hashAll(context.Background(), paths, nil, nil)
		for i, p := range paths {
			want := filehash.HashFile(context.Background(), p)
			if got[i].Path != p || got[i].State != want.State || got[i].Hash != want.Hash {
				t.Errorf("%s: hashAll[%d] = %s %s %q; want %s %q", name, i, got[i].Path, got[i].State, got[i].Hash, want.State, want.Hash)
			}
		}
	}
}

// A trusted hash (not racy) whose stat is unchanged is not read again; the stat the caller
// gives stands for the file's; a racy hash is read again, and a hash whose stat moved is too.
func TestHashAllTrustsAStatOnlyWhereItMay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "in.usda")
	if err := os.WriteFile(p, []byte("#usda 1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	info, err := filehash.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	fake := filehash.Result{Info: info, State: filehash.StateOK, Hash: "blake3:" + strings.Repeat("0", 64)} // not its hash
	real := filehash.HashFile(context.Background(), p).Hash
	ctx := context.Background()
	var c hashCache
	if got := c.hashAll(ctx, []string{p}, []*filehash.Result{&fake}, nil)[0]; got.Hash != fake.Hash {
		t.Errorf("a trusted hash with its stat unchanged = %q; want it trusted, unread (%q)", got.Hash, fake.Hash)
	}
	racy := fake
	racy.Racy = true
	var c2 hashCache
	if got := c2.hashAll(ctx, []string{p}, []*filehash.Result{&racy}, nil)[0]; got.Hash != real {
		t.Errorf("a racy hash = %q; want the file read again (%q)", got.Hash, real)
	}
	moved := info
	moved.Size++
	var c3 hashCache
	if got := c3.hashAll(ctx, []string{p}, []*filehash.Result{&fake}, map[string]filehash.Info{p: moved})[0]; got.Hash != real {
		t.Errorf("a trusted hash whose given stat moved = %q; want the file read again (%q)", got.Hash, real)
	}
	var c4 hashCache
	if got := c4.hashAll(ctx, []string{p}, []*filehash.Result{&fake}, map[string]filehash.Info{p: info})[0]; got.Hash != fake.Hash {
		t.Errorf("a trusted hash whose given stat is unchanged = %q; want it trusted (%q)", got.Hash, fake.Hash)
	}
	// The cache remembers what it read: the next check of the file trusts it.
	if got := c2.hashAll(ctx, []string{p}, nil, nil)[0]; got.Hash != real {
		t.Errorf("the cache's hash = %q; want %q", got.Hash, real)
	}
}
