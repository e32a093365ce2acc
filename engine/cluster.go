package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/cluster"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/startstop"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/internal/toolcheck"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// The engine's side of engine/internal/cluster: what the membership (leases, sweeps, hand-over),
// the tool-call queue and the control poller need from the engine (clusterLocal), and the facade
// methods that report on them. docs/operations/cluster.md explains the behaviour.

// DefaultLeaseSecs is Config.LeaseSecs when the config says 0.
const DefaultLeaseSecs = 15

// DefaultCloseGraceSecs is Config.CloseGraceSecs when the config says 0.
const DefaultCloseGraceSecs = 10

// LeaseStats says what an engine on a shared database did with leases.
type LeaseStats struct {
	EngineID string `json:"engine_id"` // "" when the database is not shared (no leases)
	// TakenOver counts the runs of other engines (or of no live engine) it claimed and resumed;
	// Abandoned the runs it stopped orchestrating because it lost their lease.
	TakenOver int `json:"taken_over"`
	Abandoned int `json:"abandoned"`
	// HandedOver counts the runs it gave to the other engines as it closed (Engine.Close);
	// HandedOverCancelled those of them whose host call was still running past the close
	// grace: the call was cancelled, and the next engine calls that step again.
	HandedOver          int `json:"handed_over"`
	HandedOverCancelled int `json:"handed_over_cancelled"`
	// LastSweepError is the error of the last look for expired leases, "" when it went well.
	LastSweepError string `json:"last_sweep_error,omitempty"`
}

// LeaseStats returns the engine's lease figures.
func (e *Engine) LeaseStats() LeaseStats {
	if e.members == nil {
		return LeaseStats{}
	}
	s := e.members.Stats()
	st := LeaseStats{EngineID: e.members.ID(), TakenOver: s.TakenOver, Abandoned: s.Abandoned, HandedOver: s.HandedOver, HandedOverCancelled: s.HandedOverCancelled}
	if s.LastSweepErr != nil {
		st.LastSweepError = s.LastSweepErr.Error()
	}
	return st
}

// EngineID returns the id this engine registered with a shared database (the owner written on
// the runs it orchestrates), "" when its database is not shared.
func (e *Engine) EngineID() string {
	if e.members == nil {
		return ""
	}
	return e.members.ID()
}

// shared reports whether the engine's database is shared with other engines (leases).
func (e *Engine) shared() bool { return e.members != nil }

// attach registers the engine with a shared store (store.Leaser). It reports whether the store
// is one (then recovery is the sweep of expired leases, not MarkInterrupted).
func (e *Engine) attach(ctx context.Context) (bool, error) {
	l, ok := e.store.(store.Leaser)
	if !ok {
		return false, nil
	}
	host, _ := os.Hostname()
	lease := time.Duration(e.cfg.LeaseSecs * float64(time.Second))
	local := clusterLocal{e}
	m, err := cluster.Join(ctx, cluster.Config{
		Leaser: l, Clock: e.clock, Host: e.router.Host(),
		Info:       store.EngineInfo{ID: cluster.NewEngineID(host, os.Getpid()), Host: host, PID: os.Getpid(), Lease: lease, Remotes: local.RemoteNames()},
		CloseGrace: e.closeGrace(), InterruptGrace: e.interruptGrace(),
		OnBeat: func(ctx context.Context) {
			if e.queue != nil {
				e.queue.Beat(ctx)
			}
		},
	}, local)
	if err != nil {
		return true, notFound("", err)
	}
	e.members = m
	// A puller coming back from a suspension must not start a call of a run another engine
	// may have completed meanwhile (cluster.Membership.Fresh).
	e.router.Host().SetGate(m.Fresh)
	return true, nil
}

// startServices starts the engine's background services, in order: the control poller (a
// store that carries control requests), the tool-call queue and the heartbeat (a shared
// database); Close stops them in reverse once the runs have ended. It then sweeps once: runs
// left by dead engines that this one can resume with its tools.
func (e *Engine) startServices(ctx context.Context) error {
	var svcs []startstop.Service
	if cs, ok := e.store.(store.Controller); ok {
		svcs = append(svcs, cluster.NewControlPoller(cs, e.clock, e))
	}
	if e.members != nil {
		if q, ok := e.store.(store.CallQueue); ok {
			e.queue = cluster.NewQueue(e.members, q, clusterLocal{e})
			e.router.SetQueue(e.queue, e.queue.Hosted, e.queue.HasRemote)
		}
		svcs = append(svcs, e.members)
		if e.queue != nil {
			svcs = append(svcs, e.queue)
		}
	}
	if e.resGate != nil && e.resGate.Prober() != nil { // the resources' live counts (resources_probe.go)
		svcs = append(svcs, e.resGate.Prober())
	}
	if err := e.services.Start(ctx, svcs...); err != nil {
		return err
	}
	if e.members != nil {
		e.members.Sweep(ctx)
	}
	return nil
}

// kickSweep asks for a sweep soon (a tool was registered: runs that need it may be taken over).
func (e *Engine) kickSweep() {
	if e.members != nil {
		e.members.Kick()
	}
}

// publishTools writes the host tools this engine hosts in its engines row now (not at the next
// heartbeat), so that other engines queue their calls at once, and claims the queued ones.
func (e *Engine) publishTools() {
	if e.members == nil {
		return
	}
	e.members.Publish()
	if e.queue != nil {
		e.queue.KickNow()
	}
}

// executing returns the runs this engine is executing.
func (e *Engine) executing() map[string]*exec.Run {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]*exec.Run, len(e.runs))
	for id, h := range e.runs {
		if !isDone(h.Done()) {
			out[id] = h
		}
	}
	return out
}

// acquire makes this engine the owner of runID before it resumes or unpauses it, on a shared
// database; another engine's live lease is code invalid_state naming it.
func (e *Engine) acquire(ctx context.Context, runID string) error {
	if e.members == nil {
		return nil
	}
	ok, holder, err := e.members.Leaser().Acquire(ctx, runID)
	if err != nil {
		return notFound(runID, err)
	}
	if !ok {
		return &run.Error{Code: run.CodeInvalidState, Details: map[string]any{"engine": holder},
			Message: fmt.Sprintf("run %s is running on engine %s; ask that engine (cancel, pause, approve reach it from here), or wait for it to end", runID, holder)}
	}
	return nil
}

// leased reports whether a live lease holds runID, or the run above it (store.Leaser.Leased);
// false when the database is not shared or cannot say.
func (e *Engine) leased(ctx context.Context, runID string) bool {
	if e.members == nil {
		return false
	}
	ok, err := e.members.Leaser().Leased(ctx, runID)
	return err == nil && ok
}

// heldElsewhere reports whether another live engine holds runID's lease (its control requests
// go there).
func (e *Engine) heldElsewhere(ctx context.Context, runID string) bool {
	if e.members == nil {
		return false
	}
	holder, err := e.members.Leaser().Holder(ctx, runID)
	return err == nil && holder != ""
}

// markClosing, on a shared database, marks the engine closing as Close starts
// (cluster.Membership.MarkClosing).
func (e *Engine) markClosing(ctx context.Context) {
	if e.members != nil && !e.cfg.ReadOnly {
		e.members.MarkClosing(ctx)
	}
}

// handOver, on a shared database, gives the other engines the top-level runs of live that one
// of them can run, as the engine closes, and returns their ids (cluster.Membership.HandOver).
func (e *Engine) handOver(ctx context.Context, live []*exec.Run) map[string]bool {
	if e.members == nil || e.cfg.ReadOnly {
		return nil
	}
	runs := make([]cluster.Run, len(live))
	for i, h := range live {
		runs[i] = h
	}
	return e.members.HandOver(ctx, runs)
}

// closeGrace is Config.CloseGraceSecs as a duration.
func (e *Engine) closeGrace() time.Duration {
	return time.Duration(e.cfg.CloseGraceSecs * float64(time.Second))
}

// interruptGrace is the host's interrupt grace (Config.InterruptGraceSecs).
func (e *Engine) interruptGrace() time.Duration {
	if e.cfg.InterruptGraceSecs > 0 {
		return time.Duration(e.cfg.InterruptGraceSecs * float64(time.Second))
	}
	return tools.DefaultInterruptGrace
}

// CloseBudget is how long Close may wait, at most, for the host calls of the runs it hands
// over to another engine: the close grace, then the interrupt grace for the calls it cancels
// (docs/operations/cluster.md, "Closing an engine"); 0 when the database is not shared. Callers that
// bound Close (the C ABI's dccflow_engine_close) add it to their own bound.
func (e *Engine) CloseBudget() time.Duration {
	if e.members == nil || e.cfg.ReadOnly {
		return 0
	}
	return e.closeGrace() + e.interruptGrace()
}

// cancelOrphan cancels an unfinished run that no live engine holds (its engine died and no
// engine has taken it over yet): it claims the run (which interrupts it and its steps in
// flight), then records it cancelled, with its children. A run another engine took over
// meanwhile gets the cancel as a control request.
func (e *Engine) cancelOrphan(ctx context.Context, rec store.Run, reason string) error {
	ok, err := e.members.ClaimOrphan(ctx, rec.ID)
	if err != nil {
		return notFound(rec.ID, err)
	}
	if !ok {
		if e.heldElsewhere(ctx, rec.ID) {
			return e.requestControl(ctx, store.ControlRequest{RunID: rec.ID, Action: "cancel", Reason: reason})
		}
		return nil // finished meanwhile
	}
	if rec, err = e.store.GetRun(ctx, rec.ID); err != nil {
		return notFound(rec.ID, err)
	}
	now := e.clock.Now()
	rerr := exec.CancelledError(reason)
	d, _ := json.Marshal(map[string]any{"status": run.StatusCancelled, "error": rerr})
	b := &store.Batch{
		RunUpdates: []store.RunUpdate{{ID: rec.ID, Status: run.StatusCancelled, Error: rerr, Progress: rec.Progress, UpdatedAt: now, FinishedAt: now}},
		Events: []run.Event{{Time: now, RunID: rec.ID, Type: run.EventWorkflowTerminal, Status: string(run.StatusCancelled),
			Progress: rec.Progress, Detail: d}},
	}
	if err := e.store.Write(ctx, b); err != nil {
		return notFound(rec.ID, err)
	}
	e.hub.Notify()
	return e.cancelStoredChildren(ctx, rec.ID, reason, 0)
}

// requestControl files r with the owner of the database, or the engine that holds the run's
// lease, and waits for its answer (cluster.RequestControl).
func (e *Engine) requestControl(ctx context.Context, r store.ControlRequest) error {
	cs, ok := e.store.(store.Controller)
	if !ok {
		return run.Errorf(run.CodeInvalidState, "run %s is owned by another process and this store cannot reach it", r.RunID)
	}
	return cluster.RequestControl(ctx, cs, e.clock, storeopen.Redact(e.cfg.DB), r)
}

// errReadOnly is the error of the operations a read-only engine cannot do.
func (e *Engine) errReadOnly(what string) error {
	return run.Errorf(run.CodeReadOnly, "cannot %s: this engine opened %s read-only (another process owns it); "+
		"do it in the owning process, or stop that process and open the database normally", what, storeopen.Redact(e.cfg.DB))
}

// clusterLocal is the engine as engine/internal/cluster sees it (cluster.Local, cluster.Caller).
type clusterLocal struct{ e *Engine }

func (l clusterLocal) Executing() map[string]cluster.Run {
	live := l.e.executing()
	out := make(map[string]cluster.Run, len(live))
	for id, h := range live {
		out[id] = h
	}
	return out
}

var _ cluster.EnvCaller = clusterLocal{}

// Env is the engine's env setting: a queued call whose tool's side reported none carries it
// (cluster.EnvCaller), so the orchestrator records the environment of the engine that ran it.
func (l clusterLocal) Env() json.RawMessage { return l.e.cfg.Env }

func (l clusterLocal) Closed() bool { return l.e.isClosed() }
func (l clusterLocal) Notify()      { l.e.hub.Notify() }

func (l clusterLocal) CanTakeOver(r store.Run) bool {
	s, err := spec.Parse(r.SpecJSON, spec.Options{Format: spec.FormatJSON, Source: "run " + r.ID})
	return err == nil && l.e.checkTools(s) == nil
}

func (l clusterLocal) Resume(ctx context.Context, runID, by string) error {
	_, err := l.e.Resume(ctx, runID, ResumeOptions{By: by})
	return err
}

func (l clusterLocal) CanRunOn(ctx context.Context, runID string, tools, remotes map[string]bool) bool {
	rec, err := l.e.store.GetRun(ctx, runID)
	if err != nil {
		return false
	}
	s, err := spec.Parse(rec.SpecJSON, spec.Options{Format: spec.FormatJSON, Source: "run " + rec.ID})
	return err == nil && toolcheck.CanRun(s, toolcheck.Specs{Calls: l.e.exec.Tools, Workflow: l.e.Workflow, Builtin: func(tool string) bool {
		info, ok := l.e.router.Lookup(tool)
		return ok && info.Builtin
	}}, toolcheck.Capabilities{Tools: tools, Remotes: remotes})
}

// HostedTools returns the host tools registered and their lanes, sorted.
func (l clusterLocal) HostedTools() (tools, lanes []string) {
	seen := map[string]bool{}
	tools = []string{}
	lanes = []string{}
	for _, t := range l.e.router.Tools() {
		if t.Lane == "" {
			continue
		}
		tools = append(tools, t.Name)
		if !seen[t.Lane] {
			seen[t.Lane] = true
			lanes = append(lanes, t.Lane)
		}
	}
	sort.Strings(lanes)
	return tools, lanes
}

// RemoteNames returns the remotes of the engine's config (worker pools, MCP servers), sorted,
// when it can call them: those whose calls other engines may queue for it.
func (l clusterLocal) RemoteNames() []string {
	names := []string{}
	for name := range l.e.cfg.Remotes {
		if l.e.router.HasRemoteNamed(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func (l clusterLocal) HasTool(tool string) bool {
	_, ok := l.e.router.Lookup(tool)
	return ok
}

func (l clusterLocal) HasRemote(name string) bool { return l.e.router.HasRemoteNamed(name) }

func (l clusterLocal) PoolWorkers() map[string]int {
	capacity := map[string]int{}
	for _, p := range l.e.Pools() {
		capacity[p.Name] = p.Workers
	}
	return capacity
}

func (l clusterLocal) Call(ctx context.Context, call tools.Call) (tools.Result, error) {
	return l.e.router.Call(ctx, call)
}

func (l clusterLocal) CallRemote(ctx context.Context, call tools.Call) (tools.Result, error) {
	return l.e.router.CallRemote(ctx, call)
}
