package lineage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/filehash"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlite"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// BenchmarkStale: Stale over n recorded outputs on a SQLite file (the figure of
// docs/design/performance.md: 100,000 under 2 s), each output made by its own attempt from one
// of 1,000 inputs, every file real and unchanged (so each is stat'ed, none read). ms per Stale
// over all of them, and µs per output, which must stay flat from 1,000 to 100,000.
func BenchmarkStale(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("outputs=%d", n), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			s, err := sqlite.Open(ctx, filepath.Join(dir, "flow.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			recordOutputs(b, s, filepath.Join(dir, "files"), n)
			b.ResetTimer()
			for range b.N {
				got, err := Stale(ctx, s, CheckRecorded, nil)
				if err != nil || len(got) != 0 {
					b.Fatalf("stale %d %v", len(got), err)
				}
			}
			per := float64(b.Elapsed().Microseconds()) / float64(b.N)
			b.ReportMetric(per/1000, "ms/stale")
			b.ReportMetric(per/float64(n), "µs/output")
		})
	}
}

// recordOutputs writes n outputs and 1,000 inputs under dir, an hour old (not racy), and
// records them as n attempts of 100 runs, output i read from input i%1000.
func recordOutputs(b *testing.B, s *sqlite.Store, dir string, n int) {
	b.Helper()
	ctx := context.Background()
	old := time.Now().Add(-time.Hour)
	file := func(name string) store.FileRecord {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			b.Fatal(err)
		}
		h := filehash.HashFile(ctx, p)
		return store.FileRecord{Path: h.Path, State: store.FileOK, Size: h.Size, ModTime: h.Modified(), Dev: h.Dev, Ino: h.Ino,
			Hash: h.Hash, RecordedAt: time.Now(), VerifiedAt: time.Unix(0, h.ReadAt).UTC()}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	inputs := make([]store.FileRecord, 1000)
	for i := range inputs {
		inputs[i] = file(fmt.Sprintf("in%04d", i))
	}
	const runs = 100
	per := (n + runs - 1) / runs
	for r := 0; r < runs && r*per < n; r++ {
		id := fmt.Sprintf("r%03d", r)
		batch := &store.Batch{CreateRuns: []store.Run{{ID: id, Name: "bench", Status: run.StatusCompleted, SpecJSON: []byte("{}"),
			Inputs: []byte("{}"), CreatedAt: old, UpdatedAt: old}}}
		for i := r * per; i < min((r+1)*per, n); i++ {
			key := fmt.Sprintf("each[%d].out", i)
			in, out := inputs[i%len(inputs)], file(fmt.Sprintf("out%06d", i))
			in.RunID, in.StepKey, in.Attempt, in.Role = id, key, 1, store.FileRead
			out.RunID, out.StepKey, out.Attempt, out.Role = id, key, 1, store.FileWrite
			batch.Files = append(batch.Files, in, out)
		}
		if err := s.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
}
