package gotest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// A step's outputs are hashed moments after its tool wrote them, so their records are racy
// (modified within the racy window, 2 s, of their read: filehash.IsRacy), and a process that
// did not read them since must read them again. A later read that finds them as recorded, 2 s
// or more after their modification, is stored with the record (VerifiedAt), so that a fresh
// engine — each `dcc-flow run` — trusts their stat from then on (docs/design/filehash.md, "The
// stat cache"). These tests open one engine after another on one database: SQLite and PostgreSQL.

// racyWindow is filehash.RacyWindow (an internal package).
const racyWindow = 2 * time.Second

// persistentStores runs fn with a database each engine it opens shares: a SQLite file (one
// engine at a time) and a PostgreSQL database.
func persistentStores(t *testing.T, fn func(t *testing.T, db string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); fn(t, filepath.Join(t.TempDir(), "flow.db")) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); fn(t, pgtest.DB(t)) })
}

// bakeOutputSize is the size of what dcc__bake writes: large enough that a read shows.
const bakeOutputSize = 8 << 20

// bakeEngine opens an engine on db (closed when t ends) with dcc__bake served: it writes
// args.out (bakeOutputSize bytes), sets its modification time age before now (0: leaves it),
// and reports the write. The server counts the calls.
func bakeEngine(t *testing.T, db string, age time.Duration) (*testBundle, *server) {
	t.Helper()
	b := setup(t, withConfig(func(c *engine.Config) { c.DB = db }))
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "dcc__bake", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	srv := b.serve(flowtype.LaneWorker, func(c flowtype.PendingCall) flowtype.ToolResult {
		out := c.Args["out"].(string)
		if err := os.WriteFile(out, bytes.Repeat([]byte("baked "), bakeOutputSize/6+1)[:bakeOutputSize], 0o644); err != nil {
			return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "error", Message: err.Error()}}
		}
		if age > 0 {
			mod := time.Now().Add(-age)
			if err := os.Chtimes(out, mod, mod); err != nil {
				return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "error", Message: err.Error()}}
			}
		}
		return flowtype.ToolResult{Output: map[string]any{"out": out}, Files: []flowtype.FileUse{{Path: out, Role: flowtype.FileWrite}}}
	})
	return b, srv
}

func bakeSpec(out string) string {
	return fmt.Sprintf("name: bake\nsteps:\n  - {id: bake, tool: dcc__bake, args: {out: %q}, cache: true}\n", filepath.ToSlash(out))
}

// modTime is the modification time of the file at p.
func modTime(t *testing.T, p string) time.Time {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}

// waitPast waits until the wall clock is past t: what makes a read of a file modified at t-2s
// not racy (not an assertion: the tests' outcomes do not depend on how long it takes).
func waitPast(t time.Time) {
	for time.Now().Before(t) {
		time.Sleep(time.Until(t) + time.Millisecond)
	}
}

// forgeFile rewrites the file at p in place with other bytes of the same size and puts its
// modification time back: its stat (size, modification time, device, inode) is as it was, so
// only a read can tell. An engine that serves a cache hit from it did not read it.
func forgeFile(t *testing.T, p string) {
	t.Helper()
	mod := modTime(t, p)
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
	if err := os.Chtimes(p, mod, mod); err != nil {
		t.Fatal(err)
	}
}

// A fresh engine serves a cache hit of an 8 MiB output without reading it once a lookup 2 s or
// more after the output's modification confirmed its record: the output forged under the same
// stat is served (a read would have seen it, and called the tool). And Engine.Stale likewise.
func TestAFreshEngineTrustsAConfirmedOutputByItsStat(t *testing.T) {
	t.Parallel()
	persistentStores(t, func(t *testing.T, db string) {
		dir := t.TempDir()
		out := filepath.Join(dir, "sh010.bin")
		// The tool dates its output 1 s back: its record, read moments later, is racy (unless
		// the machine stalls a second between the write and the hash: then the test proves less,
		// and passes all the same).
		t.Run("1-first run", func(t *testing.T) {
			b, srv := bakeEngine(t, db, time.Second)
			if info := b.run(bakeSpec(out), nil); info.Status != run.StatusCompleted || srv.calls.Load() != 1 {
				t.Fatalf("first run: %s, %d calls; want completed, the tool called", info.Status, srv.calls.Load())
			}
		})
		if t.Failed() {
			return
		}
		waitPast(modTime(t, out).Add(racyWindow))
		t.Run("2-a fresh engine reads and confirms", func(t *testing.T) {
			b, srv := bakeEngine(t, db, 0)
			if info := b.run(bakeSpec(out), nil); info.Status != run.StatusCompleted || srv.calls.Load() != 0 {
				t.Fatalf("second run: %s, %d calls; want a cache hit", info.Status, srv.calls.Load())
			}
			if stale, err := b.eng.Stale(b.ctx, []string{dir}); err != nil || len(stale) != 0 {
				t.Fatalf("Stale = %+v, %v; want nothing", stale, err)
			}
		})
		forgeFile(t, out)
		t.Run("3-a fresh engine trusts the stat", func(t *testing.T) {
			b, srv := bakeEngine(t, db, 0)
			if stale, err := b.eng.Stale(b.ctx, []string{dir}); err != nil || len(stale) != 0 {
				t.Errorf("Stale = %+v, %v; want nothing stale: the output trusted by its stat, not read", stale, err)
			}
			info := b.run(bakeSpec(out), nil)
			if info.Status != run.StatusCompleted || srv.calls.Load() != 0 {
				t.Errorf("third run: %s, %d calls (%s); want a cache hit without reading the output (its record confirmed)",
					info.Status, srv.calls.Load(), enterDetail(b, info.ID, "bake"))
			}
		})
	})
}

// The safety side: a lookup within the racy window of the output's modification reads it but
// confirms nothing, so a change made after it under the same stat (size, modification time,
// inode: a write in the same timestamp tick) is still seen by a fresh engine after the window:
// a miss that says the output changed, and the tool called again.
func TestARacyReadConfirmsNothingAndAChangeIsSeen(t *testing.T) {
	t.Parallel()
	persistentStores(t, func(t *testing.T, db string) {
		for try := 1; ; try++ {
			dir := t.TempDir()
			out := filepath.Join(dir, "sh010.bin")
			var early bool
			t.Run(fmt.Sprintf("try %d, first run", try), func(t *testing.T) {
				b, srv := bakeEngine(t, db, 0)
				if info := b.run(bakeSpec(out), nil); info.Status != run.StatusCompleted || srv.calls.Load() != 1 {
					t.Fatalf("first run: %s, %d calls; want completed, the tool called", info.Status, srv.calls.Load())
				}
			})
			t.Run(fmt.Sprintf("try %d, a fresh engine within the window", try), func(t *testing.T) {
				b, srv := bakeEngine(t, db, 0)
				if info := b.run(bakeSpec(out), nil); info.Status != run.StatusCompleted || srv.calls.Load() != 0 {
					t.Fatalf("second run: %s, %d calls; want a cache hit", info.Status, srv.calls.Load())
				}
				// Its read was racy only if it ended within the window.
				early = time.Now().Before(modTime(t, out).Add(racyWindow))
			})
			if t.Failed() {
				return
			}
			if !early {
				if try == 3 {
					t.Fatal("the machine is too slow: three times the second run ended 2 s or more after the output was written")
				}
				continue
			}
			forgeFile(t, out)
			waitPast(modTime(t, out).Add(racyWindow))
			t.Run("after the window", func(t *testing.T) {
				b, srv := bakeEngine(t, db, 0)
				info := b.run(bakeSpec(out), nil)
				if info.Status != run.StatusCompleted || srv.calls.Load() != 1 {
					t.Errorf("third run: %s, %d calls; want the tool called again (the output changed)", info.Status, srv.calls.Load())
				}
				mustContain(t, "the miss's reason", enterDetail(b, info.ID, "bake"), "output changed: "+out)
			})
			return
		}
	})
}

// An engine opened read-only beside the owner of a SQLite file (`dcc-flow stale` while a server
// runs) cannot store a confirmation: Stale still answers, reading the racy output, and says
// nothing is stale — the confirmation it could not store is no error.
func TestStaleOfARacyRecordOnAReadOnlyEngine(t *testing.T) {
	t.Parallel()
	for try := 1; ; try++ {
		dir := t.TempDir()
		db := filepath.Join(dir, "flow.db")
		out := filepath.Join(dir, "sh010.bin")
		var racy bool
		t.Run(fmt.Sprintf("try %d", try), func(t *testing.T) {
			b, srv := bakeEngine(t, db, 0)
			if info := b.run(bakeSpec(out), nil); info.Status != run.StatusCompleted || srv.calls.Load() != 1 {
				t.Fatalf("first run: %s, %d calls; want completed, the tool called", info.Status, srv.calls.Load())
			}
			// The record is racy for sure only if the run ended within the window.
			racy = time.Now().Before(modTime(t, out).Add(racyWindow))
			if !racy {
				return
			}
			waitPast(modTime(t, out).Add(racyWindow))
			ro, err := engine.Open(b.ctx, engine.Config{DB: db, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = ro.Close(b.ctx) }()
			for i := 0; i < 2; i++ {
				if stale, err := ro.Stale(b.ctx, []string{dir}); err != nil || len(stale) != 0 {
					t.Fatalf("read-only Stale %d = %+v, %v; want nothing stale and no error", i+1, stale, err)
				}
			}
			// Not confirmed: a change under the same stat is still seen by the owner.
			forgeFile(t, out)
			if stale, err := b.eng.Stale(b.ctx, []string{dir}); err != nil || len(stale) != 1 || stale[0].Reason != "modified since it was made" {
				t.Errorf("the owner's Stale after the read-only ones = %+v, %v; want the forged output modified since it was made", stale, err)
			}
		})
		if racy || t.Failed() {
			return
		}
		if try == 3 {
			t.Fatal("the machine is too slow: three times the first run ended 2 s or more after the output was written")
		}
	}
}
