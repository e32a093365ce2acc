package lineage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/filehash"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memstore"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

var t0 = time.Date(2026, 11, 28, 22, 0, 0, 0, time.UTC)

// studio is a memory store and a folder of real files, with helpers that record an attempt
// reading and writing some of them, as the engine does.
type studio struct {
	t   *testing.T
	dir string
	s   *memstore.Store
	n   int
}

func newStudio(t *testing.T) *studio {
	return &studio{t: t, dir: t.TempDir(), s: memstore.New()}
}

func (st *studio) path(name string) string { return filepath.Join(st.dir, name) }

func (st *studio) write(name, text string) {
	st.t.Helper()
	if err := os.WriteFile(st.path(name), []byte(text), 0o644); err != nil {
		st.t.Fatal(err)
	}
}

func (st *studio) record(name string, role store.FileRole) store.FileRecord {
	h := filehash.HashFile(context.Background(), st.path(name))
	return store.FileRecord{Role: role, Path: h.Path, State: store.FileState(h.State), Size: h.Size,
		ModTime: h.Modified(), Dev: h.Dev, Ino: h.Ino, Hash: h.Hash, RecordedAt: time.Now(), VerifiedAt: time.Unix(0, h.ReadAt).UTC()}
}

// step records one attempt of a new run: tool reads reads and writes writes (which it writes
// first, with text made of its inputs).
func (st *studio) step(tool string, reads []string, writes ...string) string {
	st.t.Helper()
	st.n++
	id := fmt.Sprintf("r%d", st.n)
	for _, w := range writes {
		st.write(w, fmt.Sprintf("%s of %v at %d", tool, reads, st.n))
	}
	var recs []store.FileRecord
	for _, r := range reads {
		recs = append(recs, st.record(r, store.FileRead))
	}
	for _, w := range writes {
		recs = append(recs, st.record(w, store.FileWrite))
	}
	for i := range recs {
		recs[i].RunID, recs[i].StepKey, recs[i].Attempt = id, tool, 1
	}
	err := st.s.Write(context.Background(), &store.Batch{
		CreateRuns: []store.Run{{ID: id, Name: "shot", Status: run.StatusCompleted, CreatedAt: t0, UpdatedAt: t0, SpecJSON: []byte("{}"), Inputs: []byte("{}")}},
		Steps:      []store.Step{{RunID: id, Key: tool, StepID: tool, Kind: "tool", Status: run.StepCompleted, Attempt: 1, Insert: true}},
		Attempts: []store.Attempt{{RunID: id, StepKey: tool, Attempt: 1, Tool: tool, Status: run.StepCompleted,
			Args: []byte(`{"shot":"sh010"}`), Env: []byte(`{"dcc":"maya","version":"2025.3"}`), StartedAt: t0}},
		Files: recs,
	})
	if err != nil {
		st.t.Fatal(err)
	}
	return id
}

func check(ctx context.Context, rec store.FileRecord) filehash.Result {
	return filehash.HashFile(ctx, rec.Path)
}

// chain: layout reads chair and table (sources), writes layout; lighting reads layout and
// writes lit; render reads lit and writes frame.
func chain(t *testing.T) *studio {
	st := newStudio(t)
	st.write("chair.usda", "chair")
	st.write("table.usda", "table")
	st.step("layout", []string{"chair.usda", "table.usda"}, "layout.usda")
	st.step("lighting", []string{"layout.usda"}, "lit.usda")
	st.step("render", []string{"lit.usda"}, "frame.exr")
	return st
}

func TestTraceFollowsTheWritersOfTheInputs(t *testing.T) {
	t.Parallel()
	st := chain(t)
	ctx := context.Background()
	n, err := Trace(ctx, st.s, check, st.path("frame.exr"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if n.Made == nil || n.Made.Tool != "render" || n.Made.Workflow != "shot" || n.Now != NowUnchanged ||
		string(n.Made.Env) != `{"dcc":"maya","version":"2025.3"}` || string(n.Made.Args) != `{"shot":"sh010"}` {
		t.Fatalf("root %+v made %+v", n, n.Made)
	}
	lit := n.Made.Inputs[0]
	layout := lit.Made.Inputs[0]
	if lit.Made.Tool != "lighting" || layout.Made.Tool != "layout" || len(layout.Made.Inputs) != 2 {
		t.Fatalf("lit %+v layout %+v", lit.Made, layout.Made)
	}
	for _, src := range layout.Made.Inputs {
		if src.Made != nil || src.Now != NowUnchanged || !strings.HasPrefix(src.Hash, "blake3:") {
			t.Fatalf("source %+v", src)
		}
	}
	// Depth 2: the lighting step's input is cut, and says so.
	n, err = Trace(ctx, st.s, check, st.path("frame.exr"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if in := n.Made.Inputs[0].Made.Inputs[0]; in.Made != nil || !in.Cut {
		t.Fatalf("at depth 2 the layout is %+v; want it cut", in)
	}
	// An input changed since: the node says so.
	st.write("chair.usda", "chair, taller")
	n, _ = Trace(ctx, st.s, check, st.path("layout.usda"), 1)
	if n.Made.Inputs[0].Now != NowChanged || n.Made.Inputs[1].Now != NowUnchanged {
		t.Fatalf("inputs now %s %s", n.Made.Inputs[0].Now, n.Made.Inputs[1].Now)
	}
	if _, err := Trace(ctx, st.s, check, st.path("nothing.usda"), 1); err != ErrNotRecorded {
		t.Fatalf("an unrecorded path: %v", err)
	}
}

func TestStaleIsTransitiveAndSaysWhy(t *testing.T) {
	t.Parallel()
	st := chain(t)
	ctx := context.Background()
	if got, err := Stale(ctx, st.s, check, nil); err != nil || len(got) != 0 {
		t.Fatalf("fresh outputs: %+v %v", got, err)
	}
	st.write("chair.usda", "chair, taller")
	got, err := Stale(ctx, st.s, check, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		st.path("layout.usda"): "input changed: " + st.path("chair.usda"),
		st.path("lit.usda"):    "made from stale " + st.path("layout.usda"),
		st.path("frame.exr"):   "made from stale " + st.path("lit.usda"),
	}
	if len(got) != len(want) {
		t.Fatalf("stale %+v", got)
	}
	for _, f := range got {
		if want[f.Path] != f.Reason || f.RunID == "" {
			t.Fatalf("%s: %q; want %q", f.Path, f.Reason, want[f.Path])
		}
	}
	// Asked about one file, staleness still follows the outputs upstream of it.
	got, err = Stale(ctx, st.s, check, []string{st.path("frame.exr")})
	if err != nil || len(got) != 1 || got[0].Reason != "made from stale "+st.path("lit.usda") {
		t.Fatalf("stale of the frame alone: %+v %v", got, err)
	}
	// Under one directory only; an output modified or deleted since it was made.
	st.step("layout", []string{"chair.usda", "table.usda"}, "layout.usda") // rebuilt: lit and frame were made from the old one
	if err := os.Remove(st.path("frame.exr")); err != nil {
		t.Fatal(err)
	}
	got, _ = Stale(ctx, st.s, check, []string{st.path("frame.exr")})
	if len(got) != 1 || got[0].Reason != "deleted since it was made" {
		t.Fatalf("deleted output: %+v", got)
	}
	got, _ = Stale(ctx, st.s, check, []string{st.path("lit.usda")})
	if len(got) != 1 || got[0].Reason != "input changed: "+st.path("layout.usda") {
		t.Fatalf("lit after the layout was rebuilt: %+v", got)
	}
	st.write("lit.usda", "hand-edited")
	got, _ = Stale(ctx, st.s, check, []string{st.dir})
	reasons := map[string]string{}
	for _, f := range got {
		reasons[filepath.Base(f.Path)] = f.Reason
	}
	if reasons["lit.usda"] != "modified since it was made" || reasons["layout.usda"] != "" || reasons["frame.exr"] != "deleted since it was made" {
		t.Fatalf("reasons %v", reasons)
	}
}

// A file that a glob of an attempt's declared reads matches now, and did not when the attempt
// ran, makes its outputs stale ("input added"), and those made from them in turn; a pattern
// whose matches are all among the attempt's reads adds nothing.
func TestStaleSeesAFileAddedToAGlob(t *testing.T) {
	t.Parallel()
	st := newStudio(t)
	ctx := context.Background()
	if err := os.Mkdir(st.path("assets"), 0o755); err != nil {
		t.Fatal(err)
	}
	st.write("assets/chair.usda", "chair")
	st.write("assets/table.usda", "table")
	layout := st.step("layout", []string{"assets/chair.usda", "assets/table.usda"}, "layout.usda")
	st.step("render", []string{"layout.usda"}, "frame.exr")
	pattern, err := filehash.AbsPattern(st.dir, "assets/*.usda")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.s.Write(ctx, &store.Batch{Files: []store.FileRecord{{RunID: layout, StepKey: "layout", Attempt: 1,
		Role: store.FilePattern, Path: pattern, State: store.FileOK, RecordedAt: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	for _, dirs := range [][]string{nil, {st.dir}, {st.path("frame.exr")}} {
		if got, err := Stale(ctx, st.s, check, dirs); err != nil || len(got) != 0 {
			t.Fatalf("Stale(%q) before a file was added: %+v, %v; want nothing stale", dirs, got, err)
		}
	}
	st.write("assets/lamp.usda", "lamp")
	st.write("assets/notes.txt", "not a layer") // matches no pattern
	lamp := "input added: " + st.path("assets/lamp.usda")
	for _, tc := range []struct {
		dirs []string
		want map[string]string
	}{
		{nil, map[string]string{st.path("layout.usda"): lamp, st.path("frame.exr"): "made from stale " + st.path("layout.usda")}},
		{[]string{st.path("layout.usda")}, map[string]string{st.path("layout.usda"): lamp}},
		// Asked about the frame alone: its upstream layout's pattern is read too.
		{[]string{st.path("frame.exr")}, map[string]string{st.path("frame.exr"): "made from stale " + st.path("layout.usda")}},
	} {
		got, err := Stale(ctx, st.s, check, tc.dirs)
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("Stale(%q) = %+v, %v; want %v", tc.dirs, got, err, tc.want)
		}
		for _, f := range got {
			if tc.want[f.Path] != f.Reason {
				t.Errorf("Stale(%q): %s: %q; want %q", tc.dirs, f.Path, f.Reason, tc.want[f.Path])
			}
		}
	}
	// Rebuilt with the lamp read: nothing stale again, though the pattern is recorded again.
	again := st.step("layout", []string{"assets/chair.usda", "assets/lamp.usda", "assets/table.usda"}, "layout.usda")
	st.step("render", []string{"layout.usda"}, "frame.exr")
	if err := st.s.Write(ctx, &store.Batch{Files: []store.FileRecord{{RunID: again, StepKey: "layout", Attempt: 1,
		Role: store.FilePattern, Path: pattern, State: store.FileOK, RecordedAt: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := Stale(ctx, st.s, check, nil); err != nil || len(got) != 0 {
		t.Fatalf("Stale after the rebuild: %+v, %v; want nothing stale", got, err)
	}
}
