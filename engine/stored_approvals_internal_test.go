package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/postgres"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// countingEvents is a store that counts the ListEvents queries made of it and the events they
// returned.
type countingEvents struct {
	store.Store
	queries, rows atomic.Int64
}

func (c *countingEvents) ListEvents(ctx context.Context, f store.EventFilter) ([]run.Event, error) {
	evs, err := c.Store.ListEvents(ctx, f)
	c.queries.Add(1)
	c.rows.Add(int64(len(evs)))
	return evs, err
}

// The open approvals of a run another process runs cost one query of its approve_requested
// events, whatever the number of its other events: with 5000 step_log events beside the
// approval (five pages of storedApprovalsPage before), Status on another engine reads one row in
// one query, as for a run with none, on every store. Before, it paged through all the run's
// events: 6 queries and 5003 rows.
func TestStoredApprovalsReadOnlyApprovalEvents(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store { return storeopen.Memory() },
		"sqlite": func(t *testing.T) store.Store {
			st, err := storeopen.File(context.Background(), filepath.Join(t.TempDir(), "flow.db"), false)
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
		"postgresql": func(t *testing.T) store.Store {
			url, err := pgtest.StartT(t).NewDatabase(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			st, err := postgres.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := open(t)
			defer st.Close()
			now := time.Now().UTC().Truncate(time.Millisecond)
			expires := now.Add(time.Hour)
			for _, n := range []int{0, 5000} {
				id := fmt.Sprintf("r%d", n)
				steps := []store.Step{
					{RunID: id, Key: "a", StepID: "a", Kind: "tool", Status: run.StepCompleted, UpdatedAt: now},
					{RunID: id, Key: "gate", StepID: "gate", Kind: "approve", Status: run.StepWaitingApproval, UpdatedAt: now},
				}
				evs := []run.Event{{RunID: id, Type: run.EventWorkflowStarted, Time: now}}
				for i := range n {
					evs = append(evs, run.Event{RunID: id, Type: run.EventStepLog, StepKey: "a", Time: now,
						Detail: json.RawMessage(fmt.Sprintf(`{"lines":[{"msg":"line %d"}]}`, i))})
				}
				detail, _ := json.Marshal(map[string]any{"prompt": "publish?", "expires_at": expires})
				evs = append(evs, run.Event{RunID: id, Type: run.EventApproveRequested, StepKey: "gate", Time: now, Detail: detail},
					run.Event{RunID: id, Type: run.EventStepLog, StepKey: "a", Time: now})
				if err := st.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: id, Name: "wf", SpecJSON: json.RawMessage(`{}`),
					SpecHash: "h", Inputs: json.RawMessage(`{}`), Status: run.StatusWaiting, Origin: "local", CreatedAt: now, UpdatedAt: now}},
					Steps: steps, Events: evs}); err != nil {
					t.Fatal(err)
				}
				c := &countingEvents{Store: st}
				got, err := storedApprovals(ctx, c, id, steps)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != 1 || got[0].StepKey != "gate" || got[0].Prompt != "publish?" || !got[0].ExpiresAt.Equal(expires) {
					t.Fatalf("%d other events: approvals %+v", n, got)
				}
				if q, r := c.queries.Load(), c.rows.Load(); q != 1 || r != 1 {
					t.Errorf("with %d other events: %d queries, %d events read; want 1 and 1 (the approve_requested event)", n, q, r)
				}
			}
		})
	}
}
