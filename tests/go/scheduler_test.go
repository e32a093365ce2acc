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
	if err := e.Schedule(engine.ScheduleSpec{ID: "x", Workflow: "nope", Enabled: true, MaxConcurrent: 1,
		Trigger: engine.ScheduleTrigger{Kind: "webhook", Path: "/x"}}); err == nil {
		t.Fatal("unknown workflow accepted")
	}
	if err := e.Schedule(engine.ScheduleSpec{ID: "on_upload", Workflow: "validate_upload", Enabled: true, MaxConcurrent: 1,
		Inputs:  map[string]any{"path": "{{trigger.payload.file_path}}", "ms": "{{trigger.payload.ms}}"},
		Trigger: engine.ScheduleTrigger{Kind: "webhook", Path: "/webhooks/upload"}}); err != nil {
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

func TestIntervalScheduleFires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	s, _ := spec.ParseString("name: tick\nsteps: [{id: a, tool: flow__echo, args: {value: '{{trigger.schedule_id}}'}}]")
	if err := e.Register(s); err != nil {
		t.Fatal(err)
	}
	if err := e.Schedule(engine.ScheduleSpec{ID: "every_second", Workflow: "tick", Enabled: true, MaxConcurrent: 1,
		Trigger: engine.ScheduleTrigger{Kind: "interval", Every: "1s"}}); err != nil {
		t.Fatal(err)
	}
	if next, ok := e.NextFire("every_second"); !ok || next.IsZero() {
		t.Fatal("no next fire time")
	}
	if err := e.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		fires, _ := e.ScheduleFires(ctx, "every_second", 0)
		if len(fires) > 0 && fires[0].RunID != "" {
			info, err := e.Wait(ctx, fires[0].RunID, 5*time.Second)
			if err != nil || info.Status != run.StatusCompleted || info.Outputs["a"].(map[string]any)["value"] != "every_second" {
				t.Fatalf("%v %+v", err, info)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the interval schedule never fired")
}
