package gotest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

const uploadFlow = `
name: validate_upload
inputs:
  path: {type: string, required: true}
  ms: {type: integer, default: 0}
steps:
  - id: wait
    tool: flow__sleep
    args: {ms: "{{inputs.ms}}"}
  - id: echo
    tool: flow__echo
    args: {value: "{{inputs.path}}"}
`

func TestWebhookScheduleStartsRunsThroughTheEngine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	s, err := spec.ParseString(uploadFlow)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(s); err != nil {
		t.Fatal(err)
	}
	// A schedule naming an unknown workflow is refused.
	if err := e.Schedule(flowtype.ScheduleSpec{ID: "x", Workflow: "nope", Enabled: true, MaxConcurrent: 1,
		Trigger: flowtype.ScheduleTrigger{Kind: "webhook", Path: "/x"}}); err == nil {
		t.Fatal("unknown workflow accepted")
	}
	if err := e.Schedule(flowtype.ScheduleSpec{ID: "on_upload", Workflow: "validate_upload", Enabled: true, MaxConcurrent: 1,
		Inputs:  map[string]any{"path": "{{trigger.payload.file_path}}", "ms": "{{trigger.payload.ms}}"},
		Trigger: flowtype.ScheduleTrigger{Kind: "webhook", Path: "/webhooks/upload"}}); err != nil {
		t.Fatal(err)
	}
	h, err := e.WebhookHandler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(body string) (int, map[string]any) {
		resp, err := http.Post(srv.URL+"/webhooks/upload", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	code, m := post(`{"file_path": "/drops/a.ma", "ms": 300}`)
	if code != http.StatusAccepted || m["status"] != "enqueued" {
		t.Fatalf("%d %v", code, m)
	}
	first := m["run_id"].(string)
	// The first run is still sleeping: max_concurrent 1 refuses a second one.
	if code, m := post(`{"file_path": "/drops/b.ma"}`); code != http.StatusTooManyRequests {
		t.Fatalf("%d %v", code, m)
	}
	info, err := e.Wait(ctx, first, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, info)
	}
	if info.Origin != "webhook" || info.Inputs["path"] != "/drops/a.ma" || info.Inputs["ms"] != float64(300) {
		t.Fatalf("inputs %+v origin %q", info.Inputs, info.Origin)
	}
	if code, _ := post(`{"file_path": "/drops/c.ma"}`); code != http.StatusAccepted {
		t.Fatalf("after the first run ended: %d", code)
	}
	fires, err := e.ScheduleFires(ctx, "on_upload", 0)
	// Newest first: fired (c), skipped (b, max_concurrent), fired (a).
	if err != nil || len(fires) != 3 || fires[2].RunID != first || fires[1].Kind != "skipped" || fires[1].Reason != "max_concurrent" {
		t.Fatalf("fires %+v %v", fires, err)
	}
	if infos := e.Schedules(); len(infos) != 1 || infos[0].Spec.ID != "on_upload" {
		t.Fatalf("schedules %+v", infos)
	}
	if err := e.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Unschedule("on_upload"); err != nil {
		t.Fatal(err)
	}
	if err := e.Unschedule("on_upload"); err == nil {
		t.Fatal("unscheduling twice succeeded")
	}
}

// waitFire advances the stub clock to the next fire of schedule id and returns the run it
// started, once that run has finished.
func waitFire(t *testing.T, b *testBundle, id string) *engine.RunInfo {
	t.Helper()
	// The schedule's loop waits on the engine clock: one timer (no run is in flight).
	if err := b.clk.WaitForTimers(b.ctx, 1); err != nil {
		t.Fatalf("the schedule never waited on the engine clock: %v", err)
	}
	next, ok := b.eng.NextFire(id)
	if !ok {
		t.Fatalf("schedule %s has no next fire", id)
	}
	b.clk.Set(next)
	for {
		fires, err := b.eng.ScheduleFires(b.ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(fires) > 0 {
			if fires[0].RunID == "" || !fires[0].ScheduledAt.Equal(next) {
				t.Fatalf("fire %+v; want a run scheduled at %s", fires[0], next)
			}
			return b.wait(fires[0].RunID)
		}
		select { // the fire is recorded by the schedule's goroutine: wait for it, without a clock
		case <-b.ctx.Done():
			t.Fatal("the schedule never fired")
		case <-time.After(time.Millisecond):
		}
	}
}

func TestIntervalScheduleFires(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	if err := b.eng.Register(parse(t, "name: tick\nsteps: [{id: a, tool: flow__echo, args: {value: '{{trigger.schedule_id}}'}}]")); err != nil {
		t.Fatal(err)
	}
	if err := b.eng.Schedule(flowtype.ScheduleSpec{ID: "every_second", Workflow: "tick", Enabled: true, MaxConcurrent: 1,
		Trigger: flowtype.ScheduleTrigger{Kind: "interval", Every: "1s"}}); err != nil {
		t.Fatal(err)
	}
	if next, ok := b.eng.NextFire("every_second"); !ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("next fire %s, %v; want %s (one interval after the engine clock's now)", next, ok, t0.Add(time.Second))
	}
	if err := b.eng.StartScheduler(b.ctx); err != nil {
		t.Fatal(err)
	}
	info := waitFire(t, b, "every_second")
	if info.Status != run.StatusCompleted || info.Outputs["a"].(map[string]any)["value"] != "every_second" {
		t.Fatalf("%+v", info)
	}
}

// WithClock reaches cron schedules: their next fire is computed from the engine clock, and
// they fire when it gets there (the scheduler used the real clock whatever WithClock said).
func TestWithClockDrivesCronSchedules(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	if err := b.eng.Register(parse(t, "name: nightly\nsteps: [{id: a, tool: flow__echo, args: {value: '{{trigger.scheduled_at}}'}}]")); err != nil {
		t.Fatal(err)
	}
	// 02:00 UTC daily; the stub clock shows 2026-03-08 03:00 UTC.
	if err := b.eng.Schedule(flowtype.ScheduleSpec{ID: "nightly", Workflow: "nightly", Enabled: true, MaxConcurrent: 1,
		Trigger: flowtype.ScheduleTrigger{Kind: "cron", Expression: "0 0 2 * * *", Timezone: "UTC"}}); err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 3, 9, 2, 0, 0, 0, time.UTC)
	if next, ok := b.eng.NextFire("nightly"); !ok || !next.Equal(want) {
		t.Fatalf("next fire %s, %v; want %s (computed from the engine clock)", next, ok, want)
	}
	if err := b.eng.StartScheduler(b.ctx); err != nil {
		t.Fatal(err)
	}
	info := waitFire(t, b, "nightly")
	if info.Status != run.StatusCompleted || info.Outputs["a"].(map[string]any)["value"] != "2026-03-09T02:00:00Z" {
		t.Fatalf("%+v", info)
	}
	if !b.clk.Now().Equal(want) {
		t.Fatalf("the clock moved to %s", b.clk.Now())
	}
}
