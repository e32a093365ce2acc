package filehash

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The figures of docs/design/filehash.md: go test -run '^$' -bench . ./engine/internal/filehash

// BenchmarkHashFile hashes one file in the page cache (written just before, then read once),
// on one core: MB/s is the hashing throughput with the reads.
func BenchmarkHashFile(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			data := make([]byte, size)
			rand.Read(data) //nolint:errcheck
			p := filepath.Join(b.TempDir(), "f.bin")
			if err := os.WriteFile(p, data, 0o644); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if r := HashFile(ctx, p); r.State != StateOK { // into the page cache
				b.Fatal(r.Err)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				if r := HashFile(ctx, p); r.State != StateOK {
					b.Fatal(r.Err)
				}
			}
		})
	}
}

// sparseFiles makes n sparse files of size bytes in dir (Truncate: no disk used), an hour old
// (not racy), and returns their paths.
func sparseFiles(tb testing.TB, dir string, n int, size int64) []string {
	tb.Helper()
	old := time.Now().Add(-time.Hour)
	paths := make([]string, n)
	for i := range paths {
		p := filepath.Join(dir, fmt.Sprintf("f%05d.bin", i))
		f, err := os.Create(p)
		if err != nil {
			tb.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			tb.Fatal(err)
		}
		f.Close()
		if err := os.Chtimes(p, old, old); err != nil {
			tb.Fatal(err)
		}
		paths[i] = p
	}
	return paths
}

// BenchmarkRecheck re-checks n unchanged 1 MiB files against their recorded results (the stat
// cache: one stat each, no read); ns/op is for all n files, ns/file the per-file cost, which
// must stay flat from 100 to 10,000 (goal: 10,000 under 1 s).
func BenchmarkRecheck(b *testing.B) {
	dir := b.TempDir()
	all := sparseFiles(b, dir, 10000, 1<<20)
	ctx := context.Background()
	recorded := HashFiles(ctx, all, 0)
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			b.ResetTimer()
			for range b.N {
				for i, p := range all[:n] {
					if r := Recheck(ctx, p, recorded[i]); r.Hash != recorded[i].Hash {
						b.Fatal(r)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/file")
		})
	}
}

// BenchmarkHashFiles hashes 64 files of 1 MiB in the page cache with 1 and 2 workers.
func BenchmarkHashFiles(b *testing.B) {
	dir := b.TempDir()
	data := make([]byte, 1<<20)
	rand.Read(data) //nolint:errcheck
	paths := make([]string, 64)
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("f%02d.bin", i))
		if err := os.WriteFile(paths[i], data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	HashFiles(ctx, paths, 0)
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			b.SetBytes(int64(len(paths) * len(data)))
			for range b.N {
				for _, r := range HashFiles(ctx, paths, workers) {
					if r.State != StateOK {
						b.Fatal(r.Err)
					}
				}
			}
		})
	}
}
