package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// liveRuns counts the runs the engine holds in memory (e.runs).
func (e *Engine) liveRuns() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.runs)
}

// waitNoLiveRuns waits until the engine holds no run in memory: a run leaves e.runs from its
// own goroutine just after its Done closes, so the test waits for it (up to a generous bound).
func waitNoLiveRuns(t *testing.T, e *Engine) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); e.liveRuns() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d finished runs are still held in memory", e.liveRuns())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustParse(t *testing.T, text string) *spec.Spec {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every way a run ends releases it: completed, failed, cancelled, and a resumed run (whose
// earlier execution hands its end to the engine after the resume replaced it).
func TestFinishedRunsAreReleased(t *testing.T) {
	ctx := context.Background()
	e, err := Open(ctx, Config{DB: filepath.Join(t.TempDir(), "flow.db"), StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	ok := mustParse(t, `steps: [{id: a, tool: flow__echo, args: {value: 1}}]`)
	for range 20 {
		if info, err := e.Run(ctx, StartRequest{Spec: ok}); err != nil || info.Status != run.StatusCompleted {
			t.Fatalf("run: %v %+v", err, info)
		}
	}
	fails := mustParse(t, `steps: [{id: a, tool: flow__fail, args: {kind: error, message: no}}]`)
	failed, err := e.Run(ctx, StartRequest{Spec: fails})
	if err != nil || failed.Status != run.StatusFailed {
		t.Fatalf("failing run: %v %+v", err, failed)
	}
	gated := mustParse(t, `steps: [{id: gate, kind: approve, prompt: ship it}]`)
	id, err := e.Submit(ctx, StartRequest{Spec: gated})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Cancel(ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, id, 0); err != nil || info.Status != run.StatusCancelled {
		t.Fatalf("cancelled run: %v %+v", err, info)
	}
	if _, err := e.Resume(ctx, id, ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		info, err := e.Status(ctx, id)
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("the resumed run never waited for its approval: %v %+v", err, info)
		}
		if len(info.Approvals) > 0 {
			break
		}
	}
	if err := e.Approve(ctx, id, "gate", true, "", "test"); err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, id, 0); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("resumed run: %v %+v", err, info)
	}
	waitNoLiveRuns(t, e)
}

// An engine with a database keeps in memory only what live runs need: the Go heap does not
// grow with the number of runs finished.
func TestFinishedRunsCostNoMemory(t *testing.T) {
	ctx := context.Background()
	// Stall detection on (the default): every run arms a timer, which must go with the run.
	e, err := Open(ctx, Config{DB: filepath.Join(t.TempDir(), "flow.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	s := mustParse(t, `steps: [{id: a, tool: flow__echo, args: {value: 1}}]`)
	runs := func(n int) {
		for range n {
			if info, err := e.Run(ctx, StartRequest{Spec: s}); err != nil || info.Status != run.StatusCompleted {
				t.Fatalf("run: %v %+v", err, info)
			}
		}
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	runs(1000)
	before := heap()
	runs(4000)
	after := heap()
	grew := int64(after) - int64(before)
	t.Logf("heap in use after 1,000 runs %d KiB, after 5,000 %d KiB: %+d KiB", before>>10, after>>10, grew>>10)
	// A retained run costs over 1.5 KiB: 4,000 of them would be 6 MiB and more.
	if grew > 1<<20 {
		t.Fatalf("the heap grew by %d KiB over 4,000 finished runs (bound 1,024 KiB)", grew>>10)
	}
}

// The runs a schedule started are remembered only while they run: a webhook schedule with
// max_concurrent 0 (never counted) used to keep the id of every run it ever started.
func TestScheduleForgetsItsFinishedRuns(t *testing.T) {
	ctx := context.Background()
	e, err := Open(ctx, Config{DB: filepath.Join(t.TempDir(), "flow.db"), StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.Register(mustParse(t, "name: hook\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")); err != nil {
		t.Fatal(err)
	}
	if err := e.Schedule(flowtype.ScheduleSpec{ID: "on_push", Workflow: "hook", Enabled: true, MaxConcurrent: 0,
		Trigger: flowtype.ScheduleTrigger{Kind: "webhook", Path: "/push"}}); err != nil {
		t.Fatal(err)
	}
	h, err := e.WebhookHandler()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/push", strings.NewReader(`{"n": 1}`)))
		var reply struct {
			RunID string `json:"run_id"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &reply); rec.Code != http.StatusAccepted || err != nil {
			t.Fatalf("delivery %d: %d %s", i, rec.Code, rec.Body)
		}
		if info, err := e.Wait(ctx, reply.RunID, 0); err != nil || info.Status != run.StatusCompleted {
			t.Fatalf("run %s: %v %+v", reply.RunID, err, info)
		}
	}
	e.sched.mu.Lock()
	held := e.sched.runs.Held("on_push")
	e.sched.mu.Unlock()
	// The run being started is the only one the list may hold (it is pruned before each
	// append, so at most the last finished run is still there).
	if held > 1 {
		t.Fatalf("the schedule still remembers %d of its 50 finished runs", held)
	}
}

// An in-memory engine keeps every run it ran (nothing else holds them); Prune gives that
// memory back.
func TestPruneGivesAnInMemoryEngineItsMemoryBack(t *testing.T) {
	ctx := context.Background()
	e, err := Open(ctx, Config{StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	s := mustParse(t, `steps: [{id: a, tool: flow__echo, args: {value: "some output to keep"}}, {id: b, tool: flow__echo, args: {value: 2}}]`)
	heap := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapInuse)
	}
	if _, err := e.Run(ctx, StartRequest{Spec: s}); err != nil { // warm up (plan cache, arena)
		t.Fatal(err)
	}
	base := heap()
	for range 3000 {
		if info, err := e.Run(ctx, StartRequest{Spec: s}); err != nil || info.Status != run.StatusCompleted {
			t.Fatalf("run: %v %+v", err, info)
		}
	}
	full := heap()
	n, err := e.Prune(ctx, time.Now().Add(time.Hour))
	if err != nil || n != 3001 {
		t.Fatalf("Prune: %d %v", n, err)
	}
	pruned := heap()
	t.Logf("heap in use: %d KiB before, %d KiB after 3,000 runs, %d KiB after pruning them", base>>10, full>>10, pruned>>10)
	if full-base < 1<<20 {
		t.Fatalf("3,000 runs took only %d KiB: the test no longer measures anything", (full-base)>>10)
	}
	if pruned-base > (full-base)/4 {
		t.Fatalf("pruning 3,000 runs gave back only %d of %d KiB", (full-pruned)>>10, (full-base)>>10)
	}
}
