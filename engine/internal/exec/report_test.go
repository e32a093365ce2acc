package exec_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memstore"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// hostBundle runs specs whose tool "export" is a host tool this test answers, on a stub clock.
type hostBundle struct {
	x     *exec.Executor
	store *memstore.Store
	clk   *clock.Stub
	host  *tools.Host
}

func setupHost(t *testing.T) *hostBundle {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := clock.NewStub(time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC))
	router := tools.NewRouter(clk, nil)
	if err := router.RegisterHost(tools.ToolInfo{Name: "export", Lane: tools.LaneMain}); err != nil {
		t.Fatal(err)
	}
	return &hostBundle{x: exec.New(exec.Config{Store: st, Clock: clk, Router: router}), store: st, clk: clk, host: router.Host()}
}

// pull takes the next host call, waiting for it.
func (b *hostBundle) pull(t *testing.T) tools.PendingCall {
	t.Helper()
	calls, err := b.host.Pull(context.Background(), tools.PullRequest{Timeout: 10 * time.Second})
	if err != nil || len(calls) != 1 {
		t.Fatalf("pull: %v %v", calls, err)
	}
	return calls[0]
}

// events returns the run's events of the given types.
func (b *hostBundle) events(t *testing.T, types ...string) []run.Event {
	t.Helper()
	evs, err := b.store.ListEvents(context.Background(), store.EventFilter{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	var out []run.Event
	for _, e := range evs {
		for _, typ := range types {
			if e.Type == typ {
				out = append(out, e)
			}
		}
	}
	return out
}

// waitEvents waits until the run has n events of typ.
func (b *hostBundle) waitEvents(t *testing.T, typ string, n int) []run.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs := b.events(t, typ)
		if len(evs) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s events, want %d", len(evs), typ, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (b *hostBundle) step(t *testing.T) store.Step {
	t.Helper()
	steps, err := b.store.ListSteps(context.Background(), "r1")
	if err != nil || len(steps) != 1 {
		t.Fatalf("steps %+v %v", steps, err)
	}
	return steps[0]
}

func progressOf(t *testing.T, raw []byte) run.StepProgress {
	t.Helper()
	var p run.StepProgress
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("progress %q: %v", raw, err)
	}
	return p
}

func total(v float64) *float64 { return &v }

// TestReportsAreThrottledAndKeptInOrder: what a running tool reports becomes step_progress and
// step_log events at most once per ReportInterval (the latest progress wins, at most
// MaxLogLinesPerFlush lines a write, the others counted), the step record, which keeps every
// line, at most once per
// ReportRowInterval, and what is pending when the call ends is written before its step_exit.
func TestReportsAreThrottledAndKeptInOrder(t *testing.T) {
	t.Parallel()
	b := setupHost(t)
	h, err := b.x.Start(context.Background(), exec.Params{RunID: "r1", Spec: mustSpec(t, "steps:\n  - { id: export, tool: export }\n"), Origin: "local"})
	if err != nil {
		t.Fatal(err)
	}
	call := b.pull(t)
	rep := func(r tools.Report) {
		if !b.host.Report(call.ID, r) {
			t.Fatal("a report of a running call was refused")
		}
	}
	rep(tools.Report{Progress: &run.StepProgress{Done: 1, Total: total(120), Message: "caching frames"}})
	first := b.waitEvents(t, run.EventStepProgress, 1) // the first report is written at once
	if p := progressOf(t, first[0].Detail); p.Done != 1 || *p.Total != 120 || p.Message != "caching frames" || p.Attempt != 1 {
		t.Fatalf("first progress %s", first[0].Detail)
	}
	if st := b.step(t); st.Status != run.StepRunning || progressOf(t, st.Progress).Done != 1 {
		t.Fatalf("the record after the first report: %s %s", st.Status, st.Progress)
	}

	// A tight loop: 99 progress reports and 150 lines, no time passing.
	for i := 2; i <= 100; i++ {
		rep(tools.Report{Progress: &run.StepProgress{Done: float64(i), Total: total(120)}})
	}
	for i := range 150 {
		rep(tools.Report{Logs: []run.LogLine{run.LogLineOf(fmt.Sprintf("frame %d", i), json.RawMessage(fmt.Sprintf(`{"frame":%d}`, i)))}})
	}
	time.Sleep(20 * time.Millisecond)
	if n := len(b.events(t, run.EventStepProgress, run.EventStepLog)); n != 1 {
		t.Fatalf("%d report events before the interval passed, want 1", n)
	}
	b.clk.Advance(run.ReportInterval)
	b.waitEvents(t, run.EventStepLog, 1)
	evs := b.events(t, run.EventStepProgress, run.EventStepLog)
	if len(evs) != 3 || evs[1].Type != run.EventStepProgress || progressOf(t, evs[1].Detail).Done != 100 {
		t.Fatalf("after one interval: %+v", evs)
	}
	var logs struct {
		Lines   []run.LogLine `json:"lines"`
		Dropped int           `json:"dropped"`
	}
	if err := json.Unmarshal(evs[2].Detail, &logs); err != nil {
		t.Fatal(err)
	}
	if len(logs.Lines) != run.MaxLogLinesPerFlush || logs.Dropped != 50 || logs.Lines[0].Text != "frame 50" ||
		logs.Lines[0].Stream != run.StreamLog || string(logs.Lines[0].Fields) != `{"frame":50}` || logs.Lines[0].Attempt != 1 ||
		logs.Lines[len(logs.Lines)-1].Text != "frame 149" { // the newest are kept
		t.Fatalf("step_log detail: %d lines, dropped %d, first %+v", len(logs.Lines), logs.Dropped, logs.Lines[0])
	}
	// The record is written at most once a second: still the first progress.
	if st := b.step(t); progressOf(t, st.Progress).Done != 1 || len(st.Logs) != 0 {
		t.Fatalf("the record was rewritten within ReportRowInterval: %s", st.Progress)
	}
	b.clk.Advance(run.ReportRowInterval)
	deadline := time.Now().Add(10 * time.Second)
	for progressOf(t, b.step(t).Progress).Done != 100 {
		if time.Now().After(deadline) {
			t.Fatal("the record never caught up with the events")
		}
		time.Sleep(time.Millisecond)
	}
	// The record keeps every line, as a pool worker's output is kept: only the live events skip.
	if st := b.step(t); st.LogsDropped != 0 || !strings.Contains(string(st.Logs), `"frame 0"`) ||
		!strings.Contains(string(st.Logs), `"frame 149"`) {
		t.Fatalf("the record's logs: dropped %d, %.200s", st.LogsDropped, st.Logs)
	}

	// Lines are rewritten on the record at most once per ReportLogsRowInterval: the events
	// carry them at once.
	rep(tools.Report{Logs: []run.LogLine{run.LogLineOf("late line", nil)}})
	b.waitEvents(t, run.EventStepLog, 2)
	b.clk.Advance(run.ReportRowInterval)
	time.Sleep(20 * time.Millisecond)
	if st := b.step(t); strings.Contains(string(st.Logs), "late line") {
		t.Fatal("the record's lines were rewritten within ReportLogsRowInterval")
	}
	b.clk.Advance(run.ReportLogsRowInterval)
	for !strings.Contains(string(b.step(t).Logs), "late line") {
		if time.Now().After(deadline) {
			t.Fatal("the record never got the late line")
		}
		time.Sleep(time.Millisecond)
	}

	// The last report is not lost: the call ends before the interval, its progress is written
	// before step_exit and stays on the record.
	rep(tools.Report{Progress: &run.StepProgress{Done: 120, Total: total(120), Message: "done"}})
	rep(tools.Report{Progress: &run.StepProgress{Done: 120, Total: total(120), Message: "written"}})
	if err := b.host.Complete(call.ID, tools.Result{Output: map[string]any{"ok": true}}); err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	if b.host.Report(call.ID, tools.Report{Progress: &run.StepProgress{Done: 1}}) {
		t.Fatal("a report after the call ended was accepted")
	}
	all := b.events(t, run.EventStepEnter, run.EventStepProgress, run.EventStepLog, run.EventStepExit)
	var types []string
	for _, e := range all {
		types = append(types, e.Type)
	}
	// The two last reports come as one event or two: the first may be written before the
	// second arrives (the writer runs on its own goroutine); the last one is never lost.
	got := strings.Join(types, ",")
	if got != "step_enter,step_progress,step_progress,step_log,step_log,step_progress,step_exit" &&
		got != "step_enter,step_progress,step_progress,step_log,step_log,step_progress,step_progress,step_exit" {
		t.Fatalf("events %s", got)
	}
	if last := all[len(all)-2]; progressOf(t, last.Detail).Message != "written" {
		t.Fatalf("the last progress event: %s", last.Detail)
	}
	st := b.step(t)
	if st.Status != run.StepCompleted || progressOf(t, st.Progress).Message != "written" || st.LogsDropped != 0 {
		t.Fatalf("final record: %s %s dropped %d", st.Status, st.Progress, st.LogsDropped)
	}
}

// TestReportWaitsNoLongerThanAnInterval: a report made while only a write of the step record is
// pending (due up to ReportRowInterval later) becomes its events within ReportInterval, not
// when the record's write is due: a tool reporting every quarter second gets an event each time.
func TestReportWaitsNoLongerThanAnInterval(t *testing.T) {
	t.Parallel()
	b := setupHost(t)
	h, err := b.x.Start(context.Background(), exec.Params{RunID: "r1", Spec: mustSpec(t, "steps:\n  - { id: export, tool: export }\n"), Origin: "local"})
	if err != nil {
		t.Fatal(err)
	}
	call := b.pull(t)
	for i := 1; i <= 3; i++ {
		// The first is written with the record; the second's write leaves the record's due in a
		// second; the third must not wait for it.
		if !b.host.Report(call.ID, tools.Report{Progress: &run.StepProgress{Done: float64(i)}}) {
			t.Fatal("refused")
		}
		evs := b.waitEvents(t, run.EventStepProgress, i)
		if p := progressOf(t, evs[i-1].Detail); p.Done != float64(i) {
			t.Fatalf("progress event %d: %s", i, evs[i-1].Detail)
		}
		b.clk.Advance(run.ReportInterval + run.ReportInterval/2)
	}
	if err := b.host.Complete(call.ID, tools.Result{Output: 1}); err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	if st := b.step(t); progressOf(t, st.Progress).Done != 3 {
		t.Fatalf("final record: %s", st.Progress)
	}
}

// TestSilentCallWritesNothingMore: a call that reports nothing writes no report event and no
// progress on its record.
func TestSilentCallWritesNothingMore(t *testing.T) {
	t.Parallel()
	b := setupHost(t)
	h, err := b.x.Start(context.Background(), exec.Params{RunID: "r1", Spec: mustSpec(t, "steps:\n  - { id: export, tool: export }\n"), Origin: "local"})
	if err != nil {
		t.Fatal(err)
	}
	call := b.pull(t)
	if err := b.host.Complete(call.ID, tools.Result{Output: 1}); err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	evs, _ := b.store.ListEvents(context.Background(), store.EventFilter{RunID: "r1"})
	if len(evs) != 4 { // workflow_started, step_enter, step_exit, workflow_terminal
		t.Fatalf("%d events: %+v", len(evs), evs)
	}
	if st := b.step(t); st.Progress != nil || st.Logs != nil {
		t.Fatalf("record %+v", st)
	}
}

// TestRetryClearsProgressAndCancelKeepsIt: a new attempt starts without the progress of the
// one that failed; a cancelled step keeps what its tool reported on its record.
func TestRetryClearsProgressAndCancelKeepsIt(t *testing.T) {
	t.Parallel()
	b := setupHost(t)
	s := mustSpec(t, "steps:\n  - { id: export, tool: export, retry: { max_attempts: 2, backoff: fixed, initial_delay_ms: 1 } }\n")
	h, err := b.x.Start(context.Background(), exec.Params{RunID: "r1", Spec: s, Origin: "local"})
	if err != nil {
		t.Fatal(err)
	}
	call := b.pull(t)
	b.host.Report(call.ID, tools.Report{Progress: &run.StepProgress{Done: 5}})
	b.waitEvents(t, run.EventStepProgress, 1)
	if err := b.host.Complete(call.ID, tools.Result{Error: &tools.ToolError{Kind: "transient", Message: "flaky"}}); err != nil {
		t.Fatal(err)
	}
	b.waitEvents(t, run.EventStepRetry, 1)
	if st := b.step(t); st.Progress != nil {
		t.Fatalf("retrying record keeps the failed attempt's progress: %s", st.Progress)
	}
	go func() {
		for b.clk.Pending() == 0 {
			time.Sleep(time.Millisecond)
		}
		b.clk.Advance(time.Second) // the backoff
	}()
	call = b.pull(t)
	b.host.Report(call.ID, tools.Report{Progress: &run.StepProgress{Done: 7}, Logs: []run.LogLine{run.LogLineOf("attempt two", nil)}})
	b.waitEvents(t, run.EventStepProgress, 2)
	h.Cancel("test")
	<-h.Done()
	st := b.step(t)
	if st.Status != run.StepCancelled || progressOf(t, st.Progress).Done != 7 || progressOf(t, st.Progress).Attempt != 2 ||
		!strings.Contains(string(st.Logs), "attempt two") {
		t.Fatalf("cancelled record: %s %s %s", st.Status, st.Progress, st.Logs)
	}
}

// BenchmarkReport is the engine's cost of one report of a running call (Host.Report, then the
// reporter): what dccflow_call_report adds to the C ABI crossing. No time passes on the stub
// clock, so after the first every report is coalesced: this is the cost a tool pays per report.
func BenchmarkReport(b *testing.B) {
	st := memstore.New()
	defer st.Close()
	clk := clock.NewStub(time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC))
	router := tools.NewRouter(clk, nil)
	if err := router.RegisterHost(tools.ToolInfo{Name: "export", Lane: tools.LaneMain}); err != nil {
		b.Fatal(err)
	}
	x := exec.New(exec.Config{Store: st, Clock: clk, Router: router})
	s, _ := spec.ParseString("steps:\n  - { id: export, tool: export }\n")
	h, err := x.Start(context.Background(), exec.Params{RunID: "r1", Spec: s, Origin: "local"})
	if err != nil {
		b.Fatal(err)
	}
	calls, err := router.Host().Pull(context.Background(), tools.PullRequest{Timeout: 10 * time.Second})
	if err != nil || len(calls) != 1 {
		b.Fatal(calls, err)
	}
	total := 1e6
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		router.Host().Report(calls[0].ID, tools.Report{Progress: &run.StepProgress{Done: float64(i), Total: &total, Message: "caching frames"}})
	}
	b.StopTimer()
	_ = router.Host().Complete(calls[0].ID, tools.Result{Output: 1})
	<-h.Done()
}
