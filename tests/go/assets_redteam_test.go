package gotest

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
	"github.com/zeebo/blake3"
)

// Files that vanish, files that cannot be read: each is recorded with its state and why, the
// step's outcome is the tool's, and such an attempt leaves no cache entry (nothing could check it
// later), so the next run calls the tool again.
func TestRedteamAssetsVanishedAndUnreadableFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gone := filepath.Join(dir, "gone.exr")
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "flaky", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	srv := b.serve(flowtype.LaneWorker, func(c flowtype.PendingCall) flowtype.ToolResult {
		writeFile(t, gone, "frame")
		if err := os.Remove(gone); err != nil { // written, then removed before the attempt ends
			t.Error(err)
		}
		return flowtype.ToolResult{Output: map[string]any{"ok": true}, Files: []flowtype.FileUse{{Path: gone, Role: flowtype.FileWrite}}}
	})
	text := fmt.Sprintf("name: odd\nsteps:\n  - {id: s, tool: flaky, reads: [%q], cache: true}\n", dir) // a directory as an input
	first := b.run(text, nil)
	if first.Status != run.StatusCompleted {
		t.Fatalf("run: %s", first.Status)
	}
	states := map[string]engine.FileInfo{}
	for _, f := range attemptFiles(t, b, first.ID, "s") {
		states[f.Role] = f
	}
	if r := states["read"]; r.State != "unreadable" || !strings.Contains(r.Error, "directory") || r.Hash != "" {
		t.Fatalf("the directory read: %+v", r)
	}
	if w := states["write"]; w.State != "missing" || w.Path != gone || w.Hash != "" || w.Error == "" {
		t.Fatalf("the vanished write: %+v", w)
	}
	if info := b.run(text, nil); info.Status != run.StatusCompleted || srv.calls.Load() != 2 {
		t.Fatalf("second run: %s, %d calls (want the tool called again: no entry)", info.Status, srv.calls.Load())
	}
}

// Two engines on one PostgreSQL database run, at once, a step with cache: true that writes the
// same output: both runs complete, each attempt records what it found, the lineage of the file
// names one of the two attempts, and a later run is served from the cache only by an entry whose
// recorded output still matches the file — never a stale one.
func TestRedteamAssetsTwoEnginesWriteTheSameOutputAtOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "shot.usdc")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := make(chan struct{})
	open := func(name string) *engine.Engine {
		e, err := engine.Open(ctx, engine.Config{DB: url, StallAfterSecs: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close(context.Background()) })
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "bake", Lane: flowtype.LaneWorker}); err != nil {
			t.Fatal(err)
		}
		go func() {
			for ctx.Err() == nil {
				cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 1, Timeout: 50 * time.Millisecond})
				if err != nil {
					return
				}
				for _, c := range cs {
					<-start
					_ = os.WriteFile(out, []byte("baked by "+name), 0o644)
					_ = e.Host().Complete(c.ID, flowtype.ToolResult{Output: map[string]any{"by": name},
						Files: []flowtype.FileUse{{Path: out, Role: flowtype.FileWrite}}})
				}
			}
		}()
		return e
	}
	a, b := open("a"), open("b")
	s := parse(t, "name: bake\nsteps:\n  - {id: bake, tool: bake, cache: true}\n")
	var ids [2]string
	var wg sync.WaitGroup
	for i, e := range []*engine.Engine{a, b} {
		id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
		wg.Add(1)
		go func(e *engine.Engine, id string) {
			defer wg.Done()
			if info, err := e.Wait(ctx, id, 20*time.Second); err != nil || info.Status != run.StatusCompleted {
				t.Errorf("run %s: %v %+v", id, err, info)
			}
		}(e, id)
	}
	close(start) // both calls write now
	wg.Wait()
	hashes := map[string]bool{
		blake3Of(t, out): true, // what the file holds now
	}
	for _, name := range []string{"a", "b"} {
		p := filepath.Join(t.TempDir(), name)
		_ = os.WriteFile(p, []byte("baked by "+name), 0o644)
		hashes[blake3Of(t, p)] = true
	}
	for i, e := range []*engine.Engine{a, b} {
		steps, err := e.Steps(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range steps {
			for _, at := range st.AttemptHistory {
				for _, f := range at.Files {
					if f.State != "ok" || !hashes[f.Hash] {
						t.Fatalf("run %s recorded %+v; want an ok record of one of the two contents", ids[i], f)
					}
				}
			}
		}
	}
	n, err := a.Lineage(ctx, out, 1)
	if err != nil || n.Made == nil || (n.Made.RunID != ids[0] && n.Made.RunID != ids[1]) {
		t.Fatalf("lineage %+v %v", n, err)
	}
	// A third run: served from the cache only by an entry whose recorded output is the file now.
	third, err := a.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	info, err := a.Wait(ctx, third, 20*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("third run: %v %+v", err, info)
	}
	steps, _ := a.Steps(ctx, third)
	now := blake3Of(t, out)
	for _, st := range steps {
		if !st.Cached {
			continue
		}
		var from struct {
			Cache struct {
				RunID string `json:"run_id"`
			} `json:"cache"`
		}
		for _, ev := range eventsOf(t, a, third) {
			if ev.Type == run.EventStepExit && ev.StepKey == st.Key {
				mustUnmarshal(t, ev.Detail, &from)
			}
		}
		src, err := a.Steps(ctx, from.Cache.RunID)
		if err != nil || len(src) == 0 || len(src[0].AttemptHistory) == 0 {
			t.Fatalf("the run the cache hit came from (%q): %v", from.Cache.RunID, err)
		}
		for _, f := range src[0].AttemptHistory[0].Files {
			if f.Hash != now {
				t.Fatalf("served from run %s, whose output %s no longer holds: %+v (the file now %s)", from.Cache.RunID, f.Path, f, now)
			}
		}
	}
}

// eventsOf returns the events of run id.
func eventsOf(t *testing.T, e *engine.Engine, id string) []run.Event {
	t.Helper()
	evs, err := e.PollEvents(context.Background(), engine.EventQuery{RunID: id, Max: 10000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// blake3Of is the hash the engine records of the file at path ("blake3:" and 64 hex digits).
func blake3Of(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := blake3.Sum256(data)
	return "blake3:" + hex.EncodeToString(sum[:])
}
