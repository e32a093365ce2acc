package engine

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// storedApprovalsPage is how many of a run's approve_requested events storedApprovals reads at
// a time.
const storedApprovalsPage = 1000

// storedApprovals returns the open approvals of a run that another process runs, as its records
// show them: each step instance waiting for approval, with the prompt and expiry of its latest
// approve_requested event (a step re-opened after a resume asks again). The run's events are
// read only when one of its steps waits, and then only its approve_requested events (the store
// filters them, so a run's thousands of step_log events cost no query nor row here; the SQL
// stores read the run's index entries, workflow_events_run, and drop the other types), in
// pages; an approval whose event is gone (pruned) still lists with its step key and the time its
// step started waiting. Sorted by step key.
func storedApprovals(ctx context.Context, st store.Store, runID string, steps []store.Step) ([]flowtype.Approval, error) {
	waiting := map[string]*flowtype.Approval{}
	for _, s := range steps {
		if s.Status == run.StepWaitingApproval {
			waiting[s.Key] = &flowtype.Approval{StepKey: s.Key, RequestedAt: s.UpdatedAt}
		}
	}
	if len(waiting) == 0 {
		return nil, nil
	}
	for after := uint64(0); ; {
		evs, err := st.ListEvents(ctx, store.EventFilter{AfterSeq: after, RunID: runID,
			Types: []string{run.EventApproveRequested}, Limit: storedApprovalsPage})
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			a := waiting[ev.StepKey]
			if a == nil || ev.Type != run.EventApproveRequested {
				continue
			}
			var d struct {
				Prompt    string    `json:"prompt"`
				ExpiresAt time.Time `json:"expires_at"`
			}
			_ = json.Unmarshal(ev.Detail, &d) // a detail that does not decode leaves the prompt empty
			a.Prompt, a.ExpiresAt, a.RequestedAt = d.Prompt, d.ExpiresAt, ev.Time
		}
		if len(evs) < storedApprovalsPage {
			break
		}
		after = evs[len(evs)-1].Seq
	}
	out := make([]flowtype.Approval, 0, len(waiting))
	for _, a := range waiting {
		out = append(out, *a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StepKey < out[j].StepKey })
	return out, nil
}
