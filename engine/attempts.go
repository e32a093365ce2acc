package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// AttemptInfo is one attempt of a tool or tool_remote step instance (StepInfo.AttemptHistory):
// every call the step made, kept across resumes (docs/reference/cli/inspecting.md "show").
type AttemptInfo struct {
	// Attempt numbers the step's attempts from 1, across the run's resumes (a resumed step's
	// first attempt follows the last one recorded before the resume); the `attempt` of the
	// step's log lines and progress is this number.
	Attempt int    `json:"attempt"`
	Tool    string `json:"tool"` // "DCC/TOOL" for a tool_remote step
	// Status is running while the call is in flight, then completed, failed, cancelled or
	// interrupted (an attempt in flight when its run stopped takes the step's status).
	Status run.StepStatus `json:"status"`
	// Args are the rendered arguments of the call: secrets redacted ("[redacted]": the names
	// the tool's schema marks writeOnly, x-secret or format password, and any name containing
	// token, password, passwd, secret, api_key or apikey), at most 64 KiB of JSON; larger,
	// {"_truncated": true, "bytes": N, "preview": "…"}. nil when not recorded.
	Args json.RawMessage `json:"args,omitempty"`
	// Worker is the pool worker ("POOL/PID") or the engine of a queued call; Host and PID name
	// the process that ran the call where known (the engine's own for an in-process tool).
	Worker string `json:"worker,omitempty"`
	Host   string `json:"host,omitempty"`
	PID    int    `json:"pid,omitempty"`
	// Error is the attempt's failure; Exit, for a lost worker, how its process ended
	// ("exit status 139", "signal: killed").
	Error      *StepErrorInfo `json:"error,omitempty"`
	Exit       string         `json:"exit,omitempty"`
	StartedAt  time.Time      `json:"started_at,omitzero"`
	FinishedAt time.Time      `json:"finished_at,omitzero"`
	// Env is the environment of the process that ran the call (DCC and plugin versions, a JSON
	// object: what the tool's side reported, else the engine's Config.Env); nil when none.
	Env json.RawMessage `json:"env,omitempty"`
	// Files are the files the attempt read and wrote (docs/guide/assets.md), in the order
	// recorded; nil when none.
	Files []FileInfo `json:"files,omitempty"`
}

// ResumeInfo is one resume of a run (RunInfo.Resumes).
type ResumeInfo struct {
	At time.Time `json:"at"`
	// By names who resumed it: the dashboard's user, the Python caller's login name, "mcp",
	// "engine ID (takeover)", "resume_interrupted"; "" when not recorded.
	By string `json:"by,omitempty"`
	// Forced are the steps forced to run again (ResumeOptions.ForceSteps).
	Forced []string `json:"forced,omitempty"`
	// OnFailureOnly: only the on_failure steps ran again.
	OnFailureOnly bool `json:"on_failure_only,omitempty"`
}

// RedactArgs returns args with the value of every member named like a secret (a name containing
// token, password, passwd, secret, api_key or apikey, case-insensitive, at any depth) replaced by
// "[redacted]", as attempt records keep them; args is not modified. For showing a spec's
// declared arguments beside the recorded ones.
func RedactArgs(args map[string]any) map[string]any { return exec.RedactSecrets(args) }

// noAttemptsKey marks a context made by WithoutAttempts.
type noAttemptsKey struct{}

// WithoutAttempts returns a context under which Steps leaves each step's AttemptHistory, Args
// and AttemptsDropped out (not read from the database): for a caller that lists the instances
// of a large run and shows the attempts of one step at a time (the dashboard's run page).
func WithoutAttempts(ctx context.Context) context.Context {
	return context.WithValue(ctx, noAttemptsKey{}, true)
}

func noAttempts(ctx context.Context) bool { return ctx.Value(noAttemptsKey{}) != nil }

// runResumes returns the resume history of a run; nil when the store keeps none.
func (e *Engine) runResumes(ctx context.Context, runID string) ([]ResumeInfo, error) {
	al, ok := e.store.(store.AttemptLog)
	if !ok {
		return nil, nil
	}
	evs, err := al.Resumes(ctx, runID)
	if err != nil {
		return nil, err
	}
	var out []ResumeInfo
	for _, ev := range evs {
		ri := ResumeInfo{At: ev.Time}
		if len(ev.Detail) > 0 {
			_ = json.Unmarshal(ev.Detail, &ri) // by, forced, on_failure_only
		}
		ri.At = ev.Time
		out = append(out, ri)
	}
	return out, nil
}

// withAttempts sets the AttemptHistory, AttemptsDropped and Args of steps from the store's
// attempt log; nothing when the store keeps none. It reads the attempts of the run at once,
// unless steps has only a few tool steps (the top-level steps of a run whose
// foreach iterations made thousands): then those steps' only.
func (e *Engine) withAttempts(ctx context.Context, runID string, steps []StepInfo) error {
	al, ok := e.store.(store.AttemptLog)
	if !ok || len(steps) == 0 {
		return nil
	}
	const few = 16
	var tried []string
	for i := range steps {
		if steps[i].Kind == "tool" || steps[i].Kind == "tool_remote" {
			tried = append(tried, steps[i].Key)
		}
	}
	var atts []store.Attempt
	if len(tried) <= few {
		for _, key := range tried {
			as, err := al.ListAttempts(ctx, runID, key)
			if err != nil {
				return err
			}
			atts = append(atts, as...)
		}
	} else {
		var err error
		if atts, err = al.ListAttempts(ctx, runID, ""); err != nil {
			return err
		}
	}
	if len(atts) == 0 {
		return nil
	}
	byKey := make(map[string][]store.Attempt)
	for _, a := range atts {
		byKey[a.StepKey] = append(byKey[a.StepKey], a)
	}
	for i := range steps {
		st := &steps[i]
		list := byKey[st.Key]
		if len(list) == 0 {
			continue
		}
		st.AttemptHistory = make([]AttemptInfo, len(list))
		for j, a := range list {
			st.AttemptHistory[j] = attemptInfo(a, st)
		}
		last := list[len(list)-1]
		st.AttemptsDropped = max(0, last.Attempt-len(list))
		st.Args = last.Args
	}
	return e.withFiles(ctx, runID, steps)
}

func attemptInfo(a store.Attempt, st *StepInfo) AttemptInfo {
	ai := AttemptInfo{Attempt: a.Attempt, Tool: a.Tool, Status: a.Status, Args: a.Args, Worker: a.Worker, Host: a.Host,
		PID: a.PID, Exit: a.Exit, StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Env: a.Env}
	if a.ErrorKind != "" || a.ErrorMessage != "" {
		ai.Error = &StepErrorInfo{Kind: a.ErrorKind, Message: a.ErrorMessage, Trace: a.ErrorTrace}
	}
	if a.Status == run.StepRunning && st.Status != run.StepRunning && st.Status != run.StepRetrying {
		// In flight when its run stopped (a cancel, a crash, a takeover): the step's end is its.
		ai.Status, ai.FinishedAt = st.Status, st.FinishedAt
		if st.Status == run.StepCompleted || st.Status == run.StepPending {
			ai.Status = run.StepInterrupted
		}
	}
	return ai
}
