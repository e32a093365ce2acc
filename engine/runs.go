package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Origins of a run: who started it. Runs from every origin but local see only the environment
// variables matching Config.EnvAllow.
const (
	OriginLocal    = "local"
	OriginMCP      = "mcp"
	OriginWebhook  = "webhook"
	OriginSchedule = "schedule"
	// OriginUI is a run started from the web dashboard (engine/ui, POST /api/runs): a remote
	// origin like mcp, whose trigger holds who started it ({"by": NAME}).
	OriginUI = "ui"
)

// StartRequest describes a run to start: a spec, or the name of a registered workflow.
type StartRequest struct {
	Spec     *spec.Spec     `json:"-"`
	Workflow string         `json:"workflow,omitempty"` // a catalog name, when Spec is nil
	Inputs   map[string]any `json:"inputs,omitempty"`
	Origin   string         `json:"origin,omitempty"`  // "" = local
	Trigger  map[string]any `json:"trigger,omitempty"` // {{trigger.*}}: schedule id, webhook payload, …
	// Priority, when set, is the run's priority when its steps wait for scarce resources, over
	// its spec's `priority` (docs/guide/resources.md): spec.MinPriority to spec.MaxPriority, higher
	// first (else invalid_request). nil = the spec's. The run's record keeps it: a resume, or
	// another engine's takeover, gives it again (RunInfo.Priority).
	Priority *int `json:"priority,omitempty"`
}

// RunInfo is the state of a run.
type RunInfo struct {
	ID       string             `json:"run_id"`
	Name     string             `json:"name"`
	Status   run.Status         `json:"status"`
	Terminal bool               `json:"terminal"`
	Error    *flowtype.RunError `json:"error,omitempty"`
	Progress run.Progress       `json:"progress"`
	SpecHash string             `json:"spec_hash"`
	// WorkflowVersion is the catalog version of the workflow (its name and spec hash) the run
	// used; 0 (absent in JSON) when that spec was never registered.
	WorkflowVersion int            `json:"workflow_version,omitempty"`
	Origin          string         `json:"origin"`
	Inputs          map[string]any `json:"inputs"`
	Trigger         map[string]any `json:"trigger,omitempty"`
	// Priority is the run's own priority, given when it started over its spec's `priority`
	// (StartRequest.Priority; kept across resumes and takeovers); absent: the spec's.
	Priority   *int      `json:"priority,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Approvals lists the open approvals of an unfinished run: those of the engine running it,
	// or, for a run another process runs (another engine on a shared database, the owner of a
	// read-only engine's file), those its records show (stored_approvals.go).
	Approvals []flowtype.Approval `json:"approvals,omitempty"`
	// Steps summarises the step instances outside foreach iterations (Status only; use Steps
	// for every instance).
	Steps []StepInfo `json:"steps,omitempty"`
	// Outputs maps the id of every completed step outside foreach iterations to its output
	// (Status of a finished run only). It is also the output of the workflow step that ran
	// this run as a child.
	Outputs map[string]any `json:"outputs,omitempty"`
	// ParentRunID and ParentStepKey name the run and the `kind: workflow` step instance that
	// started this run as its child; absent for a run started on its own.
	ParentRunID   string `json:"parent_run_id,omitempty"`
	ParentStepKey string `json:"parent_step_key,omitempty"`
	// Children lists the child runs the run's workflow steps started, oldest first, a retried
	// step's every attempt included (Status only).
	Children []ChildRun `json:"children,omitempty"`
	// Resumes is the run's resume history, oldest first (Status only): when, by whom, which
	// steps were forced. Absent for a run never resumed.
	Resumes []ResumeInfo `json:"resumes,omitempty"`
}

// StepInfo is the state of one step instance.
type StepInfo struct {
	Key      string         `json:"key"`
	StepID   string         `json:"step_id"`
	Kind     string         `json:"kind"`
	Status   run.StepStatus `json:"status"`
	Attempts int            `json:"attempts"`
	Cached   bool           `json:"cached,omitempty"`
	Output   any            `json:"output,omitempty"`
	FileRefs []any          `json:"file_refs,omitempty"`
	Error    *StepErrorInfo `json:"error,omitempty"`
	// Worker is the pool worker that ran the last attempt, "POOL/PID" (docs/guide/pools.md), or the
	// id of the engine that ran it from the tool-call queue (docs/operations/cluster.md); "" when neither.
	Worker string `json:"worker,omitempty"`
	// Logs are the output lines of the step's attempts, oldest first (a pool worker's call
	// output, docs/guide/pools.md "Output"); LogsDropped counts the older lines not kept
	// (docs/reference/limits.md "Step output").
	Logs        []run.LogLine `json:"logs,omitempty"`
	LogsDropped int           `json:"logs_dropped,omitempty"`
	// Progress is the latest progress the tool of the current (or last) attempt reported
	// (current_call().progress, docs/reference/python/README.md); nil when it reported none.
	Progress *run.StepProgress `json:"progress,omitempty"`
	// Waiting is what a step that is waiting_resources waits for: the amounts, its place in
	// the queue of the engine running it and since when (docs/guide/resources.md, "Waiting,
	// visibly"); nil in every other status. Read from the engine running the run, the place
	// is the queue's now; read from another process, as that engine last wrote it.
	Waiting *run.StepWaiting `json:"waiting,omitempty"`
	// ChildRunID is the newest child run of a workflow step (Status only; "" for other kinds).
	ChildRunID string `json:"child_run_id,omitempty"`
	// Args are the rendered arguments of the latest attempt (AttemptInfo.Args: secrets
	// redacted, bounded); nil when none was recorded (not a tool step, or no attempt).
	Args json.RawMessage `json:"args,omitempty"`
	// AttemptHistory lists the attempts of a tool or tool_remote step, oldest first, across
	// resumes: the first 10 and the last 100 are kept (docs/reference/limits.md "Attempts"),
	// AttemptsDropped counts those left out between.
	AttemptHistory  []AttemptInfo `json:"attempt_history,omitempty"`
	AttemptsDropped int           `json:"attempts_dropped,omitempty"`
	StartedAt       time.Time     `json:"started_at,omitzero"`
	FinishedAt      time.Time     `json:"finished_at,omitzero"`
}

// StepErrorInfo is the last failure of a step instance (or why it was skipped).
type StepErrorInfo struct {
	Kind    string `json:"kind,omitempty"`
	Message string `json:"message"`
	Trace   string `json:"trace,omitempty"`
}

// RunFilter selects runs for Runs. The zero value selects every run.
type RunFilter struct {
	Statuses []run.Status `json:"statuses,omitempty"`
	Name     string       `json:"name,omitempty"`  // exact workflow name
	Since    time.Time    `json:"since,omitzero"`  // created at or after
	Until    time.Time    `json:"until,omitzero"`  // created before
	Limit    int          `json:"limit,omitempty"` // 0 = no limit
	// After, when not nil, lists only the runs after that position of the newest-first order
	// (cursor paging: pass the CreatedAt and ID of the last run of the previous page). The
	// database walks its (created_at, id) index from there, so a page costs the same with
	// 10 or 100,000 runs before it.
	After *RunCursor `json:"-"`

	// The search fields (docs/reference/cli/inspecting.md "runs"): each one set narrows the selection (AND). Runs
	// checks them (validate) and answers each from an index of the store.

	// Inputs: each key is a top-level input of the run whose value is that text (a string
	// equal to it, an integer whose decimal text it is, true or false).
	Inputs map[string]string `json:"inputs,omitempty"`
	// Tool: an attempt of the run called this tool.
	Tool string `json:"tool,omitempty"`
	// StepStatuses: a step instance of the run is in one of these statuses.
	StepStatuses []run.StepStatus `json:"step_statuses,omitempty"`
	// ErrorKind: a step instance or an attempt of the run failed with this kind (ErrorKinds).
	ErrorKind string `json:"error_kind,omitempty"`
	// Worker: an attempt of the run ran on this worker ("POOL/PID"), or on any worker of this
	// pool ("POOL").
	Worker string `json:"worker,omitempty"`
	// ErrorText: an error message of a step instance or an attempt of the run contains this
	// text, ignoring case (a plain substring: % and _ match themselves).
	ErrorText string `json:"error_text,omitempty"`
}

// RunCursor is a position in the newest-first listing of runs (RunFilter.After): the CreatedAt
// and ID of a run listed.
type RunCursor = store.RunPosition

func (e *Engine) resolveSpec(req StartRequest) (*spec.Spec, error) {
	switch {
	case req.Spec != nil && req.Workflow != "":
		return nil, run.Errorf(run.CodeInvalidRequest, "give a spec or a workflow name, not both")
	case req.Spec != nil:
		return req.Spec, nil
	case req.Workflow != "":
		if s, ok := e.Workflow(req.Workflow); ok {
			return s, nil
		}
		msg := fmt.Sprintf("no workflow named %q is registered", req.Workflow)
		if sug := e.catalog.Suggest(req.Workflow); sug != "" {
			msg += fmt.Sprintf("; did you mean %q?", sug)
		}
		return nil, &run.Error{Code: run.CodeNotFound, Message: msg}
	}
	return nil, run.Errorf(run.CodeInvalidRequest, "no spec to run: give a spec or a workflow name")
}

// Submit starts a run and returns its id at once; the run goes on in the background. It fails
// before anything is recorded when the spec is invalid (*spec.ValidationError), the workflow is
// unknown (not_found), an input is bad (invalid_input, naming the input), a tool is unknown
// (unknown_tool, details["tools"] lists them) or the engine is closed (closed). ctx bounds only
// the start.
func (e *Engine) Submit(ctx context.Context, req StartRequest) (string, error) {
	return e.submit(ctx, req, nil)
}

// submit is Submit, writing fire (when not nil: a schedule's or a webhook delivery's, its
// RunID set here) with the run's creation, in one write (exec.Params.Fire).
func (e *Engine) submit(ctx context.Context, req StartRequest, fire *store.Fire) (string, error) {
	if e.isClosed() { // refused at once, before any work
		return "", errClosed()
	}
	if e.cfg.ReadOnly {
		return "", e.errReadOnly("start a run")
	}
	s, err := e.resolveSpec(req)
	if err != nil {
		return "", err
	}
	if err := s.Validate(); err != nil {
		return "", err
	}
	origin := req.Origin
	if origin == "" {
		origin = OriginLocal
	}
	switch origin {
	case OriginLocal, OriginMCP, OriginWebhook, OriginSchedule, OriginUI:
	default:
		return "", run.Errorf(run.CodeInvalidRequest, "origin must be %s, %s, %s, %s or %s; got %q", OriginLocal, OriginMCP, OriginWebhook, OriginSchedule, OriginUI, origin)
	}
	if p := req.Priority; p != nil && (*p < spec.MinPriority || *p > spec.MaxPriority) {
		return "", run.Errorf(run.CodeInvalidRequest, "priority must be %d to %d (higher is served first; none = the spec's); got %d", spec.MinPriority, spec.MaxPriority, *p)
	}
	inputs, err := exec.CheckInputs(s, req.Inputs)
	if err != nil {
		return "", err
	}
	if err := e.checkTools(s); err != nil {
		return "", err
	}
	if err := e.checkWorkflows(s); err != nil {
		return "", err
	}
	id := e.newRunID()
	if err := e.start(ctx, exec.Params{
		RunID: id, Spec: s, Inputs: inputs, Origin: origin, Trigger: req.Trigger, Priority: req.Priority,
		Env: exec.EnvPolicy{All: origin == OriginLocal, Allow: e.cfg.EnvAllow}, Fire: fire,
	}); err != nil {
		return "", err
	}
	e.writeUnsaved(ctx) // the store takes writes again: write the ends it did not take
	return id, nil
}

// start starts the run p describes (a new one, or a resume under the same id) and registers it
// with the engine: Close waits for it and stops it, live calls (Cancel, Approve, Status) reach
// it until it ends. It fails with code closed once Close has begun, and with the executor's
// error when the first write fails; nothing is registered then.
func (e *Engine) start(ctx context.Context, p exec.Params) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return errClosed()
	}
	e.wg.Add(1)
	e.starting.Add(1)
	e.mu.Unlock()
	defer e.starting.Done()
	tree, err := e.trees.Acquire(ctx, p.RunID, p.Ancestors, p.Resume)
	if err != nil {
		e.wg.Done()
		return err
	}
	if p.ParentRunID != "" && !p.Resume {
		if msg, ok := tree.AddRun(p.Spec.Name); !ok {
			e.trees.Release(tree)
			e.wg.Done()
			return &exec.ChildError{Kind: exec.KindLimitExceeded, Message: msg}
		}
	}
	p.Tree = tree
	p.OnDone = func(h *exec.Run) {
		e.trees.Release(tree)
		e.runDone(h)
	}
	// Registered before its steps start: a child run's id reaches a host (its calls' RunID)
	// before Start returns, and Wait, Cancel and Status must find it live from then on.
	p.OnStart = func(h *exec.Run) {
		e.mu.Lock()
		e.runs[p.RunID] = h
		e.mu.Unlock()
	}
	if _, err := e.exec.Start(ctx, p); err != nil {
		e.trees.Release(tree)
		e.wg.Done()
		return err
	}
	return nil
}

func (e *Engine) runDone(h *exec.Run) {
	if h.LeaseRefused() && e.members != nil {
		e.members.CountLost()
	}
	e.mu.Lock()
	if e.runs[h.ID()] == h { // a resumed run may have replaced it
		delete(e.runs, h.ID())
		e.unsaved.Keep(h.ID(), h.Unsaved(), h.UnsavedSteps())
	}
	e.mu.Unlock()
	e.wg.Done()
}

// checkTools fails with unknown_tool when a tool step names an unregistered tool or a
// tool_remote step names a remote that is not configured (toolcheck.Scope.Err), then with a
// *spec.ValidationError when a step asks for a resource the engine does not declare or for more
// than its limit (checkResources).
func (e *Engine) checkTools(s *spec.Spec) error {
	unknown, suggestions, notes, err := e.unknownTools(s)
	if err != nil {
		return err
	}
	if err := e.toolScope().Err(s, unknown, suggestions, notes); err != nil {
		return err
	}
	return e.checkResources(s)
}

// Run starts a run and waits for it to finish; it is Submit then Wait. The run's own failure is
// not an error: look at RunInfo.Status. If ctx ends first, Run returns context.Cause(ctx) and
// the run goes on.
func (e *Engine) Run(ctx context.Context, req StartRequest) (*RunInfo, error) {
	id, err := e.Submit(ctx, req)
	if err != nil {
		return nil, err
	}
	return e.Wait(ctx, id, 0)
}

func (e *Engine) live(id string) *exec.Run {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[id]
}

func notFound(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &run.Error{Code: run.CodeNotFound, Message: fmt.Sprintf("no run with id %q", id), Err: err}
	}
	if errors.Is(err, store.ErrClosed) {
		return errClosed()
	}
	if storeopen.IsFault(err) { // a full disk, a corrupted file: not a bug
		return &run.Error{Code: run.CodeStorage, Message: err.Error(), Err: err}
	}
	return &run.Error{Code: run.CodeInternal, Message: err.Error(), Err: err}
}

// Status returns the state of a run: status, error, progress, open approvals, the step
// instances outside foreach iterations, and, once it has finished, the outputs of its completed
// steps. An unknown id is code not_found.
func (e *Engine) Status(ctx context.Context, runID string) (*RunInfo, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	return e.status(ctx, runID)
}

// statusReads bounds how many times status reads a run whose record moved while it read it.
const statusReads = 3

// status is Status without the closed check: a parent run reads its child's result with it
// while a closing engine lets its host calls finish (Close, handOver).
//
// A run's record, steps, attempts and children are separate reads: a status change between
// them (a takeover writes the run interrupted, its resume running, with attempts of its own)
// would show a mix, such as an interrupted run beside an attempt of its resumed execution. So
// the run's record is read again at the end, and the whole read again when its status or update
// time moved (at most statusReads times; the last read stands). Steps writing their rows do not
// move the record: only a change of the run's status does.
func (e *Engine) status(ctx context.Context, runID string) (*RunInfo, error) {
	for try := 1; ; try++ {
		info, rec, err := e.statusOnce(ctx, runID)
		if err != nil || try == statusReads {
			return info, err
		}
		if again, err := e.store.GetRun(ctx, runID); err != nil || again.Status == rec.Status && again.UpdatedAt.Equal(rec.UpdatedAt) {
			return info, nil
		}
	}
}

// statusOnce reads the status of a run once (status), and the record it began with.
func (e *Engine) statusOnce(ctx context.Context, runID string) (*RunInfo, store.Run, error) {
	h := e.live(runID)
	rec, err := e.store.GetRun(ctx, runID)
	if err != nil {
		return nil, rec, notFound(runID, err)
	}
	info, err := e.statusOf(ctx, h, rec)
	return info, rec, err
}

// statusOf is the status of run rec (h: its live handle here, nil when none), its steps,
// attempts and children read now.
func (e *Engine) statusOf(ctx context.Context, h *exec.Run, rec store.Run) (*RunInfo, error) {
	runID := rec.ID
	steps, err := e.store.ListSteps(ctx, runID)
	if err != nil {
		return nil, notFound(runID, err)
	}
	info, raw := runInfo(rec), rawOutputs(ctx)
	info.WorkflowVersion = e.catalog.Version(ctx, rec.Name, rec.SpecHash)
	if h != nil && !info.Terminal {
		info.Progress = h.Progress()
		info.Approvals = h.Approvals()
	} else if !info.Terminal {
		if info.Approvals, err = storedApprovals(ctx, e.store, runID, steps); err != nil {
			return nil, notFound(runID, err)
		}
	}
	e.withUnsaved(info)
	if info.Children, err = e.childRuns(ctx, rec); err != nil {
		return nil, notFound(runID, err)
	}
	newest := newestChildren(info.Children)
	for _, st := range steps {
		if exec.InIteration(st.Key) {
			continue
		}
		si := stepInfo(st, raw)
		si.ChildRunID = newest[st.Key]
		info.Steps = append(info.Steps, si)
		if info.Terminal && st.Status == run.StepCompleted {
			if info.Outputs == nil {
				info.Outputs = map[string]any{}
			}
			info.Outputs[st.StepID] = si.Output
		}
	}
	e.livePlaces(runID, info.Steps)
	if err := e.withAttempts(ctx, runID, info.Steps); err != nil {
		return nil, notFound(runID, err)
	}
	if info.Resumes, err = e.runResumes(ctx, runID); err != nil {
		return nil, notFound(runID, err)
	}
	return info, nil
}

// Steps returns every step instance of a run, foreach iterations included, in the order they
// started.
func (e *Engine) Steps(ctx context.Context, runID string) ([]StepInfo, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	steps, err := e.store.ListSteps(ctx, runID)
	if err != nil {
		return nil, notFound(runID, err)
	}
	out, raw := make([]StepInfo, len(steps)), rawOutputs(ctx)
	var newest map[string]string
	if rec, err := e.store.GetRun(ctx, runID); err == nil {
		kids, err := e.childRuns(ctx, rec)
		if err != nil {
			return nil, notFound(runID, err)
		}
		newest = newestChildren(kids)
	}
	for i, st := range steps {
		out[i] = stepInfo(st, raw)
		out[i].ChildRunID = newest[st.Key]
	}
	e.livePlaces(runID, out)
	if !noAttempts(ctx) {
		if err := e.withAttempts(ctx, runID, out); err != nil {
			return nil, notFound(runID, err)
		}
	}
	return out, nil
}

// Wait waits until the run is terminal and returns its Status. timeout bounds the wait in real
// time: 0 waits without limit, negative does not wait; when it elapses first, Wait returns the
// current, non-terminal state and no error. If ctx ends first, Wait returns context.Cause(ctx).
// On a shared database a run this engine stops orchestrating before its end (it lost the
// run's lease: another engine took it over) is waited for in the database until it ends there.
func (e *Engine) Wait(ctx context.Context, runID string, timeout time.Duration) (*RunInfo, error) {
	if h := e.live(runID); h != nil && timeout >= 0 {
		var expired <-chan time.Time
		began := time.Now()
		if timeout > 0 {
			t := time.NewTimer(timeout)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-h.Done():
			if e.shared() {
				return e.waitLost(ctx, runID, timeout, began)
			}
		case <-expired:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	} else if timeout >= 0 && (e.cfg.ReadOnly || e.shared() || e.storedPaused(ctx, runID)) {
		return e.waitStored(ctx, runID, timeout)
	} else if timeout >= 0 && e.live(runID) != nil {
		return e.Wait(ctx, runID, timeout) // unpaused here between the two reads: follow it
	}
	return e.Status(ctx, runID)
}

// waitLost is Wait once this engine stopped orchestrating run runID on a shared database: the
// run ended here, or it went on elsewhere — the engine lost its lease (a stall longer than the
// lease) and another engine took the run over, or a closing engine handed it over. A run still
// unfinished (but for paused) is waited for in the store, for what is left of timeout since
// began.
func (e *Engine) waitLost(ctx context.Context, runID string, timeout time.Duration, began time.Time) (*RunInfo, error) {
	info, err := e.Status(ctx, runID)
	if err != nil || info.Terminal && info.Status != run.StatusInterrupted || info.Status == run.StatusPaused {
		return info, err
	}
	left := time.Duration(0)
	if timeout > 0 {
		if left = timeout - time.Since(began); left <= 0 {
			return info, nil
		}
	}
	return e.waitStored(ctx, runID, left)
}

// waitStored is Wait for a run another process runs, or for a paused run that no engine runs
// (until this engine unpauses or cancels it): it reads the run until it is terminal. On a
// shared database an interrupted run that a live lease holds is not yet at its end: an engine
// (another, or this one) took it over, or was handed it, and resumes it.
func (e *Engine) waitStored(ctx context.Context, runID string, timeout time.Duration) (*RunInfo, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		if h := e.live(runID); h != nil && !e.cfg.ReadOnly { // a paused run this engine unpaused
			left := time.Duration(0)
			if !deadline.IsZero() {
				if left = time.Until(deadline); left <= 0 {
					left = -1
				}
			}
			return e.Wait(ctx, runID, left)
		}
		info, err := e.Status(ctx, runID)
		// An interrupted run that a live lease holds (its own, or its parent's for a child run)
		// is being continued (a takeover claims the run, which writes it interrupted, then
		// resumes it, here or on another engine): not its end. The lease is read after the
		// status, so a run taken over, resumed and finished in between (its lease released)
		// looks unleased: it is the end only if the status read again is the same interrupted
		// record.
		resuming := err == nil && info.Status == run.StatusInterrupted && (e.leased(ctx, runID) || e.statusMoved(ctx, info))
		if err != nil || info.Terminal && !resuming || (!deadline.IsZero() && time.Now().After(deadline)) {
			return info, err
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(sharedEventPoll):
		}
	}
}

// statusMoved reports whether run info.ID's stored status or update time is no longer info's
// (it was written after info was read). A read error counts as not moved.
func (e *Engine) statusMoved(ctx context.Context, info *RunInfo) bool {
	rec, err := e.store.GetRun(ctx, info.ID)
	return err == nil && (rec.Status != info.Status || !rec.UpdatedAt.Equal(info.UpdatedAt))
}

// Cancel cancels a run: no new step starts, calls in flight are told (host calls report
// Cancelled, remote calls are abandoned), backoff sleeps and approval waits end at once, and the
// run becomes cancelled. It returns without waiting (use Wait). Cancelling a finished run does
// nothing and is not an error; an unknown id is code not_found.
func (e *Engine) Cancel(ctx context.Context, runID, reason string) error {
	if e.isClosed() {
		return errClosed()
	}
	if h := e.live(runID); h != nil {
		h.Cancel(reason)
		return nil
	}
	if e.unsavedFor(runID) != nil {
		return nil // it has ended; its end is not written yet
	}
	rec, err := e.store.GetRun(ctx, runID)
	if err != nil {
		return notFound(runID, err)
	}
	if (e.cfg.ReadOnly || e.heldElsewhere(ctx, runID)) && !rec.Status.Terminal() {
		return e.requestControl(ctx, store.ControlRequest{RunID: runID, Action: "cancel", Reason: reason})
	}
	if e.shared() && !rec.Status.Terminal() && rec.Status != run.StatusPaused {
		// A shared database: no live engine holds it (its engine died). Take it over, which
		// interrupts it, then record the cancel.
		return e.cancelOrphan(ctx, rec, reason)
	}
	if rec.Status == run.StatusPaused {
		// Paused, and no engine runs it (pause.go); its children are cancelled with it.
		if err := e.cancelPaused(ctx, rec, reason); err != nil {
			return err
		}
		return e.cancelStoredChildren(ctx, runID, reason, 0)
	}
	return nil
}

// Approve resolves the open approval of step instance stepKey (e.g. "human_gate" or
// "per_file[2].review"): approved lets the run go on, a denial fails the step. Errors: an
// unknown run (not_found), no open approval with that key (invalid_state, details["open"] lists
// the open ones).
func (e *Engine) Approve(ctx context.Context, runID, stepKey string, approved bool, reason, by string) error {
	if e.isClosed() {
		return errClosed()
	}
	if h := e.live(runID); h != nil {
		return h.Approve(stepKey, approved, reason, by)
	}
	rec, err := e.store.GetRun(ctx, runID)
	if err != nil {
		return notFound(runID, err)
	}
	if (e.cfg.ReadOnly || e.heldElsewhere(ctx, runID)) && !rec.Status.Terminal() {
		return e.requestControl(ctx, store.ControlRequest{RunID: runID, Action: "approve", StepKey: stepKey,
			Approved: approved, Reason: reason, By: by})
	}
	return &run.Error{Code: run.CodeInvalidState, StepID: stepKey,
		Message: fmt.Sprintf("run %s is %s: it has no open approval for step %q", runID, rec.Status, stepKey)}
}

// Runs lists runs matching f, newest first, without their steps.
func (e *Engine) Runs(ctx context.Context, f RunFilter) ([]RunInfo, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	recs, err := e.store.ListRuns(ctx, store.RunFilter{Statuses: f.Statuses, Name: f.Name, Since: f.Since, Until: f.Until,
		After: f.After, Limit: f.Limit, Inputs: f.Inputs, Tool: f.Tool, StepStatuses: f.StepStatuses, ErrorKind: f.ErrorKind,
		Worker: f.Worker, ErrorText: f.ErrorText})
	if err != nil {
		return nil, notFound("", err)
	}
	out := make([]RunInfo, 0, len(recs))
	for _, rec := range recs {
		info := runInfo(rec)
		info.WorkflowVersion = e.catalog.Version(ctx, rec.Name, rec.SpecHash)
		if h := e.live(rec.ID); h != nil && !info.Terminal {
			info.Progress = h.Progress()
		}
		e.withUnsaved(info)
		if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, info.Status) {
			continue // its record matched, its unsaved end does not
		}
		out = append(out, *info)
	}
	return out, nil
}

func runInfo(rec store.Run) *RunInfo {
	info := &RunInfo{
		ID: rec.ID, Name: rec.Name, Status: rec.Status, Terminal: rec.Status.Terminal(), Error: rec.Error,
		Progress: rec.Progress, SpecHash: rec.SpecHash, Origin: rec.Origin,
		CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, FinishedAt: rec.FinishedAt,
		ParentRunID: rec.ParentRunID, ParentStepKey: rec.ParentStepKey, Priority: rec.Priority,
	}
	_ = (*spec.Object)(&info.Inputs).UnmarshalJSON(rec.Inputs) // large integers stay exact
	if len(rec.Trigger) > 0 {
		_ = (*spec.Object)(&info.Trigger).UnmarshalJSON(rec.Trigger)
	}
	return info
}

// rawOutputsKey marks a context made by WithRawOutputs.
type rawOutputsKey struct{}

// WithRawOutputs returns a context under which Status, Wait and Steps give each step's output
// as the json.RawMessage stored (valid JSON, members in the order the tool wrote them; the
// caller must not modify it) instead of decoding it. The C ABI passes outputs on this way: a
// tool's output can be tens of MB, and decoding it only to encode it again costs several
// times its size in memory.
func WithRawOutputs(ctx context.Context) context.Context {
	return context.WithValue(ctx, rawOutputsKey{}, true)
}

func rawOutputs(ctx context.Context) bool { return ctx.Value(rawOutputsKey{}) != nil }

func stepInfo(st store.Step, raw bool) StepInfo {
	si := StepInfo{Key: st.Key, StepID: st.StepID, Kind: st.Kind, Status: st.Status, Attempts: st.Attempt, Cached: st.Cached,
		Worker: st.Worker, LogsDropped: st.LogsDropped, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt}
	if len(st.Logs) > 0 {
		_ = json.Unmarshal(st.Logs, &si.Logs)
	}
	si.Progress, si.Waiting = run.DecodeStepProgress(st.Progress, st.Status)
	switch {
	case len(st.Output) == 0:
	case raw:
		si.Output = json.RawMessage(st.Output)
	default:
		si.Output, _ = spec.DecodeValue(st.Output) // large integers stay exact
	}
	if len(st.FileRefs) > 0 {
		_ = json.Unmarshal(st.FileRefs, &si.FileRefs)
	}
	if st.ErrorKind != "" || st.ErrorMessage != "" {
		si.Error = &StepErrorInfo{Kind: st.ErrorKind, Message: st.ErrorMessage, Trace: st.ErrorTrace}
	}
	return si
}

// Artefact returns the bytes of an artefact captured from a tool's inline file_refs, by its
// uri ("artefact://sha256/<hex>") or its sha256. Unknown artefacts are code not_found; refs
// given by path or foreign uri are not held by the engine.
func (e *Engine) Artefact(ctx context.Context, ref string) ([]byte, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	sum := strings.TrimPrefix(ref, exec.ArtefactURIPrefix)
	data, err := e.store.GetArtefact(ctx, sum)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, &run.Error{Code: run.CodeNotFound, Message: fmt.Sprintf("no artefact %q", ref), Err: err}
		}
		return nil, notFound("", err)
	}
	return data, nil
}

// PurgeExpired deletes the idempotency entries whose TTL has run out (by the engine clock) and
// returns how many. Expired entries are never used anyway; purging only reclaims their space.
func (e *Engine) PurgeExpired(ctx context.Context) (int, error) {
	if e.isClosed() {
		return 0, errClosed()
	}
	n, err := e.store.PurgeExpired(ctx, e.clock.Now())
	if err != nil {
		return 0, notFound("", err)
	}
	return n, nil
}

// RunSpec returns the spec a run was started from (stored with the run, so it is the run's
// version even when its workflow was registered again since). An unknown id is code not_found.
func (e *Engine) RunSpec(ctx context.Context, runID string) (*spec.Spec, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	rec, err := e.store.GetRun(ctx, runID)
	if err != nil {
		return nil, notFound(runID, err)
	}
	s, err := spec.Parse(rec.SpecJSON, spec.Options{Format: spec.FormatJSON, Source: "run " + runID})
	if err != nil {
		return nil, &run.Error{Code: run.CodeInternal, Message: fmt.Sprintf("run %s: its stored spec no longer parses: %v", runID, err), Err: err}
	}
	return s, nil
}
