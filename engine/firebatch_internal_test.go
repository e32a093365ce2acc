package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/schedule"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memcluster"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// On a store that keeps the fire history beside the runs (store.FireBatcher: SQLite, PostgreSQL)
// the scheduler starts the runs that fire through the engine's writer of fires, so a run and its
// fire are one write; on another store (memory, or a fire log that is not the runs' database)
// the fire is recorded after the run, as before, and the run still starts.
func TestARunsFireIsWrittenWithTheRunOnAFireBatcher(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		open   func(t *testing.T) *Engine
		writes bool
	}{
		{"sqlite", func(t *testing.T) *Engine {
			e, err := Open(ctx, Config{StallAfterSecs: -1, DB: filepath.Join(t.TempDir(), "flow.db")})
			if err != nil {
				t.Fatal(err)
			}
			return e
		}, true},
		{"memory", func(t *testing.T) *Engine {
			e, err := Open(ctx, Config{StallAfterSecs: -1})
			if err != nil {
				t.Fatal(err)
			}
			return e
		}, false},
		{"fire log beside the store", func(t *testing.T) *Engine {
			logged := &struct {
				*memcluster.Store
				*schedule.MemFireLog
			}{memcluster.NewMem(clock.New()).Open(), schedule.NewMemFireLog(0)}
			e, err := Open(ctx, Config{StallAfterSecs: -1}, WithStore(logged))
			if err != nil {
				t.Fatal(err)
			}
			return e
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := c.open(t)
			defer e.Close(ctx)
			s, err := spec.ParseString("name: hook\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Register(s); err != nil {
				t.Fatal(err)
			}
			if err := e.Schedule(flowtype.ScheduleSpec{ID: "on_push", Workflow: "hook", Enabled: true,
				Trigger: flowtype.ScheduleTrigger{Kind: "webhook", Path: "/push"}}); err != nil {
				t.Fatal(err)
			}
			if got := e.sched.runs.WritesFires(); got != c.writes {
				t.Fatalf("the scheduler's starter writes fires: %v; want %v", got, c.writes)
			}
			_, batches := e.store.(store.FireBatcher)
			if batches != c.writes {
				t.Fatalf("the store is a FireBatcher: %v", batches)
			}
			// Either way a delivery starts its run and its fire is in the history.
			h, err := e.WebhookHandler()
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodPost, "/push", strings.NewReader(`{}`))
			req.Header.Set("X-GitHub-Delivery", "d-1")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var body struct {
				RunID string `json:"run_id"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); rec.Code != http.StatusAccepted || err != nil || body.RunID == "" {
				t.Fatalf("delivery d-1: %d %s", rec.Code, rec.Body)
			}
			if info, err := e.Wait(ctx, body.RunID, 0); err != nil || info.Status != "completed" {
				t.Fatalf("the delivery's run: %+v, %v", info, err)
			}
			fires, err := e.ScheduleFires(ctx, "on_push", 0)
			if err != nil || len(fires) != 1 || fires[0].RunID != body.RunID || fires[0].DeliveryID != "d-1" {
				t.Fatalf("the fire history: %+v, %v; want the fire of %s", fires, err, body.RunID)
			}
		})
	}
}
