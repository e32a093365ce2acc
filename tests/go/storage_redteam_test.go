package gotest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// fullDisk is a store whose writes fail (as SQLite's do on a full disk) while full is set.
type fullDisk struct {
	engine.Store
	full atomic.Bool
	// failTerminal fails that many writes that carry a workflow_terminal event.
	failTerminal atomic.Int32
	failed       atomic.Int64
}

func (d *fullDisk) Write(ctx context.Context, b *engine.StoreBatch) error {
	terminal := false
	for _, ev := range b.Events {
		terminal = terminal || ev.Type == run.EventWorkflowTerminal
	}
	if d.full.Load() || (terminal && d.failTerminal.Add(-1) >= 0) {
		d.failed.Add(1)
		return fmt.Errorf("sqlite store: commit: database or disk is full (13): %w", syscall.ENOSPC)
	}
	return d.Store.Write(ctx, b)
}

const fullDiskSpec = `
steps:
  - { id: export, tool: py__export }
  - { id: after, tool: flow__echo, args: { v: 1 }, depends_on: [export] }
`

// A full disk during a run (the step's write and the terminal write fail) ends the run: Wait
// returns a terminal run whose error kind is storage, the pull loop of that run blocks instead
// of returning at once forever, Cancel does not hang, submits fail with code storage while the
// disk is full and work again once there is space.
func TestRedteamFullDiskEndsRun(t *testing.T) {
	disk := &fullDisk{Store: engine.NewMemoryStore()}
	b := setup(t, withOptions(engine.WithStore(disk)))
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "py__export"}); err != nil {
		t.Fatal(err)
	}
	id := b.submit(fullDiskSpec, nil)
	c := b.nextCall(flowtype.LaneMain)
	disk.full.Store(true)
	if err := b.eng.Host().Complete(c.ID, flowtype.ToolResult{OutputJSON: []byte(`{"fbx":"a.fbx"}`)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	info, err := b.eng.Wait(ctx, id, 0)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if !info.Terminal || info.Status != run.StatusFailed || info.Error == nil || info.Error.Kind != run.KindStorage {
		t.Fatalf("after a full disk the run is %+v (error %+v); want terminal, failed, kind storage", info, info.Error)
	}
	if !strings.Contains(info.Error.Message, "full") {
		t.Errorf("the storage error does not say why: %q", info.Error.Message)
	}
	// The pull loop of the run (Python's run()) must block, not return at once: count the
	// returns of Pull for that run over 300 ms, each asking to wait up to 100 ms.
	pulls := 0
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; pulls++ {
		calls, err := b.eng.Host().Pull(b.ctx, flowtype.PullRequest{RunID: id, Timeout: 100 * time.Millisecond, Stop: b.eng.RunDone(id)})
		if err != nil || len(calls) > 0 {
			t.Fatalf("Pull: %v %v", calls, err)
		}
		st := b.status(id)
		if st.Terminal {
			break // a driver stops here
		}
	}
	if pulls > 5 {
		t.Errorf("the run's pull loop returned %d times in 300 ms: it spins", pulls)
	}
	if err := b.eng.Cancel(b.ctx, id, "too late"); err != nil {
		t.Errorf("Cancel of the ended run: %v", err)
	}
	if runs, err := b.eng.Runs(b.ctx, engine.RunFilter{}); err != nil || len(runs) != 1 || !runs[0].Terminal {
		t.Errorf("Runs shows %+v, %v; want the run terminal", runs, err)
	}
	// While the disk is full, a submit fails cleanly with code storage.
	_, err = b.eng.Submit(b.ctx, engine.StartRequest{Spec: parse(t, fullDiskSpec)})
	if codeOf(err) != run.CodeStorage {
		t.Fatalf("Submit on a full disk: %v (code %q); want code storage", err, codeOf(err))
	}
	// Space is back: runs work again.
	disk.full.Store(false)
	id2 := b.submit(`steps: [{ id: a, tool: flow__echo, args: { v: 1 } }]`, nil)
	if info := b.wait(id2); info.Status != run.StatusCompleted {
		t.Fatalf("after space is back: %+v", info)
	}
}

// A terminal write that fails once (a transient full disk) is retried: the run's terminal
// record reaches the store.
func TestRedteamFullDiskTerminalWriteRetried(t *testing.T) {
	disk := &fullDisk{Store: engine.NewMemoryStore()}
	b := setup(t, withOptions(engine.WithStore(disk)))
	disk.failTerminal.Store(2)
	id := b.submit(`steps: [{ id: a, tool: flow__echo, args: { v: 1 } }]`, nil)
	info := b.wait(id)
	if info.Status != run.StatusCompleted || info.Error != nil {
		t.Fatalf("%+v %+v", info, info.Error)
	}
	rec, err := disk.Store.GetRun(b.ctx, id)
	if err != nil || rec.Status != run.StatusCompleted {
		t.Fatalf("the stored record is %+v, %v; want completed (the terminal write retried)", rec, err)
	}
	if n := disk.failed.Load(); n != 2 {
		t.Fatalf("%d writes failed; want the 2 injected", n)
	}
}

// Deleting <db>.lock while an engine owns the database (a run of it waiting in a host call)
// does not let a second engine in: the second Open fails with db_locked, instead of marking
// the first engine's live run interrupted, and the run finishes in the first engine.
func TestRedteamDeletedLockFileLeavesRunsAlone(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "windows" {
		t.Skip("the database byte lock is on Linux and Windows only (OFD locks, LockFileEx)")
	}
	db := filepath.Join(t.TempDir(), "runs.db")
	b := setup(t, withConfig(func(c *engine.Config) { c.DB = db }))
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "py__export"}); err != nil {
		t.Fatal(err)
	}
	id := b.submit(`steps: [{ id: export, tool: py__export }]`, nil)
	c := b.nextCall(flowtype.LaneMain)
	err := os.Remove(db + ".lock")
	if runtime.GOOS == "windows" {
		// Windows refuses to delete a file another handle has open without FILE_SHARE_DELETE:
		// the lock file stays the owner's (and the database byte lock would hold anyway).
		if err == nil {
			t.Fatal("the lock file of a running owner was deleted")
		}
	} else if err != nil {
		t.Fatal(err)
	}
	second, err := engine.Open(b.ctx, engine.Config{DB: db})
	if err == nil {
		second.Close(context.Background())
		t.Fatal("a second engine opened the database after its lock file was deleted")
	}
	if codeOf(err) != run.CodeDBLocked {
		t.Fatalf("second Open: %v (code %s); want db_locked", err, codeOf(err))
	}
	if st := b.status(id); st.Status != run.StatusRunning {
		t.Fatalf("the live run is %s after a second Open", st.Status)
	}
	if err := b.eng.Host().Complete(c.ID, flowtype.ToolResult{OutputJSON: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	if info := b.wait(id); info.Status != run.StatusCompleted {
		t.Fatalf("%+v", info)
	}
}
