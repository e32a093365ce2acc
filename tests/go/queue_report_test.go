package gotest

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// The reports of queued calls (docs/operations/cluster.md, "The tool-call queue"): what a call running on
// the engine that claimed it reports reaches the engine that orchestrates its run.

// openReportingWorker opens an engine on db that hosts tool and runs each call it pulls with
// fn, which may report through h.Report(id, …) before it returns the result.
func openReportingWorker(t *testing.T, db, tool string, fn func(h *engine.Host, id uint64) flowtype.ToolResult) *engine.Engine {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: 0.6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = e.Close(context.Background())
	})
	if err := e.RegisterTool(flowtype.ToolInfo{Name: tool, Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 8, Timeout: 50 * time.Millisecond})
			if err != nil {
				return
			}
			for _, c := range cs {
				go func() { _ = e.Host().Complete(c.ID, fn(e.Host(), c.ID)) }()
			}
		}
	}()
	return e
}

// submitWhenHosted submits s on orch once orch has read that another engine hosts its tool
// (it reads the engines table at most once a second on a miss).
func submitWhenHosted(t *testing.T, orch *engine.Engine, text string) string {
	t.Helper()
	s := mustSpec(t, text)
	deadline := time.Now().Add(5 * time.Second)
	for {
		id, err := orch.Submit(context.Background(), engine.StartRequest{Spec: s})
		if err == nil {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A run on engine A whose tool only engine B hosts: the progress and log lines the tool reports
// on B become A's step_progress and step_log events, in order and before the step's exit, and
// A's step record keeps the latest progress and the lines, as for a call on A itself.
func TestQueueCallReportsReachTheOrchestrator(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	orch := openQueueEngine(t, db, "", nil, nil)
	total := 5.0
	var mu sync.Mutex
	var reported [6]time.Time // when the tool reported progress i
	worker := openReportingWorker(t, db, "cache", func(h *engine.Host, id uint64) flowtype.ToolResult {
		for i := 1; i <= 5; i++ {
			mu.Lock()
			reported[i] = time.Now()
			mu.Unlock()
			h.Report(id, flowtype.ToolReport{
				Progress: &run.StepProgress{Done: float64(i), Total: &total, Message: "caching frames"},
				Logs:     []run.LogLine{run.LogLineOf(fmt.Sprintf("cached frame %d", i), json.RawMessage(fmt.Sprintf(`{"frame":%d}`, i)))},
			})
			time.Sleep(400 * time.Millisecond) // longer than the relay's interval: one row each
		}
		h.Report(id, flowtype.ToolReport{Logs: []run.LogLine{run.LogLineOf("done", nil)}}) // just before the outcome
		return flowtype.ToolResult{Output: "ok"}
	})
	id := submitWhenHosted(t, orch, `
name: relay
steps:
  - {id: cache, tool: cache, args: {}}
`)
	info, err := orch.Wait(ctx, id, 20*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v", info, err)
	}

	evs, err := orch.PollEvents(ctx, engine.EventQuery{RunID: id, Max: 1000}, 0) // the run is over: all are in
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var dones []float64
	var slowest time.Duration // from a progress report on B to its event on A
	exitSeq := uint64(0)
	for _, ev := range evs {
		if ev.StepKey != "cache" {
			continue
		}
		if exitSeq != 0 && (ev.Type == run.EventStepLog || ev.Type == run.EventStepProgress) {
			t.Fatalf("a %s event (seq %d) after the step's exit (seq %d)", ev.Type, ev.Seq, exitSeq)
		}
		switch ev.Type {
		case run.EventStepLog:
			var d struct {
				Lines   []run.LogLine `json:"lines"`
				Dropped int           `json:"dropped"`
			}
			if err := json.Unmarshal(ev.Detail, &d); err != nil || d.Dropped != 0 {
				t.Fatalf("step_log %s: %v", ev.Detail, err)
			}
			for _, l := range d.Lines {
				lines = append(lines, l.Text)
			}
		case run.EventStepProgress:
			var p run.StepProgress
			if err := json.Unmarshal(ev.Detail, &p); err != nil || p.Message != "caching frames" || p.Total == nil || *p.Total != 5 || p.Attempt != 1 {
				t.Fatalf("step_progress %s: %v", ev.Detail, err)
			}
			dones = append(dones, p.Done)
			if i := int(p.Done); i >= 1 && i <= 5 {
				mu.Lock()
				slowest = max(slowest, ev.Time.Sub(reported[i]))
				mu.Unlock()
			}
		case run.EventStepExit:
			exitSeq = ev.Seq
		}
	}
	if exitSeq == 0 {
		t.Fatalf("no step_exit among %d events", len(evs))
	}
	want := `["cached frame 1","cached frame 2","cached frame 3","cached frame 4","cached frame 5","done"]`
	if got, _ := json.Marshal(lines); string(got) != want {
		t.Fatalf("the orchestrator's step_log lines before the step's exit: %s, want %s", got, want)
	}
	// The progress reached the orchestrator in order, up to the last. Not necessarily each
	// value: the tool pauses longer than the relay's interval, so each report is usually its own
	// row and event, but rows the relay reads together (a slow wake-up on a busy machine) are
	// passed on as one report with the latest progress (docs/reference/limits.md).
	increasing := len(dones) > 0 && dones[len(dones)-1] == total
	for i := 1; i < len(dones); i++ {
		increasing = increasing && dones[i] > dones[i-1]
	}
	if !increasing {
		var times []string
		for _, ev := range evs {
			if ev.Type == run.EventStepProgress {
				times = append(times, fmt.Sprintf("%s@%s", ev.Detail, ev.Time.Format("05.000")))
			}
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the orchestrator's step_progress: %v, want increasing values ending at %v; events %v; reported at %v", dones, total, times, reported[1:])
	}
	t.Logf("a progress report on the worker became the orchestrator's event within %s; %d of 5 values seen", slowest, len(dones))

	steps, err := orch.Steps(ctx, id)
	if err != nil || len(steps) != 1 {
		t.Fatalf("steps: %+v %v", steps, err)
	}
	st := steps[0]
	if st.Worker != worker.EngineID() || st.Progress == nil || st.Progress.Done != 5 || st.Progress.Message != "caching frames" ||
		len(st.Logs) != 6 || st.Logs[0].Text != "cached frame 1" || string(st.Logs[0].Fields) != `{"frame":1}` ||
		st.Logs[0].Stream != run.StreamLog || st.Logs[0].Attempt != 1 || st.Logs[5].Text != "done" || st.LogsDropped != 0 {
		t.Fatalf("step record: worker %q progress %+v logs %+v dropped %d", st.Worker, st.Progress, st.Logs, st.LogsDropped)
	}
}

// A tool that reports in a tight loop (10,000 progress reports and log lines, over about a
// second: one every 100 µs) makes a bounded
// number of writes: at most one row per relay interval while it runs, and one before the
// outcome. Its last progress is never lost, and every line is either on the orchestrator's step
// record or counted as dropped there.
func TestQueueCallReportsAreCoalesced(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	orch := openQueueEngine(t, db, "", nil, nil)
	const n = 10000
	loop := make(chan time.Duration, 1)
	openReportingWorker(t, db, "spin", func(h *engine.Host, id uint64) flowtype.ToolResult {
		start := time.Now()
		for i := 1; i <= n; i++ {
			for time.Since(start) < time.Duration(i)*100*time.Microsecond { // spread over about 1 s
				runtime.Gosched()
			}
			h.Report(id, flowtype.ToolReport{Progress: &run.StepProgress{Done: float64(i)}, Logs: []run.LogLine{run.LogLineOf(fmt.Sprint("line ", i), nil)}})
		}
		loop <- time.Since(start)
		return flowtype.ToolResult{Output: 1}
	})
	id := submitWhenHosted(t, orch, `
name: spin
steps:
  - {id: spin, tool: spin, args: {}}
`)
	info, err := orch.Wait(ctx, id, 20*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v", info, err)
	}
	took := <-loop

	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, maxSeq int
	if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(max(seq), 0) FROM tool_call_reports`).Scan(&rows, &maxSeq); err != nil {
		t.Fatal(err)
	}
	// One row at once, then at most one per 200 ms while the loop runs and until the call
	// returns (a few ms later: one more may fall in that span), and the final one.
	bound := 3 + int(took/(200*time.Millisecond))
	t.Logf("%d reports in %s: %d rows written (bound %d)", n, took, rows, bound)
	if rows == 0 || rows > bound || maxSeq != rows {
		t.Fatalf("%d reports in %s wrote %d rows (max seq %d), want 1 to %d", n, took, rows, maxSeq, bound)
	}

	steps, err := orch.Steps(ctx, id)
	if err != nil || len(steps) != 1 {
		t.Fatalf("steps: %+v %v", steps, err)
	}
	st := steps[0]
	if st.Progress == nil || st.Progress.Done != n {
		t.Fatalf("the last progress was lost: %+v", st.Progress)
	}
	if len(st.Logs) == 0 || len(st.Logs)+st.LogsDropped != n || st.Logs[0].Text != "line 1" {
		t.Fatalf("step record: %d lines kept + %d dropped, want %d in all, from line 1", len(st.Logs), st.LogsDropped, n)
	}
}
