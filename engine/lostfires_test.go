package engine_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

// A process killed between a webhook run's start and the record of its fire (two writes) left a
// run whose delivery the fire history did not know: the sender's redelivery to the next process
// started the delivery a second time (the soak's "delivery started 2 runs"). The next process
// records such a run's fire before it admits a delivery, so the redelivery is answered as one.
func TestARedeliveryAfterALostFireStartsNoSecondRun(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "flow.db")
	open := func() (*engine.Engine, http.Handler) {
		e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1, DB: db})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(mustSpec(t, "name: hook\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")); err != nil {
			t.Fatal(err)
		}
		if err := e.Schedule(flowtype.ScheduleSpec{ID: "on_push", Workflow: "hook", Enabled: true,
			Trigger: flowtype.ScheduleTrigger{Kind: "webhook", Path: "/push"}}); err != nil {
			t.Fatal(err)
		}
		h, err := e.WebhookHandler()
		if err != nil {
			t.Fatal(err)
		}
		return e, h
	}
	// The first process: the run of delivery d-1 started, its fire never recorded (the state a
	// SIGKILL between the two writes leaves).
	e, _ := open()
	lost, err := e.Submit(ctx, engine.StartRequest{Workflow: "hook", Origin: engine.OriginWebhook,
		Trigger: map[string]any{"kind": "webhook", "schedule_id": "on_push", "workflow": "hook",
			"fired_at": "2026-11-30T00:00:00Z", "payload": map[string]any{"n": 1}, "delivery_id": "d-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Wait(ctx, lost, 0); err != nil {
		t.Fatal(err)
	}
	e.Close(ctx)

	e, h := open()
	defer e.Close(ctx)
	post := func(delivery string) (int, map[string]any) {
		req := httptest.NewRequest(http.MethodPost, "/push", strings.NewReader(`{"n": 1}`))
		req.Header.Set("X-GitHub-Delivery", delivery)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var body map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		return rec.Code, body
	}
	code, body := post("d-1")
	if code != http.StatusOK || body["duplicate"] != true || body["run_id"] != lost {
		t.Fatalf("the redelivery of d-1 was answered %d %v; want 200, a duplicate of %s", code, body, lost)
	}
	if code, body := post("d-2"); code != http.StatusAccepted || body["run_id"] == lost {
		t.Fatalf("a new delivery was answered %d %v", code, body)
	}
	runs, err := e.Runs(ctx, engine.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs for deliveries d-1 and d-2, want 2", len(runs))
	}
	fires, err := e.ScheduleFires(ctx, "on_push", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(fires) != 2 || fires[1].RunID != lost || fires[1].DeliveryID != "d-1" {
		t.Fatalf("fires %+v; want d-2's and the recovered d-1's", fires)
	}
}
