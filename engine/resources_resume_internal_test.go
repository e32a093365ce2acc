package engine

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// killableStore writes through until kill, then fails every write, as the store of a process
// killed at that moment (what it committed stays; nothing after it reaches the file).
type killableStore struct {
	store.Store
	dead atomic.Bool
}

func (k *killableStore) Write(ctx context.Context, b *store.Batch) error {
	if k.dead.Load() {
		return errKilled
	}
	return k.Store.Write(ctx, b)
}

func (k *killableStore) Close() error { return nil } // the test closes the file itself

// A step that was waiting_resources when its engine died never started its call: the next
// engine on the file finds it interrupted (its run too), and a resume simply starts it again —
// it takes its units (the dead engine's count nothing) and its tool is called once.
func TestWaitingForResourcesAcrossACrashAndResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	file, err := storeopen.File(ctx, path, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{StallAfterSecs: -1, Resources: map[string]ResourceConfig{"houdini": {Limit: 1}}}
	k := &killableStore{Store: file}
	a, err := Open(ctx, cfg, WithStore(k))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RegisterTool(flowtype.ToolInfo{Name: "cook", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	s, err := spec.ParseString("name: sim\nsteps: [{id: cook, tool: cook, resources: {houdini: 1}}]")
	if err != nil {
		t.Fatal(err)
	}
	holder, err := a.Submit(ctx, StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	calls, err := a.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 1, Timeout: 10 * time.Second})
	if err != nil || len(calls) != 1 || calls[0].RunID != holder {
		t.Fatalf("pull: %+v, %v", calls, err)
	}
	waiter, err := a.Submit(ctx, StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		steps, err := file.ListSteps(ctx, waiter) // committed
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) == 1 && steps[0].Status == run.StepWaitingResources {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second run's step never waited for houdini: %+v", steps)
		}
	}
	// The engine dies: nothing more of it reaches the file.
	k.dead.Store(true)
	_ = a.Close(ctx)
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}

	b, err := Open(ctx, Config{DB: path, StallAfterSecs: -1, Resources: cfg.Resources})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	if err := b.RegisterTool(flowtype.ToolInfo{Name: "cook", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	info, err := b.Status(ctx, waiter)
	if err != nil || info.Status != run.StatusInterrupted || len(info.Steps) != 1 || info.Steps[0].Status != run.StepInterrupted ||
		info.Steps[0].Waiting != nil {
		t.Fatalf("the waiting run after the crash: %+v, %v; want it and its step interrupted", info, err)
	}
	if _, err := b.Resume(ctx, waiter, ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	calls, err = b.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 2, Timeout: 10 * time.Second})
	if err != nil || len(calls) != 1 || calls[0].RunID != waiter {
		t.Fatalf("pull after the resume: %+v, %v; want the resumed step's call", calls, err)
	}
	if err := b.Host().Complete(calls[0].ID, flowtype.ToolResult{Output: map[string]any{"ok": true}}); err != nil {
		t.Fatal(err)
	}
	info, err = b.Wait(ctx, waiter, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted || info.Steps[0].Status != run.StepCompleted {
		t.Fatalf("the resumed run: %+v, %v; want completed", info, err)
	}
	if res, _ := b.Resources(ctx); res.Resources[0].InUse != 0 || len(res.Resources[0].Holders) != 0 {
		t.Fatalf("units held after the run: %+v", res.Resources[0])
	}
	// The attempt that waited is recorded as interrupted (it never called the tool), the
	// resumed one as completed.
	if h := info.Steps[0].AttemptHistory; len(h) != 2 || h[0].Status != run.StepInterrupted || h[1].Status != run.StepCompleted {
		t.Fatalf("attempts of the resumed step: %+v", h)
	}
}
