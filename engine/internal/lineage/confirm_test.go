package lineage

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/filehash"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// TestRecordedIsRacyByVerifiedAt: a record is trusted by its stat only when its hash was read
// RacyWindow or more after its modification time (VerifiedAt), to the nanosecond; a record
// never read (VerifiedAt zero, as stored before the column) is racy whatever its RecordedAt.
func TestRecordedIsRacyByVerifiedAt(t *testing.T) {
	t.Parallel()
	mod := time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)
	rec := store.FileRecord{Path: "/a", State: store.FileOK, Hash: "blake3:x", ModTime: mod, RecordedAt: mod.Add(time.Hour)}
	for _, tc := range []struct {
		verified time.Time
		racy     bool
	}{
		{time.Time{}, true},
		{mod, true},
		{mod.Add(filehash.RacyWindow - time.Nanosecond), true},
		{mod.Add(filehash.RacyWindow), false},
		{mod.Add(time.Hour), false},
	} {
		rec.VerifiedAt = tc.verified
		if r := Recorded(rec); r.Racy != tc.racy || (tc.verified.IsZero() != (r.ReadAt == 0)) {
			t.Errorf("VerifiedAt %v: Recorded = %+v; want Racy %v", tc.verified, r, tc.racy)
		}
	}
}

// TestConfirmation: a racy record is confirmed by a read that found its hash with its stat and
// was not racy itself; not by a racy read, another hash, another stat, a check that did not read
// (ReadAt 0), nor when the record is trusted already.
func TestConfirmation(t *testing.T) {
	t.Parallel()
	mod := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	rec := store.FileRecord{ID: 3, Path: "/a", State: store.FileOK, Hash: "blake3:x", Size: 5, ModTime: mod, Dev: 1, Ino: 2,
		VerifiedAt: mod.Add(time.Second)}
	read := mod.Add(filehash.RacyWindow)
	cur := filehash.Result{Info: filehash.Info{Path: "/a", Size: 5, ModTime: mod.UnixNano(), Dev: 1, Ino: 2}, State: filehash.StateOK,
		Hash: "blake3:x", ReadAt: read.UnixNano()}
	c, ok := Confirmation(rec, cur)
	if !ok || c.ID != 3 || !c.VerifiedAt.Equal(read) || Recorded(c).Racy {
		t.Fatalf("Confirmation = %+v, %v; want the record verified at %v, no longer racy", c, ok, read)
	}
	for name, edit := range map[string]func(r *store.FileRecord, c *filehash.Result){
		"a racy read":        func(_ *store.FileRecord, c *filehash.Result) { c.ReadAt-- },
		"another hash":       func(_ *store.FileRecord, c *filehash.Result) { c.Hash = "blake3:y" },
		"another size":       func(_ *store.FileRecord, c *filehash.Result) { c.Size++ },
		"another mtime":      func(_ *store.FileRecord, c *filehash.Result) { c.ModTime++ },
		"another inode":      func(_ *store.FileRecord, c *filehash.Result) { c.Ino++ },
		"no read":            func(_ *store.FileRecord, c *filehash.Result) { c.ReadAt = 0 },
		"a file not ok":      func(_ *store.FileRecord, c *filehash.Result) { c.State, c.Hash = filehash.StateUnstable, "" },
		"a trusted record":   func(r *store.FileRecord, _ *filehash.Result) { r.VerifiedAt = mod.Add(filehash.RacyWindow) },
		"a record not ok":    func(r *store.FileRecord, _ *filehash.Result) { r.State = store.FileUnstable },
		"a record with none": func(r *store.FileRecord, _ *filehash.Result) { r.Hash = "" },
	} {
		r, c := rec, cur
		edit(&r, &c)
		if got, ok := Confirmation(r, c); ok {
			t.Errorf("%s: Confirmation = %+v; want none", name, got)
		}
	}
}

// forge rewrites the file at p with other bytes of the same size and puts its modification
// time back: a stat cannot tell, only a read can (the inode stays: written in place).
func forge(t *testing.T, p string) {
	t.Helper()
	before, err := filehash.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] ^= 0x20
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mod := time.Unix(0, before.ModTime)
	if err := os.Chtimes(p, mod, mod); err != nil {
		t.Fatal(err)
	}
	if after, err := filehash.Stat(p); err != nil || !after.Same(before) {
		t.Fatalf("forging %s: stat %+v, %v; want the same as %+v", p, after, err, before)
	}
}

// TestStaleConfirmsRacyRecords: an output recorded racy (read within RacyWindow of its
// modification) is read by Stale each time — until a read RacyWindow or more after the
// modification confirms it in the store: from then on its stat stands for its hash, so a
// fresh Stale does not read it (its content forged under the same stat goes unseen, which
// shows it was not read). A record confirmed by a read within the window is still read.
func TestStaleConfirmsRacyRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// the record's VerifiedAt after the modification time (racy: < RacyWindow)
		recorded time.Duration
	}{
		{"racy by a second", time.Second},
		{"racy by a nanosecond", filehash.RacyWindow - time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newStudio(t)
			st.write("chair.usda", "chair")
			st.write("layout.usda", "layout of chair")
			mod := time.Now().Add(-time.Hour).Round(time.Second) // long ago: the check's read is not racy
			if err := os.Chtimes(st.path("layout.usda"), mod, mod); err != nil {
				t.Fatal(err)
			}
			rec := st.record("layout.usda", store.FileWrite)
			rec.VerifiedAt = rec.ModTime.Add(tc.recorded) // as if hashed just after the tool wrote it
			in := st.record("chair.usda", store.FileRead)
			rec.RunID, rec.StepKey, rec.Attempt = "r1", "layout", 1
			in.RunID, in.StepKey, in.Attempt = "r1", "layout", 1
			st.n++
			if err := st.s.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r1", Name: "shot", CreatedAt: t0, UpdatedAt: t0,
				SpecJSON: []byte("{}"), Inputs: []byte("{}")}}, Files: []store.FileRecord{in, rec}}); err != nil {
				t.Fatal(err)
			}
			if out, err := Stale(ctx, st.s, CheckRecorded, nil); err != nil || len(out) != 0 {
				t.Fatalf("Stale = %+v, %v; want nothing stale", out, err)
			}
			got, err := st.s.Files(ctx, store.FileFilter{Path: rec.Path, Role: store.FileWrite})
			if err != nil || len(got) != 1 || Recorded(got[0]).Racy {
				t.Fatalf("after Stale, the record %+v (%v); want it confirmed (not racy)", got, err)
			}
			forge(t, st.path("layout.usda"))
			if out, err := Stale(ctx, st.s, CheckRecorded, nil); err != nil || len(out) != 0 {
				t.Errorf("Stale of the confirmed record = %+v, %v; want nothing stale: trusted by its stat, not read", out, err)
			}

			// The safety side: the same record confirmed by a racy read only is read again, and
			// the forged content is seen.
			racy := got[0]
			racy.VerifiedAt = racy.ModTime.Add(filehash.RacyWindow - time.Nanosecond)
			if err := st.s.Write(ctx, &store.Batch{Files: []store.FileRecord{racy}}); err != nil {
				t.Fatal(err)
			}
			out, err := Stale(ctx, st.s, func(ctx context.Context, r store.FileRecord) filehash.Result {
				if r.Role == store.FileWrite && !r.VerifiedAt.Equal(racy.VerifiedAt) {
					t.Errorf("Stale checked %+v; want the racy record", r)
				}
				return CheckRecorded(ctx, r)
			}, nil)
			if err != nil || len(out) != 1 || out[0].Reason != "modified since it was made" {
				t.Errorf("Stale of a racy record whose file was forged = %+v, %v; want it modified since it was made", out, err)
			}
		})
	}
}
