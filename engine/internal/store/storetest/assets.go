package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/pathkey"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// AssetStore is a store with the Assets feature.
type AssetStore interface {
	store.Store
	store.Assets
}

// ExerciseAssets runs the suite of store.Assets: file records written with their run, step and
// attempt, read back whole, upserted by key (keeping their ID), selected by every FileFilter
// field alone and together, paged by AfterID and Limit, Under in POSIX and Windows form; cache
// entries upserted, expired at now, listed newest first, filtered and purged; and, when the
// store has them, Prune deleting a run's files and cache entries (store.Pruner) and Attempt.Env
// (store.AttemptLog). newStore must return a new, empty store for each call; the suite closes
// it. ExerciseAssetsVolume and ExerciseAssetsScale are the volume parts, apart so that a
// store's tests run them in tests of their own (make test runs those without -race, which
// instruments a Go database engine 20–50× slower; they check bounds, not concurrency).
func ExerciseAssets(t *testing.T, newStore func(t *testing.T) AssetStore) {
	t.Helper()
	open := func(t *testing.T) AssetStore {
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s AssetStore)
	}{
		{"FilesRoundTrip", testFilesRoundTrip},
		{"FilesAtomic", testFilesAtomic},
		{"FilesUpsert", testFilesUpsert},
		{"FilesConfirmed", testFilesConfirmed},
		{"FileFilters", testFileFilters},
		{"FilesPaging", testFilesPaging},
		{"FilesUnder", testFilesUnder},
		{"CacheEntries", testCacheEntries},
		{"CacheEntryFiles", testCacheEntryFiles},
		{"FilePatterns", testFilePatterns},
		{"CacheListAndPurge", testCacheListAndPurge},
		{"AssetsPruned", testAssetsPruned},
		{"AttemptEnv", testAttemptEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

func files(t *testing.T, s store.Assets, f store.FileFilter) []store.FileRecord {
	t.Helper()
	got, err := s.Files(context.Background(), f)
	if err != nil {
		t.Fatalf("Files(%+v): %v", f, err)
	}
	return got
}

// fileKey names a record in failure messages: "r1/a#1 write /x".
func fileKey(r store.FileRecord) string {
	return fmt.Sprintf("%s/%s#%d %s %s", r.RunID, r.StepKey, r.Attempt, r.Role, r.Path)
}

func fileKeys(rs []store.FileRecord) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, fileKey(r))
	}
	return out
}

// sameFile reports whether got is want as stored: every field but ID (which got must have) and
// the times (compared with Equal).
func sameFile(got, want store.FileRecord) bool {
	if got.ID <= 0 || !got.ModTime.Equal(want.ModTime) || !got.RecordedAt.Equal(want.RecordedAt) || !got.VerifiedAt.Equal(want.VerifiedAt) {
		return false
	}
	got.ID, want.ID = 0, 0
	got.ModTime, want.ModTime, got.RecordedAt, want.RecordedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	got.VerifiedAt, want.VerifiedAt = time.Time{}, time.Time{}
	return got == want
}

const testHash = "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"

// testFilesRoundTrip: records written in the batch that creates their run, step and attempt read
// back whole (nanosecond times, inode and device numbers past the largest int64, every state),
// by ID in the order written.
func testFilesRoundTrip(t *testing.T, s AssetStore) {
	mod := time.Date(2026, 3, 7, 22, 15, 4, 123456789, time.UTC) // nanoseconds, as file systems have them
	recs := []store.FileRecord{
		{RunID: "r1", StepKey: "b[0].x", Attempt: 1, Role: store.FileRead, Path: "/mnt/show/in.usd", State: store.FileOK,
			Size: 1 << 40, ModTime: mod, Dev: math.MaxUint64, Ino: 1<<63 + 5, Hash: testHash, RecordedAt: t0, VerifiedAt: t0.Add(-time.Nanosecond)},
		{RunID: "r1", StepKey: "b[0].x", Attempt: 1, Role: store.FileWrite, Path: `C:\Show\Out\é ✓.usd`, State: store.FileUnstable,
			Size: 7, ModTime: mod.Add(time.Nanosecond), Dev: 2049, Ino: 77, Error: "it changed while it was hashed: size 7 then 9", RecordedAt: t0.Add(time.Second)},
		{RunID: "r1", StepKey: "b[0].x", Attempt: 1, Role: store.FileWrite, Path: `\\farm\share\gone.exr`, State: store.FileMissing, RecordedAt: t0},
		{RunID: "r1", StepKey: "b[0].x", Attempt: 1, Role: store.FileRead, Path: "/mnt/show/secret", State: store.FileUnreadable,
			Error: "open /mnt/show/secret: permission denied", RecordedAt: t0},
	}
	write(t, s, &store.Batch{
		CreateRuns: []store.Run{newRun("r1", t0)},
		Steps:      []store.Step{{RunID: "r1", Key: "b[0].x", StepID: "x", Kind: "tool", Status: run.StepCompleted, Attempt: 1, Insert: true}},
		Attempts:   []store.Attempt{{RunID: "r1", StepKey: "b[0].x", Attempt: 1, Tool: "export", Status: run.StepCompleted, StartedAt: t0}},
		Files:      recs,
	})
	got := files(t, s, store.FileFilter{})
	if len(got) != len(recs) {
		t.Fatalf("Files = %v; want the %d records written", fileKeys(got), len(recs))
	}
	for i := range recs {
		if !sameFile(got[i], recs[i]) {
			t.Errorf("record %d read back as %+v; want %+v", i, got[i], recs[i])
		}
		if i > 0 && got[i].ID <= got[i-1].ID {
			t.Errorf("IDs %d then %d; want them increasing in the order written", got[i-1].ID, got[i].ID)
		}
	}
	if got := files(t, s, store.FileFilter{RunID: "ghost"}); len(got) != 0 {
		t.Errorf("Files of an unknown run = %v; want none", fileKeys(got))
	}
	// Records of a step and attempt with no row yet (the engine writes them with the attempt's end).
	write(t, s, &store.Batch{Files: []store.FileRecord{{RunID: "r1", StepKey: "later", Attempt: 3, Role: store.FileRead, Path: "/x", State: store.FileOK, Hash: testHash}}})
	if got := files(t, s, store.FileFilter{StepKey: "later"}); len(got) != 1 || got[0].Attempt != 3 || got[0].ID <= recs[0].ID {
		t.Errorf("Files(later) = %+v; want its one record", got)
	}
}

// testFilesAtomic: a file record or a cache entry of an unknown run fails the whole batch with
// ErrNotFound.
func testFilesAtomic(t *testing.T, s AssetStore) {
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}})
	ctx := context.Background()
	ok := store.FileRecord{RunID: "r1", StepKey: "a", Attempt: 1, Role: store.FileWrite, Path: "/a", State: store.FileOK, Hash: testHash}
	err := s.Write(ctx, &store.Batch{
		Steps:    []store.Step{{RunID: "r1", Key: "a", StepID: "a", Kind: "tool", Status: run.StepCompleted, Attempt: 1}},
		Attempts: []store.Attempt{{RunID: "r1", StepKey: "a", Attempt: 1, Status: run.StepCompleted}},
		Files:    []store.FileRecord{ok, {RunID: "ghost", StepKey: "a", Attempt: 1, Role: store.FileRead, Path: "/b", State: store.FileOK}},
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Write with a file record of an unknown run = %v; want ErrNotFound", err)
	}
	err = s.Write(ctx, &store.Batch{
		Files:        []store.FileRecord{ok},
		CacheEntries: []store.CacheEntry{{Key: "k", RunID: "ghost", StepKey: "a", Attempt: 1, CreatedAt: t0}},
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Write with a cache entry of an unknown run = %v; want ErrNotFound", err)
	}
	if got := files(t, s, store.FileFilter{}); len(got) != 0 {
		t.Errorf("after failed batches, files = %v; want none", fileKeys(got))
	}
	if steps, _ := s.ListSteps(ctx, "r1"); len(steps) != 0 {
		t.Errorf("after a failed batch, steps = %+v; want none", steps)
	}
	if got, err := s.ListCache(ctx, store.CacheFilter{}); err != nil || len(got) != 0 {
		t.Errorf("after a failed batch, cache = %+v, %v; want none", got, err)
	}
}

// testFilesUpsert: a record with the key of one stored (run, step, attempt, role, path)
// replaces it whole and keeps its ID, also twice in one batch; another role, attempt or path is
// another record.
func testFilesUpsert(t *testing.T, s AssetStore) {
	rec := store.FileRecord{RunID: "r1", StepKey: "a", Attempt: 1, Role: store.FileWrite, Path: "/out/a.usd", State: store.FileOK,
		Size: 10, ModTime: t0, Dev: 1, Ino: 2, Hash: testHash, RecordedAt: t0}
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}, Files: []store.FileRecord{rec}})
	first := files(t, s, store.FileFilter{})
	if len(first) != 1 {
		t.Fatalf("Files = %v; want one", fileKeys(first))
	}
	other := rec
	other.Role = store.FileRead
	again := rec
	again.State, again.Size, again.Hash, again.Error, again.Dev, again.Ino = store.FileUnstable, 12, "", "it grew while it was hashed", 0, 0
	again.ModTime, again.RecordedAt = t0.Add(time.Minute), t0.Add(time.Minute)
	mid := again
	mid.Size = 11
	next := rec
	next.Attempt = 2
	write(t, s, &store.Batch{Files: []store.FileRecord{other, mid, again, next}})
	got := files(t, s, store.FileFilter{})
	if len(got) != 3 {
		t.Fatalf("after the upsert, Files = %v; want 3 records", fileKeys(got))
	}
	if got[0].ID != first[0].ID || !sameFile(got[0], again) {
		t.Errorf("the replaced record = %+v; want %+v with its ID %d", got[0], again, first[0].ID)
	}
	if got[1].Role != store.FileRead || got[2].Attempt != 2 || got[1].ID <= got[0].ID || got[2].ID <= got[1].ID {
		t.Errorf("Files = %v; want the replaced one, then the read, then attempt 2", fileKeys(got))
	}
}

// testFilesConfirmed: ConfirmFiles sets VerifiedAt, read back by Files and CacheEntries to the
// nanosecond, only on a record that is ok with the hash, size, modification time, device and
// inode given (device and inode past the largest int64 too), and only forward; an unknown ID
// changes nothing; writing the record again replaces its VerifiedAt with the one written.
func testFilesConfirmed(t *testing.T, s AssetStore) {
	ctx := context.Background()
	mod := time.Date(2026, 3, 7, 22, 15, 4, 123456789, time.UTC)
	rec := store.FileRecord{RunID: "r1", StepKey: "a", Attempt: 1, Role: store.FileWrite, Path: "/out/a.usd", State: store.FileOK,
		Size: 10, ModTime: mod, Dev: math.MaxUint64, Ino: 1<<63 + 5, Hash: testHash, RecordedAt: t0, VerifiedAt: mod.Add(time.Second)}
	bad := rec
	bad.Path, bad.State, bad.Hash, bad.Error = "/out/b.usd", store.FileUnstable, "", "it changed"
	write(t, s, &store.Batch{
		CreateRuns:   []store.Run{newRun("r1", t0)},
		Files:        []store.FileRecord{rec, bad},
		CacheEntries: []store.CacheEntry{{Key: "k", Tool: "t", RunID: "r1", StepKey: "a", Attempt: 1, CreatedAt: t0}},
	})
	got := files(t, s, store.FileFilter{})
	if len(got) != 2 || !sameFile(got[0], rec) {
		t.Fatalf("Files = %+v; want %+v first", got, rec)
	}
	id, badID := got[0].ID, got[1].ID
	later := mod.Add(2*time.Second + time.Nanosecond)
	confirm := func(edit func(r *store.FileRecord)) store.FileRecord {
		c := rec
		c.ID, c.VerifiedAt = id, later
		edit(&c)
		return c
	}
	// None of these is the stored record: nothing changes.
	for name, c := range map[string]store.FileRecord{
		"another hash":    confirm(func(r *store.FileRecord) { r.Hash = "blake3:" + strings.Repeat("0", 64) }),
		"another size":    confirm(func(r *store.FileRecord) { r.Size++ }),
		"another mtime":   confirm(func(r *store.FileRecord) { r.ModTime = r.ModTime.Add(time.Nanosecond) }),
		"another device":  confirm(func(r *store.FileRecord) { r.Dev-- }),
		"another inode":   confirm(func(r *store.FileRecord) { r.Ino++ }),
		"an earlier time": confirm(func(r *store.FileRecord) { r.VerifiedAt = rec.VerifiedAt.Add(-time.Nanosecond) }),
		"the same time":   confirm(func(r *store.FileRecord) { r.VerifiedAt = rec.VerifiedAt }),
		"an unknown id":   confirm(func(r *store.FileRecord) { r.ID = badID + 1000 }),
		"a record not ok": confirm(func(r *store.FileRecord) { r.ID, r.Hash = badID, "" }),
	} {
		if n, err := s.ConfirmFiles(ctx, []store.FileRecord{c}); err != nil || n != 0 {
			t.Errorf("ConfirmFiles(%s) = %d, %v; want 0 changed", name, n, err)
		}
	}
	if n, err := s.ConfirmFiles(ctx, nil); err != nil || n != 0 {
		t.Errorf("ConfirmFiles(none) = %d, %v; want 0", n, err)
	}
	if got := files(t, s, store.FileFilter{}); !sameFile(got[0], rec) || !got[1].VerifiedAt.Equal(rec.VerifiedAt) {
		t.Fatalf("after confirmations of other records, Files = %+v; want them unchanged", got)
	}
	if n, err := s.ConfirmFiles(ctx, []store.FileRecord{confirm(func(*store.FileRecord) {})}); err != nil || n != 1 {
		t.Fatalf("ConfirmFiles(the record) = %d, %v; want 1 changed", n, err)
	}
	want := rec
	want.VerifiedAt = later
	if got := files(t, s, store.FileFilter{Path: rec.Path}); len(got) != 1 || !sameFile(got[0], want) {
		t.Errorf("after ConfirmFiles, Files = %+v; want %+v", got, want)
	}
	es, err := s.CacheEntries(ctx, "k", t0)
	if err != nil || len(es) != 1 || len(es[0].Files) != 2 || !es[0].Files[0].VerifiedAt.Equal(later) {
		t.Errorf("CacheEntries = %+v, %v; want the entry with the confirmed record (VerifiedAt %v)", es, err, later)
	}
	// Written again (the same step's attempt recorded anew): what is written replaces it.
	again := rec
	again.VerifiedAt = time.Time{}
	write(t, s, &store.Batch{Files: []store.FileRecord{again}})
	if got := files(t, s, store.FileFilter{Path: rec.Path}); len(got) != 1 || got[0].ID != id || !got[0].VerifiedAt.IsZero() {
		t.Errorf("written again without VerifiedAt, Files = %+v; want its ID %d and no VerifiedAt", got, id)
	}
}

// assetFixture writes two runs' records across steps, attempts, roles and both path forms, and
// returns them in the order written.
func assetFixture(t *testing.T, s AssetStore) []store.FileRecord {
	rec := func(runID, step string, attempt int, role store.FileRole, path string) store.FileRecord {
		return store.FileRecord{RunID: runID, StepKey: step, Attempt: attempt, Role: role, Path: path, State: store.FileOK,
			Size: int64(len(path)), Hash: testHash, ModTime: t0, RecordedAt: t0}
	}
	r, w := store.FileRead, store.FileWrite
	first := []store.FileRecord{
		rec("r1", "a", 1, r, "/show/in/a.usd"),
		rec("r1", "a", 1, w, "/show/out/a.usd"),
		rec("r1", "a", 2, r, "/show/in/a.usd"),
		rec("r1", "a", 2, w, "/show/out/a.usd"),
		rec("r1", "b[0].x", 1, r, "/show/out/a.usd"),
		rec("r1", "b[0].x", 1, w, "/show/out/b/x.usd"),
		rec("r1", "b[0].x", 1, w, `C:\Show\Out\c.usd`),
	}
	second := []store.FileRecord{
		rec("r2", "a", 1, r, "/show/in/a.usd"),
		rec("r2", "a", 1, w, "/show/outx/a.usd"),
		rec("r2", "a", 1, r, `\\farm\share\tex.exr`),
		rec("r2", "a", 1, w, "/show/out.bak/z"),
		rec("r2", "a", 1, w, "/show/out"),
		rec("r2", "b[0].x", 2, w, `c:/show/out/d.usd`),
		rec("r2", "b[0].x", 2, r, `D:\show\out\e.usd`),
		rec("r2", "b[0].x", 2, w, "/"),
	}
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}, Files: first})
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r2", t0)}, Files: second[:4]})
	write(t, s, &store.Batch{Files: second[4:]})
	all := files(t, s, store.FileFilter{})
	want := append(append([]store.FileRecord{}, first...), second...)
	if len(all) != len(want) {
		t.Fatalf("Files = %v; want the %d written", fileKeys(all), len(want))
	}
	for i := range all {
		if fileKey(all[i]) != fileKey(want[i]) {
			t.Fatalf("Files = %v; want them in the order written: %v", fileKeys(all), fileKeys(want))
		}
	}
	return all
}

// matchFile is the model of a FileFilter (but for paging).
func matchFile(r store.FileRecord, f store.FileFilter) bool {
	if f.RunID != "" && r.RunID != f.RunID || f.StepKey != "" && r.StepKey != f.StepKey ||
		f.Attempt != 0 && r.Attempt != f.Attempt || f.Role != "" && r.Role != f.Role || f.Role == "" && !f.WithPatterns && r.Role == store.FilePattern || f.Path != "" && r.Path != f.Path ||
		f.Under != "" && !pathkey.Under(r.Path, f.Under) {
		return false
	}
	if f.Attempts != nil && !slices.Contains(f.Attempts, store.AttemptRef{RunID: r.RunID, StepKey: r.StepKey, Attempt: r.Attempt}) {
		return false
	}
	return r.ID > f.AfterID
}

// testFileFilters: every FileFilter field alone and combined selects what the model
// (matchFile) does, in ID order; a few are spelled out.
func testFileFilters(t *testing.T, s AssetStore) {
	all := assetFixture(t, s)
	refs := []store.AttemptRef{{RunID: "r1", StepKey: "a", Attempt: 2}, {RunID: "r2", StepKey: "b[0].x", Attempt: 2}, {RunID: "ghost", StepKey: "a", Attempt: 1}}
	filters := []store.FileFilter{
		{},
		{RunID: "r1"}, {RunID: "r2"}, {RunID: "ghost"},
		{StepKey: "a"}, {StepKey: "b[0].x"}, {StepKey: "b[0]"},
		{Attempt: 1}, {Attempt: 2}, {Attempt: 3},
		{Role: store.FileRead}, {Role: store.FileWrite},
		{Path: "/show/in/a.usd"}, {Path: `C:\Show\Out\c.usd`}, {Path: `c:\show\out\c.usd`}, {Path: "/show/in"},
		{Under: "/show/out"}, {Under: "/show"}, {Under: "/"}, {Under: `C:\show`}, {Under: `c:/SHOW/out`}, {Under: `C:\`},
		{Under: `\\FARM\share`}, {Under: `\\`}, {Under: "/show/out/a.usd"}, {Under: "/nowhere"},
		{Attempts: refs}, {Attempts: []store.AttemptRef{}}, {Attempts: refs[2:]},
		{RunID: "r1", Role: store.FileWrite},
		{RunID: "r1", StepKey: "a", Attempt: 2},
		{RunID: "r2", StepKey: "a", Attempt: 1, Role: store.FileRead},
		{StepKey: "a", Role: store.FileRead, Path: "/show/in/a.usd"},
		{RunID: "r2", Path: "/show/in/a.usd"},
		{Under: "/show/out", Role: store.FileWrite},
		{Under: "/show", RunID: "r2", StepKey: "a"},
		{Under: `C:\show`, Attempt: 2},
		{Attempts: refs, Role: store.FileWrite},
		{Attempts: refs, Under: "/show/in"},
		{Attempts: refs, Path: "/show/in/a.usd", RunID: "r1"},
		{AfterID: all[3].ID}, {AfterID: all[3].ID, Role: store.FileRead}, {AfterID: all[len(all)-1].ID},
		{AfterID: all[2].ID, Under: "/show/out", Limit: 2},
		{Limit: 3, RunID: "r2"}, {Limit: 1, Attempts: refs}, {Limit: -1, Role: store.FileRead},
	}
	for _, f := range filters {
		var want []string
		for _, r := range all {
			if matchFile(r, f) && (f.Limit <= 0 || len(want) < f.Limit) {
				want = append(want, fileKey(r))
			}
		}
		got := files(t, s, f)
		if !reflect.DeepEqual(fileKeys(got), append([]string{}, want...)) {
			t.Errorf("Files(%+v) = %v; want %v", f, fileKeys(got), want)
		}
	}
	// Spelled out: the model's answers checked by hand for the subtle ones.
	for _, c := range []struct {
		f    store.FileFilter
		want int
	}{
		{store.FileFilter{Under: "/show/out"}, 5},        // /show/out itself, a.usd ×3, b/x.usd; not outx/, out.bak/
		{store.FileFilter{Under: `c:\SHOW`}, 2},          // C:\Show\Out\c.usd and c:/show/out/d.usd; not D:
		{store.FileFilter{Under: "/"}, 11},               // every POSIX-form path
		{store.FileFilter{Path: `c:\show\out\c.usd`}, 0}, // an exact path is exact, on Windows too
		{store.FileFilter{Attempts: []store.AttemptRef{}}, 0},
		{store.FileFilter{Attempts: refs}, 5},
	} {
		if got := files(t, s, c.f); len(got) != c.want {
			t.Errorf("Files(%+v) = %v; want %d records", c.f, fileKeys(got), c.want)
		}
	}
}

// testFilesPaging: pages of Limit records after the last ID read put the whole selection
// together, each record once, in ID order, with or without a condition.
func testFilesPaging(t *testing.T, s AssetStore) {
	all := assetFixture(t, s)
	for _, f := range []store.FileFilter{{}, {Under: "/show"}, {RunID: "r1"}, {Role: store.FileWrite}} {
		for _, limit := range []int{1, 2, 5, 100} {
			var got []store.FileRecord
			f := f
			f.Limit, f.AfterID = limit, 0
			for pages := 0; ; pages++ {
				page := files(t, s, f)
				if len(page) > limit || pages > len(all) {
					t.Fatalf("Files(%+v) = %d records; want at most %d", f, len(page), limit)
				}
				if len(page) == 0 {
					break
				}
				got = append(got, page...)
				f.AfterID = page[len(page)-1].ID
			}
			f.Limit, f.AfterID = 0, 0
			if want := files(t, s, f); !reflect.DeepEqual(fileKeys(got), fileKeys(want)) {
				t.Errorf("pages of %d of %+v = %v; want %v", limit, f, fileKeys(got), fileKeys(want))
			}
		}
	}
}

// testFilesUnder: Under holds the directory itself and what is inside it, at any depth, not a
// sibling whose name starts the same (/a/bc, /a/b.txt, /a/b!x); Windows-form paths compare
// without case and with either separator, and drive roots and UNC shares work.
func testFilesUnder(t *testing.T, s AssetStore) {
	paths := []string{
		"/a/b", "/a/b/c", "/a/b/c/d/e.usd", "/a/bc", "/a/bc/d", "/a/b.txt", "/a/b!x", "/a/b0", "/a/B/c", "/a", "/a/b/\U0001F600.usd",
		`C:\Show\A`, `C:\show\a\x.usd`, `c:/SHOW/a/y.usd`, `C:\Show\AB\z`, `C:\Show\A.bak`, `D:\Show\A\w`,
		`\\farm\share\t.exr`, `\\FARM\Share\u.exr`, `\\farm\share2\v.exr`,
	}
	b := &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}}
	for _, p := range paths {
		b.Files = append(b.Files, store.FileRecord{RunID: "r1", StepKey: "s", Attempt: 1, Role: store.FileWrite, Path: p, State: store.FileMissing})
	}
	write(t, s, b)
	for _, c := range []struct {
		dir  string
		want []string
	}{
		{"/a/b", []string{"/a/b", "/a/b/c", "/a/b/c/d/e.usd", "/a/b/\U0001F600.usd"}},
		{"/a/b/", []string{"/a/b", "/a/b/c", "/a/b/c/d/e.usd", "/a/b/\U0001F600.usd"}},
		{"/a/bc", []string{"/a/bc", "/a/bc/d"}},
		{"/a/b/c/d/e.usd", []string{"/a/b/c/d/e.usd"}},
		{"/A", nil},
		{`C:\Show\A`, []string{`C:\Show\A`, `C:\show\a\x.usd`, `c:/SHOW/a/y.usd`}},
		{`c:/show/a/`, []string{`C:\Show\A`, `C:\show\a\x.usd`, `c:/SHOW/a/y.usd`}},
		{`C:\`, []string{`C:\Show\A`, `C:\show\a\x.usd`, `c:/SHOW/a/y.usd`, `C:\Show\AB\z`, `C:\Show\A.bak`}},
		{`\\FARM\SHARE`, []string{`\\farm\share\t.exr`, `\\FARM\Share\u.exr`}},
		{`\\farm`, []string{`\\farm\share\t.exr`, `\\FARM\Share\u.exr`, `\\farm\share2\v.exr`}},
	} {
		got := files(t, s, store.FileFilter{Under: c.dir})
		var paths []string
		for _, r := range got {
			paths = append(paths, r.Path)
		}
		if !reflect.DeepEqual(paths, c.want) {
			t.Errorf("Files(Under %q) = %q; want %q", c.dir, paths, c.want)
		}
	}
}

// ExerciseAssetsVolume runs the volume part of ExerciseAssets: pages of large selections (see
// testFilesLargePaging). newStore must return a new, empty store; the suite closes it.
func ExerciseAssetsVolume(t *testing.T, newStore func(t *testing.T) AssetStore) {
	t.Helper()
	s := newStore(t)
	t.Cleanup(func() { _ = s.Close() })
	testFilesLargePaging(t, s)
}

// testFilesLargePaging: pages of large selections — a directory, a run, a step's attempt, a
// list of attempts — dense in places and sparse in others (a store may read such a page by ID
// rather than through an index), put each selection together, each record once, in ID order.
func testFilesLargePaging(t *testing.T, s AssetStore) {
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0), newRun("r2", t0)}})
	n := 0
	add := func(b *store.Batch, runID, step, dir string, role store.FileRole) {
		n++
		b.Files = append(b.Files, store.FileRecord{RunID: runID, StepKey: step, Attempt: 1, Role: role,
			Path: fmt.Sprintf("%s/f%04d", dir, n), State: store.FileMissing})
	}
	b := &store.Batch{}
	for i := 0; i < 120; i++ { // dense, then one in three, then a long gap, then dense again
		add(b, "r1", "s", "/dense", store.FileWrite)
	}
	for i := 0; i < 90; i++ {
		if i%3 == 0 {
			add(b, "r1", "s", "/dense", store.FileRead)
		} else {
			add(b, "r2", "t", "/other", store.FileRead)
		}
	}
	for i := 0; i < 2500; i++ {
		add(b, "r2", "u", "/densex", store.FileWrite)
	}
	for i := 0; i < 40; i++ {
		add(b, "r1", "v", "/dense", store.FileWrite)
	}
	write(t, s, b)
	all := files(t, s, store.FileFilter{})
	for _, f := range []store.FileFilter{
		{Under: "/dense"}, {RunID: "r1"}, {RunID: "r1", StepKey: "s", Attempt: 1}, {RunID: "r2", Role: store.FileRead},
		{Attempts: []store.AttemptRef{{RunID: "r1", StepKey: "s", Attempt: 1}, {RunID: "r2", StepKey: "t", Attempt: 1}}},
		{Under: "/dense", RunID: "r1", Role: store.FileWrite},
	} {
		var want []string
		for _, r := range all {
			if matchFile(r, f) {
				want = append(want, fileKey(r))
			}
		}
		for _, limit := range []int{3, 7, 50} {
			var got []string
			f := f
			f.Limit = limit
			for pages := 0; ; pages++ {
				page := files(t, s, f)
				if len(page) > limit || pages > len(all) {
					t.Fatalf("Files(%+v) = %d records; want at most %d", f, len(page), limit)
				}
				if len(page) == 0 {
					break
				}
				for _, r := range page {
					if r.ID <= f.AfterID {
						t.Fatalf("Files(%+v) listed ID %d; want IDs past AfterID, increasing", f, r.ID)
					}
					got = append(got, fileKey(r))
					f.AfterID = r.ID
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("pages of %d of %+v = %d records %v…; want the %d selected, in ID order", limit, f, len(got), got[:min(3, len(got))], len(want))
			}
		}
	}
}

// cacheFixture writes four entries: two runs, two keys, a tie on CreatedAt, each kind of
// expiry.
func cacheFixture(t *testing.T, s AssetStore) (e1, e2, e3, e4 store.CacheEntry) {
	entry := func(key, runID, step, tool string, created, expires time.Time) store.CacheEntry {
		return store.CacheEntry{Key: key, Tool: tool, StepID: "x", Workflow: "wf", RunID: runID, StepKey: step, Attempt: 1,
			Parts:  json.RawMessage(`{"tool":"` + tool + `","version":"1","args":{"shot":"sh010"}}`),
			Output: json.RawMessage(`{"from":"` + runID + "/" + step + `"}`), CreatedAt: created, ExpiresAt: expires}
	}
	e1 = entry("k1", "r1", "a", "export", t0, time.Time{})                            // never expires
	e2 = entry("k1", "r2", "a", "export", t0.Add(time.Minute), t0.Add(2*time.Minute)) // expires at t0+2m
	e3 = entry("k1", "r1", "b", "export", t0.Add(time.Minute), t0.Add(time.Hour))     // ties with e2; r1 < r2
	e4 = entry("k2", "r2", "c", "render", t0.Add(3*time.Minute), time.Time{})
	e4.Workflow, e4.FileRefs = "other", json.RawMessage(`[{"path":"/x"}]`)
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0), newRun("r2", t0)}, CacheEntries: []store.CacheEntry{e1, e2}})
	write(t, s, &store.Batch{CacheEntries: []store.CacheEntry{e3, e4}})
	return e1, e2, e3, e4
}

func cacheName(e store.CacheEntry) string { return e.Key + ":" + e.RunID + "/" + e.StepKey }

func cacheNames(es []store.CacheEntry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, cacheName(e))
	}
	return out
}

func sameCache(got, want store.CacheEntry) bool {
	return got.Key == want.Key && got.Tool == want.Tool && got.StepID == want.StepID && got.Workflow == want.Workflow &&
		got.RunID == want.RunID && got.StepKey == want.StepKey && got.Attempt == want.Attempt &&
		sameJSON(got.Parts, want.Parts) && sameJSON(got.Output, want.Output) && sameJSON(got.FileRefs, want.FileRefs) &&
		(got.FileRefs == nil) == (want.FileRefs == nil) &&
		got.CreatedAt.Equal(want.CreatedAt) && got.ExpiresAt.Equal(want.ExpiresAt)
}

// testCacheEntries: the live entries of a key at now, newest first (ties by key, run, step,
// attempt), read back whole; an entry is expired once now ≥ ExpiresAt, never when it is zero;
// an entry with the key of one stored replaces it.
func testCacheEntries(t *testing.T, s AssetStore) {
	ctx := context.Background()
	e1, e2, e3, _ := cacheFixture(t, s)
	at := func(now time.Time) []store.CacheEntry {
		t.Helper()
		got, err := s.CacheEntries(ctx, "k1", now)
		if err != nil {
			t.Fatalf("CacheEntries(k1, %v): %v", now, err)
		}
		return got
	}
	got := at(t0.Add(2*time.Minute - time.Nanosecond))
	if len(got) != 3 || !sameCache(got[0], e3) || !sameCache(got[1], e2) || !sameCache(got[2], e1) {
		t.Errorf("CacheEntries just before e2 expires = %v (%+v); want e3, e2, e1 whole", cacheNames(got), got)
	}
	if got := cacheNames(at(t0.Add(2 * time.Minute))); fmt.Sprint(got) != "[k1:r1/b k1:r1/a]" {
		t.Errorf("CacheEntries at e2's ExpiresAt = %v; want e3, e1 (an entry is expired at its ExpiresAt)", got)
	}
	if got := cacheNames(at(t0.Add(time.Hour))); fmt.Sprint(got) != "[k1:r1/a]" {
		t.Errorf("CacheEntries an hour on = %v; want e1 alone, which never expires", got)
	}
	if got := cacheNames(at(t0.Add(100 * 365 * 24 * time.Hour))); fmt.Sprint(got) != "[k1:r1/a]" {
		t.Errorf("CacheEntries a century on = %v; want e1", got)
	}
	if got, err := s.CacheEntries(ctx, "nope", t0); err != nil || len(got) != 0 {
		t.Errorf("CacheEntries(unknown key) = %v, %v; want none", cacheNames(got), err)
	}
	// Replaced: e1 again, with another output and an expiry.
	e1.Output, e1.ExpiresAt, e1.CreatedAt = json.RawMessage(`{"again":true}`), t0.Add(30*time.Minute), t0.Add(2*time.Minute)
	write(t, s, &store.Batch{CacheEntries: []store.CacheEntry{e1}})
	got = at(t0.Add(10 * time.Minute))
	if len(got) != 2 || !sameCache(got[0], e1) || cacheName(got[1]) != "k1:r1/b" {
		t.Errorf("after e1 was replaced, CacheEntries = %v (%+v); want e1 (newer now, whole), e3", cacheNames(got), got)
	}
}

// testCacheEntryFiles: CacheEntries gives each entry the file records of its attempt (not of
// another attempt or step of the run, nor another run's), by ID, read back whole — paths with
// quotes, backslashes, control characters and bytes that are not UTF-8 (which a store keeping
// text as PostgreSQL does may read back as U+FFFD), dev and ino past the largest int64, a
// missing file's NULL hash — and as they are now (a record rewritten is read anew); an entry
// whose attempt recorded none has none; Files given when writing are ignored; ListCache gives
// none.
func testCacheEntryFiles(t *testing.T, s AssetStore) {
	ctx := context.Background()
	rec := func(runID, step string, attempt int, role store.FileRole, path string) store.FileRecord {
		return store.FileRecord{RunID: runID, StepKey: step, Attempt: attempt, Role: role, Path: path, State: store.FileOK,
			Size: int64(len(path)), ModTime: t0.Add(time.Duration(len(path)) * time.Nanosecond), Dev: 1<<64 - 3, Ino: 1<<63 + 5,
			Hash: testHash, RecordedAt: t0.Add(time.Second)}
	}
	odd := "/show/it's \"q\" \\ \x01\n\t é😀 bad\xff.usd"
	mine := []store.FileRecord{
		rec("r1", "each[0].a", 1, store.FileRead, `C:\Show\in.usd`),
		rec("r1", "each[0].a", 1, store.FileWrite, "/show/out.usd"),
		rec("r1", "each[0].a", 1, store.FileRead, odd),
	}
	missing := rec("r1", "each[0].a", 1, store.FileRead, "/show/gone.usd")
	missing.State, missing.Hash, missing.Error, missing.Size, missing.Dev, missing.Ino = store.FileMissing, "", "no such file", 0, 0, 0
	mine = append(mine, missing)
	others := []store.FileRecord{
		rec("r1", "each[0].a", 2, store.FileRead, "/show/attempt2.usd"),
		rec("r1", "each[1].a", 1, store.FileRead, "/show/other-step.usd"),
		rec("r2", "each[0].a", 1, store.FileRead, "/show/other-run.usd"),
	}
	entry := func(runID, step string, attempt int, created time.Time) store.CacheEntry {
		return store.CacheEntry{Key: "k", Tool: "t", RunID: runID, StepKey: step, Attempt: attempt, Output: json.RawMessage(`1`), CreatedAt: created}
	}
	withFiles := entry("r1", "each[0].a", 1, t0)
	withFiles.Files = []store.FileRecord{rec("r1", "each[0].a", 1, store.FileRead, "/not/recorded.usd")} // ignored
	bare := entry("r2", "each[9].a", 1, t0.Add(time.Minute))
	// The records in two batches, interleaved with the others', so that the entry's IDs are
	// not consecutive.
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0), newRun("r2", t0)},
		Files: []store.FileRecord{mine[0], others[0], mine[1], others[1]}})
	write(t, s, &store.Batch{Files: []store.FileRecord{others[2], mine[2], mine[3]}, CacheEntries: []store.CacheEntry{withFiles, bare}})

	check := func(what string, want []store.FileRecord) {
		t.Helper()
		got, err := s.CacheEntries(ctx, "k", t0)
		if err != nil || len(got) != 2 || cacheName(got[0]) != "k:r2/each[9].a" || cacheName(got[1]) != "k:r1/each[0].a" {
			t.Fatalf("%s: CacheEntries(k) = %v, %v; want the bare entry, then the one with files", what, cacheNames(got), err)
		}
		if len(got[0].Files) != 0 {
			t.Errorf("%s: the entry whose attempt recorded no file has Files %v; want none", what, fileKeys(got[0].Files))
		}
		all := files(t, s, store.FileFilter{RunID: "r1", StepKey: "each[0].a", Attempt: 1})
		if len(got[1].Files) != len(want) || len(all) != len(want) {
			t.Fatalf("%s: the entry's Files = %v; want %v (Files has %v)", what, fileKeys(got[1].Files), fileKeys(want), fileKeys(all))
		}
		for i, f := range got[1].Files {
			w := want[i]
			if f.Path != w.Path && f.Path == strings.ToValidUTF8(w.Path, "\uFFFD") {
				w.Path = f.Path // as the store keeps text
			}
			if !sameFile(f, w) || f.ID != all[i].ID {
				t.Errorf("%s: the entry's file %d = %+v;\nwant %+v with ID %d (as Files reads it)", what, i, f, w, all[i].ID)
			}
		}
	}
	check("written", mine)
	if got, err := s.ListCache(ctx, store.CacheFilter{Key: "k"}); err != nil || len(got) != 2 || got[0].Files != nil || got[1].Files != nil {
		t.Errorf("ListCache(k) = %+v, %v; want the two entries without Files", got, err)
	}
	// A record rewritten: the entry reads it as it is now.
	mine[1].Hash, mine[1].Size = "blake3:"+strings.Repeat("0", 64), 99
	write(t, s, &store.Batch{Files: []store.FileRecord{mine[1]}})
	check("after a record was rewritten", mine)
}

// testFilePatterns: the pattern records of an attempt (store.FilePattern) are stored and read
// back like the others, but selected only by Role FilePattern: a filter without a role (every
// record, a run's, an attempt's, those under a directory) has none, and neither has a cache
// entry's Files.
func testFilePatterns(t *testing.T, s AssetStore) {
	ctx := context.Background()
	rec := func(attempt int, role store.FileRole, path string) store.FileRecord {
		r := store.FileRecord{RunID: "r1", StepKey: "a", Attempt: attempt, Role: role, Path: path, State: store.FileOK, RecordedAt: t0}
		if role != store.FilePattern {
			r.Hash, r.Size = testHash, 3
		}
		return r
	}
	in, out := rec(1, store.FileRead, "/show/assets/a.usda"), rec(1, store.FileWrite, "/show/shot.usda")
	pat, pat2 := rec(1, store.FilePattern, "/show/assets/*.usda"), rec(2, store.FilePattern, `/show/\[old\]/**/*.usda`)
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}, Files: []store.FileRecord{in, pat, out, pat2},
		CacheEntries: []store.CacheEntry{{Key: "k", Tool: "t", RunID: "r1", StepKey: "a", Attempt: 1, Output: json.RawMessage(`1`), CreatedAt: t0}}})
	for _, f := range []store.FileFilter{{}, {RunID: "r1"}, {RunID: "r1", StepKey: "a", Attempt: 1}, {Under: "/show"},
		{Attempts: []store.AttemptRef{{RunID: "r1", StepKey: "a", Attempt: 1}}}, {Limit: 1, Under: "/show"}} {
		for _, r := range files(t, s, f) {
			if r.Role == store.FilePattern {
				t.Errorf("Files(%+v) has the pattern record %s: a filter without a role selects reads and writes only", f, fileKey(r))
			}
		}
	}
	if got := files(t, s, store.FileFilter{}); len(got) != 2 {
		t.Errorf("Files({}) = %v; want the read and the write", fileKeys(got))
	}
	if got := files(t, s, store.FileFilter{WithPatterns: true}); len(got) != 4 || got[1].Role != store.FilePattern {
		t.Errorf("Files(WithPatterns) = %v; want all four, in the order written", fileKeys(got))
	}
	if got := files(t, s, store.FileFilter{WithPatterns: true, Attempts: []store.AttemptRef{{RunID: "r1", StepKey: "a", Attempt: 2}}}); len(got) != 1 {
		t.Errorf("Files(WithPatterns, attempt 2) = %v; want its pattern", fileKeys(got))
	}
	got := files(t, s, store.FileFilter{Role: store.FilePattern})
	if len(got) != 2 || !sameFile(got[0], pat) || !sameFile(got[1], pat2) {
		t.Fatalf("Files(Role pattern) = %+v; want the two pattern records as written", got)
	}
	got = files(t, s, store.FileFilter{Role: store.FilePattern, Attempts: []store.AttemptRef{{RunID: "r1", StepKey: "a", Attempt: 2}}})
	if len(got) != 1 || got[0].Path != pat2.Path {
		t.Errorf("Files(Role pattern, attempt 2) = %v; want %s", fileKeys(got), fileKey(pat2))
	}
	entries, err := s.CacheEntries(ctx, "k", t0)
	if err != nil || len(entries) != 1 {
		t.Fatalf("CacheEntries(k) = %v, %v; want the entry", cacheNames(entries), err)
	}
	if fs := entries[0].Files; len(fs) != 2 || fs[0].Role != store.FileRead || fs[1].Role != store.FileWrite {
		t.Errorf("the cache entry's Files = %v; want its attempt's read and write, no pattern", fileKeys(fs))
	}
}

// testCacheListAndPurge: ListCache's filters, alone and together, newest first, expired entries
// too, at most Limit; PurgeCache deletes what the same filter selects (its Limit ignored) and
// says how many.
func testCacheListAndPurge(t *testing.T, s AssetStore) {
	ctx := context.Background()
	cacheFixture(t, s)
	list := func(f store.CacheFilter) string {
		t.Helper()
		got, err := s.ListCache(ctx, f)
		if err != nil {
			t.Fatalf("ListCache(%+v): %v", f, err)
		}
		return fmt.Sprint(cacheNames(got))
	}
	for _, c := range []struct {
		f    store.CacheFilter
		want string
	}{
		{store.CacheFilter{}, "[k2:r2/c k1:r1/b k1:r2/a k1:r1/a]"},
		{store.CacheFilter{Key: "k1"}, "[k1:r1/b k1:r2/a k1:r1/a]"},
		{store.CacheFilter{Tool: "render"}, "[k2:r2/c]"},
		{store.CacheFilter{Workflow: "wf"}, "[k1:r1/b k1:r2/a k1:r1/a]"},
		{store.CacheFilter{RunID: "r2"}, "[k2:r2/c k1:r2/a]"},
		{store.CacheFilter{Before: t0.Add(time.Minute)}, "[k1:r1/a]"},
		{store.CacheFilter{Before: t0.Add(time.Minute + time.Nanosecond)}, "[k1:r1/b k1:r2/a k1:r1/a]"},
		{store.CacheFilter{Limit: 2}, "[k2:r2/c k1:r1/b]"},
		{store.CacheFilter{Key: "k1", RunID: "r2"}, "[k1:r2/a]"},
		{store.CacheFilter{Tool: "export", Before: t0.Add(2 * time.Minute), Limit: 1}, "[k1:r1/b]"},
		{store.CacheFilter{Key: "k2", Tool: "export"}, "[]"},
		{store.CacheFilter{Workflow: "nope"}, "[]"},
	} {
		if got := list(c.f); got != c.want {
			t.Errorf("ListCache(%+v) = %s; want %s", c.f, got, c.want)
		}
	}
	purge := func(f store.CacheFilter, want int) {
		t.Helper()
		if n, err := s.PurgeCache(ctx, f); err != nil || n != want {
			t.Errorf("PurgeCache(%+v) = %d, %v; want %d", f, n, err, want)
		}
	}
	purge(store.CacheFilter{Key: "k1", RunID: "r2", Limit: 100}, 1)
	purge(store.CacheFilter{Key: "k1", RunID: "r2"}, 0)
	if got := list(store.CacheFilter{}); got != "[k2:r2/c k1:r1/b k1:r1/a]" {
		t.Errorf("after purging k1 of r2, ListCache = %s", got)
	}
	purge(store.CacheFilter{Before: t0.Add(2 * time.Minute), Limit: 1}, 2)
	purge(store.CacheFilter{Tool: "nope"}, 0)
	purge(store.CacheFilter{}, 1)
	if got := list(store.CacheFilter{}); got != "[]" {
		t.Errorf("after purging all, ListCache = %s", got)
	}
}

// testAssetsPruned: a pruned run's file records and cache entries go with it; another run's
// stay; the IDs of the records deleted are not given again.
func testAssetsPruned(t *testing.T, s AssetStore) {
	p, ok := s.(store.Pruner)
	if !ok {
		t.Skip("the store has no Pruner") // not a failure: Prune is another feature
	}
	ctx := context.Background()
	done, live := newRun("done", t0), newRun("live", t0)
	done.Status, done.FinishedAt = run.StatusCompleted, t0.Add(time.Minute)
	f := func(runID, path string) store.FileRecord {
		return store.FileRecord{RunID: runID, StepKey: "a", Attempt: 1, Role: store.FileWrite, Path: path, State: store.FileOK, Hash: testHash}
	}
	c := func(runID string) store.CacheEntry {
		return store.CacheEntry{Key: "k", RunID: runID, StepKey: "a", Attempt: 1, Output: json.RawMessage(`1`), CreatedAt: t0}
	}
	write(t, s, &store.Batch{CreateRuns: []store.Run{live, done},
		Files:        []store.FileRecord{f("live", "/out/live.usd"), f("done", "/out/done.usd"), f("done", "/out/shared.usd")},
		CacheEntries: []store.CacheEntry{c("live"), c("done")}})
	before := files(t, s, store.FileFilter{})
	if n, err := p.Prune(ctx, t0.Add(time.Hour), nil); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	if got := files(t, s, store.FileFilter{}); len(got) != 1 || got[0].RunID != "live" || got[0].ID != before[0].ID {
		t.Errorf("after Prune, Files = %v; want the live run's only", fileKeys(got))
	}
	if got := files(t, s, store.FileFilter{RunID: "done"}); len(got) != 0 {
		t.Errorf("Files of the pruned run = %v; want none", fileKeys(got))
	}
	if got, err := s.ListCache(ctx, store.CacheFilter{}); err != nil || len(got) != 1 || got[0].RunID != "live" {
		t.Errorf("after Prune, ListCache = %v, %v; want the live run's only", cacheNames(got), err)
	}
	if got, err := s.CacheEntries(ctx, "k", t0); err != nil || len(got) != 1 || got[0].RunID != "live" {
		t.Errorf("after Prune, CacheEntries(k) = %v, %v; want the live run's", cacheNames(got), err)
	}
	// A record written after the prune gets an ID past every one given before, so a reader
	// paging by ID across a prune never misses it.
	write(t, s, &store.Batch{Files: []store.FileRecord{f("live", "/out/new.usd")}})
	if got := files(t, s, store.FileFilter{Path: "/out/new.usd"}); len(got) != 1 || got[0].ID <= before[len(before)-1].ID {
		t.Errorf("a record written after the prune = %+v; want an ID past %d", got, before[len(before)-1].ID)
	}
}

// testAttemptEnv: Attempt.Env round-trips through the attempt log; nil stays nil, and a rewrite
// of the attempt without it clears it.
func testAttemptEnv(t *testing.T, s AssetStore) {
	log, ok := s.(store.AttemptLog)
	if !ok {
		t.Skip("the store has no AttemptLog") // not a failure: attempts are another feature
	}
	env := json.RawMessage(`{"dcc":"maya","version":"2025.1","plugins":{"mtoa":"5.4.2","é":"✓"}}`)
	a1 := store.Attempt{RunID: "r1", StepKey: "a", Attempt: 1, Tool: "export", Status: run.StepCompleted, Env: env, StartedAt: t0}
	a2 := store.Attempt{RunID: "r1", StepKey: "a", Attempt: 2, Tool: "export", Status: run.StepRunning, StartedAt: t0}
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}, Attempts: []store.Attempt{a1, a2}})
	got := listAttempts(t, log, "r1", "a")
	if len(got) != 2 || !sameJSON(got[0].Env, env) || got[1].Env != nil {
		t.Fatalf("attempts = %+v; want attempt 1 with its env, attempt 2 with a nil Env", got)
	}
	a1.Env = nil
	a2.Env, a2.Status = json.RawMessage(`{"dcc":"blender","version":"4.2"}`), run.StepCompleted
	write(t, s, &store.Batch{Attempts: []store.Attempt{a1, a2}})
	got = listAttempts(t, log, "r1", "a")
	if len(got) != 2 || got[0].Env != nil || !sameJSON(got[1].Env, a2.Env) {
		t.Errorf("after a rewrite, attempts = %+v; want attempt 1's Env cleared, attempt 2's set", got)
	}
}

// ExerciseAssetsScale writes 100,000 file records of one run under one directory, in batches
// of 1,000 (plus 1,000 elsewhere, in both path forms), and reads them all back by Under in pages
// of 1,000, then a narrow directory, exact paths, and every record with no condition (the
// floor); it logs the figures. The read by Under fails when it took more than bound and more
// than 3 times the floor (a busy machine slows both alike, a plan that sorts the directory at
// each page only the first); the narrow reads when they took more than bound. The volume part of
// ExerciseAssets (a store's test calls it in a test of its own, skipped under -short).
func ExerciseAssetsScale(t *testing.T, s AssetStore, bound time.Duration) {
	ctx := context.Background()
	const n, per = 100_000, 1000
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}})
	path := func(i int) string { return fmt.Sprintf("/mnt/show/seq%02d/sh%04d/v%03d.exr", i/10_000, i/100, i%100) }
	began := time.Now()
	for base := 0; base < n; base += per {
		b := &store.Batch{Files: make([]store.FileRecord, 0, per+per/100*2)}
		for i := base; i < base+per; i++ {
			b.Files = append(b.Files, store.FileRecord{RunID: "r1", StepKey: fmt.Sprintf("each[%d].render", i/per), Attempt: 1,
				Role: store.FileWrite, Path: path(i), State: store.FileOK, Size: int64(i), ModTime: t0, Dev: 2049, Ino: uint64(i),
				Hash: testHash, RecordedAt: t0})
		}
		for i := base; i < base+per; i += 100 { // the neighbours: another directory, and Windows forms
			b.Files = append(b.Files,
				store.FileRecord{RunID: "r1", StepKey: "other", Attempt: 1, Role: store.FileRead, Path: fmt.Sprintf("/mnt/showx/%d", i), State: store.FileOK, Hash: testHash},
				store.FileRecord{RunID: "r1", StepKey: "other", Attempt: 1, Role: store.FileRead, Path: fmt.Sprintf(`C:\mnt\show\%d`, i), State: store.FileOK, Hash: testHash})
		}
		write(t, s, b)
	}
	wrote := time.Since(began)

	began = time.Now()
	got, pages, last := 0, 0, int64(0)
	for f := (store.FileFilter{Under: "/mnt/show", Limit: per}); ; pages++ {
		page, err := s.Files(ctx, f)
		if err != nil {
			t.Fatalf("Files(%+v): %v", f, err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			if r.ID <= last || r.Path[:10] != "/mnt/show/" {
				t.Fatalf("page %d: record %d %s after ID %d; want increasing IDs under /mnt/show", pages, r.ID, r.Path, last)
			}
			last = r.ID
		}
		got += len(page)
		f.AfterID = last
	}
	read := time.Since(began)
	if got != n {
		t.Fatalf("Under /mnt/show read %d records in %d pages; want %d", got, pages, n)
	}

	began = time.Now()
	narrow := 0
	for f := (store.FileFilter{Under: "/mnt/show/seq03/sh0345", Limit: 30}); ; {
		page := files(t, s, f)
		if len(page) == 0 {
			break
		}
		narrow += len(page)
		f.AfterID = page[len(page)-1].ID
	}
	narrowTook := time.Since(began)
	if narrow != 100 {
		t.Errorf("Under /mnt/show/seq03/sh0345 read %d records; want 100", narrow)
	}
	began = time.Now()
	const lookups = 1000
	for i := 0; i < lookups; i++ {
		if r := files(t, s, store.FileFilter{Path: path(i * 97), Role: store.FileWrite}); len(r) != 1 {
			t.Fatalf("Files(Path %s) = %d records; want 1", path(i*97), len(r))
		}
	}
	lookup := time.Since(began) / lookups
	began = time.Now()
	if r := files(t, s, store.FileFilter{Under: `c:/MNT/show`}); len(r) != n/100 {
		t.Errorf("Under c:/MNT/show = %d records; want %d", len(r), n/100)
	}
	windows := time.Since(began)
	// The floor: every record, with no condition, in pages of the same size (the rows decoded).
	began = time.Now()
	floor := 0
	for f := (store.FileFilter{Limit: per}); ; {
		page := files(t, s, f)
		if len(page) == 0 {
			break
		}
		floor += len(page)
		f.AfterID = page[len(page)-1].ID
	}
	all := time.Since(began)
	t.Logf("%d file records written in %s (batches of %d); read back by Under in %d pages of %d in %s (all %d, no "+
		"condition, in %s); a narrow directory (100 of them, pages of 30) in %s; an exact path in %s each; Under a "+
		"Windows directory (%d) in %s", n+n/50, wrote.Round(time.Millisecond), per, pages, per, read.Round(time.Millisecond),
		floor, all.Round(time.Millisecond), narrowTook.Round(time.Microsecond), lookup.Round(time.Microsecond), n/100,
		windows.Round(time.Microsecond))
	// Over the bound and much slower than reading every record: a busy machine slows both alike,
	// a plan that sorts the directory at each page only the first.
	if read > bound && read > 3*all {
		t.Errorf("reading 100,000 records by Under took %s; want at most %s, or 3 times the %s all %d took", read, bound, all, floor)
	}
	for what, took := range map[string]time.Duration{"reading a narrow directory": narrowTook, "reading the Windows directory": windows} {
		if took > bound {
			t.Errorf("%s took %s; want at most %s", what, took, bound)
		}
	}
}

// FilePathsRedteam writes file records whose paths a hostile or careless tool reports — bytes
// that are not UTF-8 (a POSIX name may hold any byte but '/' and NUL), a NUL, a newline, SQL
// LIKE wildcards, quotes, a 4,096-byte name, Windows forms with odd case — and checks each is
// found by its exact path and under its directory, and that a wildcard matches only itself.
// A store that keeps text as PostgreSQL does may read such a path back with each bad byte as
// U+FFFD (finding it by the path as reported all the same). For the stores' Redteam tests.
func FilePathsRedteam(t *testing.T, s AssetStore) {
	long := "/odd/" + strings.Repeat("x", 4096)
	paths := []string{"/odd/bad\xff\xfe.usd", "/odd/nul\x00.usd", "/odd/line\nbreak.usd", "/odd/100%_done.usd",
		"/odd/100x_done.usd", "/odd/it's \"quoted\".usd", long, `C:\Odd\ÄÖÜ\x.usd`, `\\srv\odd share\x.usd`}
	b := &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}}
	for _, p := range paths {
		b.Files = append(b.Files, store.FileRecord{RunID: "r1", StepKey: "s", Attempt: 1, Role: store.FileWrite, Path: p, State: store.FileMissing})
	}
	write(t, s, b)
	cleaned := func(p string) string { return strings.ReplaceAll(strings.ToValidUTF8(p, "\uFFFD"), "\x00", "\uFFFD") }
	for _, p := range paths {
		got := files(t, s, store.FileFilter{Path: p})
		if len(got) != 1 || got[0].Path != p && got[0].Path != cleaned(p) {
			t.Errorf("Files(Path %q) = %v; want its one record", p, fileKeys(got))
		}
	}
	if got := files(t, s, store.FileFilter{Under: "/odd"}); len(got) != 7 {
		t.Errorf("Files(Under /odd) = %d records; want the 7 POSIX-form ones", len(got))
	}
	if got := files(t, s, store.FileFilter{Under: "/odd/100%_done.usd"}); len(got) != 1 {
		t.Errorf("Files(Under a name with %% and _) = %v; want itself only (no wildcards)", fileKeys(got))
	}
	if got := files(t, s, store.FileFilter{Under: `c:\odd\äöü`}); len(got) != 1 {
		t.Errorf("Files(Under c:\\odd\\äöü) = %v; want C:\\Odd\\ÄÖÜ\\x.usd (a Windows path ignores case)", fileKeys(got))
	}
	if got := files(t, s, store.FileFilter{Under: `\\SRV\odd share`}); len(got) != 1 {
		t.Errorf("Files(Under the share) = %v; want its one record", fileKeys(got))
	}
}
