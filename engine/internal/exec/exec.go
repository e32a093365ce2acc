// Package exec runs workflows: it takes a validated spec and checked inputs and drives every step
// kind (tool, tool_remote, foreach, parallel, branch, approve, workflow) with depends_on scheduling,
// per-attempt timeouts, retries with backoff and jitter, idempotency, artefact capture,
// cancellation and events: the ▶ rules of docs/reference/spec.md, with the statuses and events of
// docs/reference/state-machine.md (docs/design/architecture.md shows where the executor sits).
//
// Durability: every state change is written to the store before anyone is told about it — an
// event is only visible once its batch is written, a step's completion is written before its
// dependents start, and a tool that runs outside the engine (a host or remote tool) or may block
// is called only after its step_enter is written. The step_enter of a tool or approve step
// rides with the step's next write: an inline built-in tool step (flow__echo) is written once,
// running and finished, in one commit. A crash before that write leaves no row for the step,
// which resume runs, as it re-runs a step left running.
package exec

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/expr"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/internal/tracing"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Config wires an Executor.
type Config struct {
	Store  store.Store
	Clock  clock.Clock   // nil = the real clock
	Router *tools.Router // required
	// Rand returns uniform values in [0, 1) for retry jitter; it must be safe for concurrent
	// use. nil disables jitter.
	Rand func() float64
	// StallAfter is the quiet period after which a running run gets a stall_detected event;
	// ≤ 0 disables stall detection.
	StallAfter time.Duration
	// OnWrite is called after every successful store write that appended events (to wake
	// event subscribers). May be nil.
	OnWrite func()
	// Environ returns the environment as "KEY=value" strings; nil = os.Environ.
	Environ func() []string
	// Limits bound what a spec may make one step do; zero fields mean their defaults.
	Limits Limits
	// PoolFor returns the remote (a worker pool) a `tool` step's calls go to, "" for
	// in-process (docs/guide/pools.md, "Routing"), and whether that pool is optional: the step runs
	// in-process when neither this engine nor another attached engine has it (tools.Call's
	// PoolOptional). It is asked once per spec and step, when the spec's plan is compiled, so
	// it must answer the same for the executor's lifetime. nil = every tool step runs
	// in-process.
	PoolFor func(st *spec.Step) (pool string, optional bool)
	// Children starts and finds the child runs of workflow steps (subworkflow.go); nil = a
	// workflow step fails with kind error.
	Children Children
	// Defaults are the engine's policy defaults for tool and tool_remote steps: a step's own
	// field comes first, then its spec's defaults, then these (spec.Defaults.Apply).
	Defaults spec.Defaults
	// Env is the engine's environment (the DCC and plugin versions it runs tools with; a JSON
	// object, docs/guide/assets.md): recorded with an attempt whose tool's side reported none,
	// and part of every cache key. nil = none.
	Env json.RawMessage
	// OnAttemptEnd, when set, is called once for every attempt of a tool or tool_remote step
	// that ended completed or failed, after its record (and its files) were written; not for a
	// cache or idempotency hit (no attempt is made), nor for an attempt the run's stop
	// interrupted. It is called from the run's goroutines, possibly concurrently, and must not
	// block (the engine queues an OpenLineage event). nil = none.
	OnAttemptEnd func(AttemptEnd)
	// Tracer makes the run, attempt and tool call spans (trace.go); nil = tracing off.
	Tracer *tracing.Tracer
	// Resources, when set, gives each attempt of a tool step with `resources` its units of the
	// engine's scarce resources before its call, and takes them back after (resources.go,
	// docs/guide/resources.md); nil = such steps do not wait.
	Resources ResourceGate
}

// AttemptEnd is an attempt that ended (Config.OnAttemptEnd).
type AttemptEnd struct {
	// Attempt is the attempt's record as written: run id, step key, attempt number, tool,
	// status (completed or failed), error, environment, start and end times.
	Attempt store.Attempt
	// Workflow is the run's workflow name ("" for an unnamed one); ParentRunID the run this
	// run is a child of ("" for a run started on its own).
	Workflow, ParentRunID string
	// Files are the files the attempt read and wrote, as recorded (empty when none).
	Files []store.FileRecord
}

// DefaultMaxForeachItems is the most items a foreach iterates when Limits.MaxForeachItems is 0.
// The foreach of 100,000 items of `make bench` is within it.
const DefaultMaxForeachItems = 100_000

// Limits bound what a spec — possibly untrusted, such as one sent to MCP workflows_run — may
// make one step do. Past a limit the step fails with kind limit_exceeded and a message naming
// the step, the value and the engine config key that raises it; the engine and other runs go
// on. Zero fields mean their defaults.
type Limits struct {
	// JSONPath bounds one evaluation of a foreach `items` or branch `on` JSONPath
	// (expr.DefaultMaxResults nodes held, expr.DefaultMaxWork units of work).
	JSONPath expr.Limits
	// MaxForeachItems is the most items one foreach instance iterates (DefaultMaxForeachItems).
	MaxForeachItems int
	// MaxFilesPerStep is the most files one attempt of a tool step records, its declared reads
	// and writes (globs expanded) and the files its tool reported (DefaultMaxFilesPerStep);
	// past it the step fails with kind limit_exceeded.
	MaxFilesPerStep int
}

// KindLimitExceeded is the error kind of a step stopped by a Limits field (a foreach or a
// branch, which are never retried): only a change of the spec, its inputs or the engine config
// helps.
const KindLimitExceeded = "limit_exceeded"

// Executor starts runs. It is safe for concurrent use.
type Executor struct {
	cfg     Config
	plans   planCache
	secrets schemaSecrets // the args each tool's schema marks secret (attempt.go)
	hashes  hashCache     // the stat cache of the files steps read and write (assets.go)
}

// New returns an executor.
func New(cfg Config) *Executor {
	if cfg.Clock == nil {
		cfg.Clock = clock.New()
	}
	if cfg.Environ == nil {
		cfg.Environ = os.Environ
	}
	if cfg.Limits.MaxForeachItems <= 0 {
		cfg.Limits.MaxForeachItems = DefaultMaxForeachItems
	}
	if cfg.Limits.JSONPath.MaxResults <= 0 {
		cfg.Limits.JSONPath.MaxResults = expr.DefaultMaxResults
	}
	if cfg.Limits.JSONPath.MaxWork <= 0 {
		cfg.Limits.JSONPath.MaxWork = expr.DefaultMaxWork
	}
	return &Executor{cfg: cfg, plans: planCache{poolFor: cfg.PoolFor, defaults: cfg.Defaults}}
}

// Tools returns the tools a spec's tool steps name and the remote tools its tool_remote steps
// name (and its tool steps routed to a pool by Config.PoolFor), each sorted and unique. The spec's compiled plan is cached, so this is cheap.
func (x *Executor) Tools(s *spec.Spec) ([]string, []RemoteTool, error) {
	pl, err := x.plans.get(s)
	if err != nil {
		return nil, nil, err
	}
	return pl.tools, pl.remotes, nil
}

// EnvPolicy says which environment variables a run's `env` root shows.
type EnvPolicy struct {
	All   bool     // every variable (runs started locally)
	Allow []string // else only the names matching one of these path.Match patterns
}

// Params describe a run to start.
type Params struct {
	RunID   string
	Spec    *spec.Spec     // validated
	Inputs  map[string]any // checked by CheckInputs
	Origin  string         // "local", "mcp", "webhook", "schedule", "ui"
	Env     EnvPolicy
	Trigger map[string]any // the trigger document, or nil
	// Priority, when set, is the run's priority for its steps waiting for resources, over its
	// spec's (Config.Resources); nil = the spec's. A new run's record keeps it (store.Run.
	// Priority); a resume passes the record's.
	Priority *int
	// Prior holds step instances of an earlier execution of this run: the completed ones are
	// reused (their outputs feed templates, they are not run again), the others run.
	Prior []store.Step
	// Force names step ids or instance keys a resume runs again on purpose (ResumeOptions.
	// ForceSteps): their tool steps skip the idempotency cache lookup, so the tool is called, and
	// the new output replaces the cached one. Empty: every cache entry is used.
	Force []string
	// OnFailureOnly resumes a run interrupted while its on_failure steps ran (Resume is set):
	// its other steps are not run again (their completed instances in Prior feed templates),
	// the on_failure steps run, reusing their completed instances, with this as the run's
	// error, and the run ends failed with it. nil: a normal run or resume, where on_failure
	// steps run (all of them, again) only if the run fails.
	OnFailureOnly *store.RunError
	// Resume means the run record already exists (Prior comes from it): it is set back to
	// running with a workflow_resumed event instead of being created.
	Resume bool
	// ResumedBy, on a resume, names who asked for it: the workflow_resumed event's detail is
	// then {"by": ResumedBy}; "" writes no detail.
	ResumedBy string
	// ParentRunID and ParentStepKey, on a new run, record the workflow step instance this run
	// is the child of (store.Run); "" for a run started on its own.
	ParentRunID, ParentStepKey string
	// Ancestors are the runs above this one (outermost first; the last is ParentRunID), for a
	// child run, new or resumed; its host tool calls carry them (tools.Call.Ancestors), so a
	// host thread driving an ancestor runs them.
	Ancestors []string
	// Tree counts the runs and step instances of the run's tree (tree.go): the run's own step
	// instances are added to it, and a foreach that would pass its MaxInstances fails. nil:
	// not counted.
	Tree *Tree
	// Unpause, with Resume, is the unpause of a paused run that no engine was running (its
	// engine stopped, or its process died): a run_unpaused event with this detail precedes the
	// workflow_resumed event, in the same commit.
	Unpause *PauseInfo
	// OnDone is called once the run's goroutines have returned (a cancelled run's Done is
	// closed earlier, as soon as its terminal state is written), with the *Run Start returned
	// (the same pointer, so a caller can tell it from the run of a later resume).
	OnDone func(*Run)
	// Fire, on a new run, is the fire of the schedule or webhook delivery that started it,
	// written in the run's first write (store.Batch.Fires) with its RunID set: the store must be
	// a store.FireBatcher. nil: none.
	Fire *store.Fire
	// OnStart, when set, is called with the run's handle once its first write is stored and
	// before any of its steps starts, so the caller can register the run before anything of
	// it (a host call, a child run) can be seen.
	OnStart func(*Run)
}

// Approval is an open approval of a run (flowtype.Approval).
type Approval = flowtype.Approval

// Run is a started run. Its methods are safe for concurrent use.
type Run struct{ r *runner }

// ID returns the run id.
func (h *Run) ID() string { return h.r.id }

// Done is closed once the run's terminal state is written. After a Cancel or Stop, the goroutines
// of the steps that were in flight may still be unwinding; they write nothing more.
func (h *Run) Done() <-chan struct{} { return h.r.done }

// Cancel cancels the run: steps in flight end as cancelled, and so does the run. reason is
// recorded ("" is fine). It returns once the terminal record is written (Done is closed); the
// steps' goroutines unwind after that. Cancelling a finished run, or twice, does nothing.
func (h *Run) Cancel(reason string) { h.r.stop(userCancel(reason)) }

// Stop ends the run because the engine stops: it becomes interrupted, not cancelled. It returns
// once the terminal record is written.
func (h *Run) Stop() { h.r.stop(ErrEngineStop.(*stopCause)) }

// Abandon stops orchestrating the run without writing anything more of it: no step row, no
// event, no terminal record (the database keeps what was committed, for the engine that holds
// the run's lease now; store.Leaser). Its steps in flight are cancelled locally (host calls
// report Cancelled), its live child runs are abandoned with it, and Done is closed at once;
// Status says interrupted. Abandoning a finished run does nothing.
func (h *Run) Abandon() { h.r.stop(errLeaseLost) }

// LeaseRefused reports whether the run stopped because the store refused one of its writes:
// another engine held its lease (store.ErrLeaseLost), so it was abandoned as by Abandon, found
// by the run itself rather than by the engine's heartbeat.
func (h *Run) LeaseRefused() bool { return h.r.stopCause.Load() == errLeaseRefused }

// Ancestors returns the runs above this one, outermost first (Params.Ancestors): nil for a
// run started on its own.
func (h *Run) Ancestors() []string { return h.r.ancestors }

// Status returns the run's current status.
func (h *Run) Status() run.Status {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	return h.r.status
}

// Unsaved returns the run's terminal state when the store failed to take it (a full disk):
// status, progress and an error of kind storage; nil while the run goes on or once its end is
// written.
func (h *Run) Unsaved() *store.RunUpdate {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if h.r.unsaved == nil {
		return nil
	}
	u := *h.r.unsaved
	return &u
}

// UnsavedSteps returns the step rows of the terminal batch the store did not take (see
// Unsaved), to be written with the run's end; nil when there is none.
func (h *Run) UnsavedSteps() []store.Step {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if h.r.unsaved == nil {
		return nil
	}
	return h.r.unsavedSteps
}

// Progress returns the run's progress.
func (h *Run) Progress() run.Progress { return h.r.progress() }

// Approvals returns the open approvals, sorted by step key.
func (h *Run) Approvals() []Approval { return h.r.openApprovals() }

// Approve resolves the open approval of stepKey. It fails with code invalid_state when there is
// none.
func (h *Run) Approve(stepKey string, approved bool, reason, by string) error {
	return h.r.resolveApproval(stepKey, decision{approved: approved, reason: reason, by: by})
}

// Start writes the run record and its workflow_started event, then runs the spec in the
// background. ctx bounds only the initial write: the run lives until it finishes, is cancelled
// or stopped.
func (x *Executor) Start(ctx context.Context, p Params) (*Run, error) {
	if p.Spec == nil {
		return nil, run.Errorf(run.CodeInvalidRequest, "no spec to run")
	}
	pl, err := x.plans.get(p.Spec)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInternal, Message: "compiling the spec: " + err.Error(), Err: err}
	}
	inputsJSON, err := json.Marshal(p.Inputs)
	if err != nil {
		return nil, run.Errorf(run.CodeInvalidInput, "inputs are not JSON-encodable: %v", err)
	}
	var trigger any
	var triggerJSON json.RawMessage
	if p.Trigger != nil {
		if triggerJSON, err = json.Marshal(p.Trigger); err != nil {
			return nil, run.Errorf(run.CodeInvalidRequest, "the trigger is not JSON-encodable: %v", err)
		}
		trigger, _ = spec.DecodeValue(triggerJSON) // a private copy of plain JSON values
	}
	inputs := p.Inputs
	if inputs == nil {
		inputs = map[string]any{}
	}
	r := &runner{
		x: x, id: p.RunID, name: p.Spec.Name, plan: pl, inputs: inputs, trigger: trigger, origin: p.Origin,
		ancestors: p.Ancestors, tree: p.Tree, priority: *cmp.Or(p.Priority, &p.Spec.Priority), fairShare: p.Spec.FairShare,
		runDoc: map[string]any{"id": p.RunID, "name": p.Spec.Name},
		env:    p.Env, status: run.StatusRunning, done: make(chan struct{}), onDone: p.OnDone,
		approvals: map[string]*approval{}, onFailureOnly: p.OnFailureOnly,
	}
	for _, f := range p.Force {
		if r.forced == nil {
			r.forced = map[string]bool{}
		}
		r.forced[f] = true
	}
	mainRows := 0 // the instances of Prior that are not on_failure steps
	for _, st := range p.Prior {
		if r.priorKeys == nil {
			r.prior, r.priorKeys, r.priorInside = map[string]store.Step{}, map[string]bool{}, map[string]int{}
		}
		r.priorKeys[st.Key] = true
		if st.Status == run.StepInterrupted && st.Attempt > 0 {
			if r.priorAttempt == nil {
				r.priorAttempt = map[string]int{}
			}
			r.priorAttempt[st.Key] = st.Attempt
		}
		onFailure := IsOnFailure(st.Key)
		if !onFailure {
			mainRows++
		}
		if onFailure && p.OnFailureOnly == nil {
			continue // on_failure steps run again, all of them, if this execution fails
		}
		eachEnclosingForeach(st.Key, func(fk string) { r.priorInside[fk]++ })
		if st.Status == run.StepCompleted {
			r.prior[st.Key] = st
		}
	}
	r.rowKeys = r.priorKeys
	if p.Resume && len(p.Force) > 0 {
		// The forced instances (and those enclosing them) are not in Prior but have rows: their
		// first write updates them (the Insert hint must not say otherwise).
		rows, err := x.cfg.Store.ListSteps(ctx, p.RunID)
		if err != nil {
			return nil, fmt.Errorf("resuming run %s: reading its steps: %w", p.RunID, err)
		}
		r.rowKeys = make(map[string]bool, len(rows))
		for _, st := range rows {
			r.rowKeys[st.Key] = true
		}
	}
	if al, ok := x.cfg.Store.(store.AttemptLog); ok && p.Resume {
		// A resume: number this execution's attempts after those recorded.
		atts, err := al.ListAttempts(ctx, p.RunID, "")
		if err != nil {
			return nil, fmt.Errorf("resuming run %s: reading its attempts: %w", p.RunID, err)
		}
		for _, a := range atts {
			if a.Attempt > r.attemptBase[a.StepKey] {
				if r.attemptBase == nil {
					r.attemptBase = map[string]int{}
				}
				r.attemptBase[a.StepKey] = a.Attempt
			}
		}
	}
	r.ctx, r.cancelCtx = context.WithCancelCause(context.Background())
	r.handle = &Run{r: r}
	r.root = newRootFrame(r, pl.rootFrame)
	r.total.Store(int64(len(pl.rootFrame.owned)))
	r.tree.addInstances(len(pl.rootFrame.owned), false) // at most the spec's 10,000 steps
	if p.OnFailureOnly != nil {
		// The run's steps are over: they count as they are; the on_failure steps add theirs.
		r.total.Store(int64(mainRows))
		r.completed.Store(int64(mainRows))
	}

	now := x.cfg.Clock.Now()
	b := &store.Batch{}
	if p.Resume {
		b.RunUpdates = []store.RunUpdate{{ID: r.id, Status: run.StatusRunning, Progress: r.progress(), UpdatedAt: now}}
		// The resume history (store.AttemptLog.Resumes, docs/reference/cli/inspecting.md "show"): who resumed the
		// run and which steps were forced.
		var detail json.RawMessage
		d := map[string]any{}
		if p.ResumedBy != "" {
			d["by"] = p.ResumedBy
		}
		if len(p.Force) > 0 {
			d["forced"] = p.Force
		}
		if p.OnFailureOnly != nil {
			d["on_failure_only"] = true
		}
		if len(d) > 0 {
			detail = jsonDetail(d)
		}
		b.Events = []run.Event{r.event(now, run.EventWorkflowResumed, "", string(run.StatusRunning), 0, detail)}
		if p.Unpause != nil {
			b.Events = append([]run.Event{r.event(now, run.EventRunUnpaused, "", string(run.StatusRunning), 0, p.Unpause.Detail())}, b.Events...)
		}
	} else {
		rec := store.Run{
			ID: r.id, Name: r.name, SpecJSON: p.Spec.Canonical(), SpecHash: p.Spec.Hash(), Inputs: inputsJSON,
			Status: run.StatusRunning, Origin: p.Origin, Trigger: triggerJSON, Progress: r.progress(),
			CreatedAt: now, UpdatedAt: now, ParentRunID: p.ParentRunID, ParentStepKey: p.ParentStepKey,
			Priority: p.Priority,
		}
		if !p.Env.All {
			rec.EnvAllow = append([]string{}, p.Env.Allow...)
		}
		b.CreateRuns = []store.Run{rec}
		b.Events = []run.Event{r.event(now, run.EventWorkflowStarted, "", string(run.StatusRunning), 0, nil)}
		if p.Fire != nil {
			f := *p.Fire
			f.RunID = r.id
			b.Fires = []store.Fire{f}
		}
	}
	if err := x.cfg.Store.Write(ctx, b); err != nil {
		r.cancelCtx(context.Canceled)
		if run.CodeOf(err) == run.CodeInternal && !errors.Is(err, store.ErrClosed) {
			// The store could not take the run (a full disk, an I/O error): not a bug.
			return nil, &run.Error{Code: run.CodeStorage, Err: err, Details: map[string]any{"run_id": r.id},
				Message: fmt.Sprintf("starting run %s: the database write failed: %v; free disk space or fix the storage and submit again", r.id, err)}
		}
		return nil, fmt.Errorf("starting run %s: %w", r.id, err)
	}
	x.notify()
	r.lastActivity.Store(now.UnixNano())
	r.armStall()
	r.startTrace(p) // trace.go
	if p.OnStart != nil {
		p.OnStart(r.handle)
	}
	go r.main()
	return r.handle, nil
}

func (x *Executor) notify() {
	if x.cfg.OnWrite != nil {
		x.cfg.OnWrite()
	}
}

// envMap returns the run's `env` root, built on first use.
func (r *runner) envMap() map[string]any {
	r.envOnce.Do(func() {
		m := map[string]any{}
		for _, kv := range r.x.cfg.Environ() {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				continue
			}
			if r.env.All || envAllowed(k, r.env.Allow) {
				m[k] = v
			}
		}
		r.envDoc = m
	})
	return r.envDoc
}

func envAllowed(name string, patterns []string) bool {
	for _, p := range patterns {
		if ok, err := path.Match(p, name); err == nil && ok {
			return true
		}
	}
	return false
}

// ValidEnvPattern reports whether p is a valid env_allow pattern (path.Match syntax).
func ValidEnvPattern(p string) bool {
	if p == "" {
		return false
	}
	_, err := path.Match(p, "")
	return err == nil
}

// runner is the state of one run.
type runner struct {
	x         *Executor
	id, name  string
	origin    string
	ancestors []string // Params.Ancestors
	priority  int      // the run's own priority, else its spec's: for the steps waiting for resources
	fairShare string   // the spec's fair_share template, "" for none (resources.go)
	tree      *Tree    // Params.Tree
	plan      *plan
	root      *frame
	ctx       context.Context
	cancelCtx context.CancelCauseFunc
	inputs    map[string]any
	trigger   any
	runDoc    map[string]any
	env       EnvPolicy
	envOnce   sync.Once
	envDoc    map[string]any
	prior     map[string]store.Step // completed instances of an earlier execution, by key
	priorKeys map[string]bool       // every instance key of an earlier execution
	// rowKeys is every instance key with a stored row: priorKeys, and on a forced resume the
	// forced instances too (the Insert hint of their first write).
	rowKeys map[string]bool
	// attemptBase is, for each instance an earlier execution made attempts of, the largest
	// attempt number recorded (store.AttemptLog): the attempts of this execution are numbered
	// after it, so a resume keeps the earlier ones.
	attemptBase map[string]int
	// priorAttempt is, for each instance an earlier execution had in flight when it stopped
	// (its row interrupted), the attempt it was making (tools.Call.AdoptAttempt).
	priorAttempt map[string]int
	// priorInside counts, by foreach instance key, the instances of an earlier execution inside
	// its iterations: a reused foreach adds them to the progress.
	priorInside map[string]int
	forced      map[string]bool // step ids and instance keys forced by a resume (Params.Force)
	// priorEntries holds, by step id, the newest cache entry of the step's tool and workflow
	// from before this run wrote any (assets.go: what a miss is compared with), read once.
	priorEntries sync.Map
	// confirms are the file records the run's cache lookups confirmed (assets.go), stored in
	// one write at the run's end or per confirmBatch.
	confirmMu sync.Mutex
	confirms  []store.FileRecord
	// onFailureOnly is Params.OnFailureOnly.
	onFailureOnly *store.RunError
	// failing is the run's error once its on_failure steps run (a cancel then ends the run
	// failed with it); onFailureEnd how they ended, for the workflow_terminal event (under mu).
	failing      atomic.Pointer[store.RunError]
	onFailureEnd run.StepStatus
	onDone       func(*Run)
	handle       *Run         // what Start returned and onDone is given
	trace        *tracing.Run // the span of this execution (trace.go); nil = tracing off

	completed, total atomic.Int64
	leaf             atomic.Int32              // tool attempts in flight (for running vs waiting)
	resWaiting       atomic.Int32              // of those, the ones waiting for resources (waiting_resources)
	open             atomic.Int32              // open approvals
	lastActivity     atomic.Int64              // unix nanos of the last write with events
	stopCause        atomic.Pointer[stopCause] // the run-level cause, once cancelled

	mu        sync.Mutex
	status    run.Status
	approvals map[string]*approval
	finished  bool
	unsaved   *store.RunUpdate // the terminal state the store did not take (see writeTerminal)
	// unsavedSteps are the step rows of that refused terminal batch (the steps the run's end
	// wrote as cancelled, failed or interrupted), written with it later (Engine's unsaved).
	unsavedSteps []store.Step
	stallTimer   clock.Timer
	stallMarked  int64 // lastActivity value already reported as a stall
	done         chan struct{}
	doneOnce     sync.Once

	// sealMu orders every write of the run (read-locked) against sealing it (write-locked):
	// once sealed, the terminal record is written and nothing else is. Lock order: mu, sealMu,
	// liveMu.
	sealMu             sync.RWMutex
	sealed             bool
	liveMu             sync.Mutex
	liveHead, liveTail *inst // step instances in flight, oldest first
	// unwritten are the rows of instances that left the registry with no terminal row written
	// while a store failure (a full disk) stops the run (keepUnwritten): their goroutines unlink
	// them before the seal runs, so the seal writes their rows from here, as it writes those in
	// flight, and no step is left running in an ended run. Guarded by liveMu.
	unwritten []store.Step

	// kids are the live child runs of the run's workflow steps, by run id (subworkflow.go);
	// joins counts the Children.Join calls in flight, and joined is closed (and reset) when
	// the count drops to 0, so stopChildren can wait for a child started but not yet in kids.
	kidsMu sync.Mutex
	kids   map[string]Child
	joins  int
	joined chan struct{}

	// pauseMu is the pause gate (pause.go): pauseCh is non-nil while the run is paused and
	// closed by Unpause; a step instance registers itself read-locked. Lock order: mu,
	// pauseMu, sealMu.
	pauseMu sync.RWMutex
	pauseCh chan struct{}
	// held is set by Hold, under pauseMu: the gate stays closed for good.
	held atomic.Bool
	// hosting counts the instances with a host call a thread took and whose outcome is not
	// written yet (HostBusy; inst.hostStarted, inst.unhost).
	hosting atomic.Int32
}

// stop ends the run from outside: it seals the run first, while the steps in flight are still
// parked in their calls and sleeps, then cancels their context so they unwind. The first cause
// wins.
func (r *runner) stop(sc *stopCause) {
	r.stopCause.CompareAndSwap(nil, sc)
	r.seal()
	r.cancelCtx(r.stopCause.Load())
	r.stopChildren() // subworkflow.go: the child runs end with it, before stop returns
}

// cancel stops the run with cause (*stopCause for user cancels, engine stops and store
// failures). The first cause wins.
func (r *runner) cancel(cause error) {
	if sc, ok := cause.(*stopCause); ok {
		r.stopCause.CompareAndSwap(nil, sc)
	}
	r.cancelCtx(cause)
}

func (r *runner) progress() run.Progress {
	return run.Progress{Completed: int(r.completed.Load()), Total: int(r.total.Load())}
}

func (r *runner) event(now time.Time, typ, key, status string, attempt int, detail json.RawMessage) run.Event {
	return run.Event{Time: now, RunID: r.id, Type: typ, StepKey: key, Status: status, Attempt: attempt,
		Progress: r.progress(), Detail: detail}
}

// touch records activity for stall detection.
func (r *runner) touch(now time.Time) {
	if r.x.cfg.StallAfter > 0 {
		r.lastActivity.Store(now.UnixNano())
	}
}

func jsonDetail(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}
