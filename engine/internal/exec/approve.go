package exec

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/template"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// KindDenied is the error kind of an approve step that was denied.
const KindDenied = "denied"

// ReasonTimeout is the reason of an approval that timed out.
const ReasonTimeout = "timeout"

type decision struct {
	approved bool
	reason   string
	by       string
	timedOut bool
}

type approval struct {
	info Approval
	ch   chan decision // buffered 1
}

type approveRequested struct {
	Prompt      string    `json:"prompt"`
	TimeoutSecs float64   `json:"timeout_secs,omitempty"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
}

// runApprove opens an approval and waits for Approve, its timeout (denied with reason
// "timeout") or the end of ctx. The output is {"approved", "reason", "by"}; a denial fails the
// step with kind "denied", a timeout with kind "timeout".
func (r *runner) runApprove(ctx context.Context, in *inst) stepEnd {
	sp := in.sp
	key := in.row.Key
	now := r.now()
	a := &approval{info: Approval{StepKey: key, Prompt: template.Stringify(sp.prompt.Render(in.f.resolve)), RequestedAt: now},
		ch: make(chan decision, 1)}
	if sp.timeout > 0 {
		a.info.ExpiresAt = now.Add(sp.timeout)
	}
	r.mu.Lock()
	r.approvals[key] = a
	r.mu.Unlock()
	r.open.Add(1)
	defer func() {
		r.open.Add(-1)
		r.refreshStatus()
	}()

	in.row.Status = run.StepWaitingApproval
	detail := jsonDetail(approveRequested{Prompt: a.info.Prompt, TimeoutSecs: sp.timeout.Seconds(), ExpiresAt: a.info.ExpiresAt})
	if err := in.save(run.EventApproveRequested, detail); err != nil {
		r.withdraw(key)
		return r.stoppedEnd(r.ctx)
	}
	r.refreshStatus()

	var timeout <-chan time.Time
	if sp.timeout > 0 {
		t := r.x.cfg.Clock.NewTimer(sp.timeout)
		defer t.Stop()
		timeout = t.C()
	}
	var d decision
	select {
	case d = <-a.ch:
	case <-timeout:
		if r.withdraw(key) {
			d = decision{approved: false, reason: ReasonTimeout, timedOut: true}
		} else {
			d = <-a.ch // Approve won the race
		}
	case <-ctx.Done():
		if r.withdraw(key) {
			return r.stoppedEnd(ctx)
		}
		d = <-a.ch
	}

	end := stepEnd{output: map[string]any{"approved": d.approved, "reason": d.reason, "by": d.by}, hasOutput: true,
		resolved: jsonDetail(map[string]any{"approved": d.approved, "reason": d.reason, "by": d.by})}
	switch {
	case d.approved:
		end.status = run.StepCompleted
	case d.timedOut:
		end.status, end.errKind = run.StepFailed, run.KindTimeout
		end.errMsg = fmt.Sprintf("approval %s timed out after %s", key, sp.timeout)
	default:
		end.status, end.errKind = run.StepFailed, KindDenied
		end.errMsg = "approval " + key + " was denied"
		if d.by != "" {
			end.errMsg += " by " + d.by
		}
		if d.reason != "" {
			end.errMsg += ": " + d.reason
		}
	}
	return end
}

// withdraw removes the open approval of key and reports whether it was still open.
func (r *runner) withdraw(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.approvals[key]; !ok {
		return false
	}
	delete(r.approvals, key)
	return true
}

func (r *runner) resolveApproval(key string, d decision) error {
	r.mu.Lock()
	a, ok := r.approvals[key]
	if r.finished {
		ok = false
	}
	if ok {
		delete(r.approvals, key)
	}
	open := make([]string, 0, len(r.approvals))
	for k := range r.approvals {
		if !r.finished {
			open = append(open, k)
		}
	}
	finished := r.finished
	r.mu.Unlock()
	if !ok {
		slices.Sort(open)
		msg := fmt.Sprintf("run %s has no open approval for step %q", r.id, key)
		if finished {
			msg += "; the run has finished"
		} else if len(open) > 0 {
			msg += "; open approvals: " + strings.Join(open, ", ")
		}
		return &run.Error{Code: run.CodeInvalidState, Message: msg, StepID: key, Details: map[string]any{"open": open}}
	}
	a.ch <- d
	return nil
}

func (r *runner) openApprovals() []Approval {
	r.mu.Lock()
	out := make([]Approval, 0, len(r.approvals))
	for _, a := range r.approvals {
		out = append(out, a.info)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Approval) int { return strings.Compare(a.StepKey, b.StepKey) })
	return out
}
