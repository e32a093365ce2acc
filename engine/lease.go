package engine

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Many engines on one database (docs/cluster.md, "Leases"). On a store that several read-write
// engines share (store.Leaser: PostgreSQL) an engine registers itself and orchestrates each run
// under a lease it renews with its heartbeat, every LeaseSecs/3. When a run's lease expires
// (its engine died, hung, or lost the database for longer than the lease), another engine
// claims it and continues it through the resume path; an engine that finds a run of its own
// taken over, or that could not renew its leases for a whole lease, abandons the run locally:
// it stops orchestrating it and writes nothing more of it.

// DefaultLeaseSecs is Config.LeaseSecs when the config says 0.
const DefaultLeaseSecs = 15

// DefaultCloseGraceSecs is Config.CloseGraceSecs when the config says 0.
const DefaultCloseGraceSecs = 10

// sweepBatch bounds how many expired runs one sweep looks at.
const sweepBatch = 100

// leaseState is the engine's side of the leases; l is nil when the store has none.
type leaseState struct {
	l     store.Leaser
	info  store.EngineInfo
	every time.Duration // the heartbeat period: the lease / 3

	kick       chan struct{} // a sweep soon (RegisterTool)
	stop, done chan struct{}

	mu        sync.Mutex
	lastRenew time.Time // when the last heartbeat that succeeded was sent (monotonic)
	// renewed is lastRenew as nanoseconds since leaseEpoch, for the host's stale check (read
	// on every Pull, without mu).
	renewed  atomic.Int64
	taken    int   // runs this engine took over (LeaseStats)
	lost     int   // runs it abandoned
	handed   int   // runs it handed over as it closed
	cut      int   // of those, runs whose host call it cancelled past the close grace
	sweepErr error // the last sweep's error, or nil
}

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
	ls := &e.lease
	if ls.l == nil {
		return LeaseStats{}
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	st := LeaseStats{EngineID: ls.info.ID, TakenOver: ls.taken, Abandoned: ls.lost, HandedOver: ls.handed, HandedOverCancelled: ls.cut}
	if ls.sweepErr != nil {
		st.LastSweepError = ls.sweepErr.Error()
	}
	return st
}

// EngineID returns the id this engine registered with a shared database (the owner written on
// the runs it orchestrates), "" when its database is not shared.
func (e *Engine) EngineID() string { return e.lease.info.ID }

// leaseEpoch is the origin of leaseState.renewed (a monotonic reading).
var leaseEpoch = time.Now()

// newEngineID returns "HOST-PID-" + 8 random hex digits.
func newEngineID(host string, pid int) string {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, pid, hex.EncodeToString(b[:]))
}

// attach registers the engine with a shared store and starts its heartbeat. It reports whether
// the store is one (then recovery is the sweep of expired leases, not MarkInterrupted).
func (e *Engine) attach(ctx context.Context) (bool, error) {
	l, ok := e.store.(store.Leaser)
	if !ok {
		return false, nil
	}
	host, _ := os.Hostname()
	lease := time.Duration(e.cfg.LeaseSecs * float64(time.Second))
	ls := &e.lease
	ls.info = store.EngineInfo{ID: newEngineID(host, os.Getpid()), Host: host, PID: os.Getpid(), Lease: lease}
	ls.info.Tools, ls.info.Lanes = e.hostedTools()
	ls.info.Remotes = e.remoteNames()
	if err := l.Attach(ctx, ls.info); err != nil {
		return true, notFound("", err)
	}
	ls.l, ls.every = l, lease/3
	ls.lastRenew = time.Now()
	ls.renewed.Store(int64(ls.lastRenew.Sub(leaseEpoch)))
	// No call starts on this engine's host once a whole lease has passed without a renewal (it
	// was suspended): its runs may be another engine's now. The heartbeat abandons them first.
	e.router.Host().SetStale(func() bool { return time.Since(leaseEpoch)-time.Duration(ls.renewed.Load()) > lease })
	ls.kick = make(chan struct{}, 1)
	ls.stop, ls.done = make(chan struct{}), make(chan struct{})
	return true, nil
}

// startLeases sweeps once (runs left by dead engines that this one can resume with its
// built-in tools) and starts the heartbeat loop.
func (e *Engine) startLeases(ctx context.Context) {
	ls := &e.lease
	if ls.l == nil {
		return
	}
	e.sweep(ctx)
	go e.leaseLoop()
}

// kickSweep asks for a sweep soon (a tool was registered: runs that need it may be taken over).
func (e *Engine) kickSweep() {
	if e.lease.l == nil {
		return
	}
	select {
	case e.lease.kick <- struct{}{}:
	default:
	}
}

// publishTools writes the host tools this engine hosts in its engines row now (not at the next
// heartbeat), so that other engines queue their calls at once, and claims the queued ones.
func (e *Engine) publishTools() {
	ls := &e.lease
	if ls.l == nil {
		return
	}
	info := ls.info
	info.Tools, info.Lanes = e.hostedTools()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = ls.l.Heartbeat(ctx, info, nil) // a failure: the next beat writes them
	if e.queue != nil {
		e.queue.kickNow()
	}
}

// remoteNames returns the remotes of the engine's config (worker pools, MCP servers), sorted,
// when it can call them: those whose calls other engines may queue for it.
func (e *Engine) remoteNames() []string {
	names := []string{}
	for name := range e.cfg.Remotes {
		if e.router.HasRemoteNamed(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// hostedTools returns the host tools registered and their lanes, sorted.
func (e *Engine) hostedTools() (tools, lanes []string) {
	seen := map[string]bool{}
	tools = []string{}
	lanes = []string{}
	for _, t := range e.router.Tools() {
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

func (e *Engine) leaseLoop() {
	ls := &e.lease
	defer close(ls.done)
	beat := time.NewTicker(ls.every)
	defer beat.Stop()
	for {
		select {
		case <-ls.stop:
			return
		case <-ls.kick:
			e.sweep(context.Background())
		case <-beat.C:
			e.heartbeat()
			if e.queue != nil {
				ctx, cancel := context.WithTimeout(context.Background(), ls.every*2)
				e.queue.beat(ctx)
				cancel()
			}
			// One indexed read per beat: a dead engine's runs are taken over within a third of
			// a lease of their lease expiring.
			e.sweep(context.Background())
		}
	}
}

// liveRuns returns the runs this engine is executing.
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

// heartbeat renews the engine's leases in one round trip and abandons the runs it lost: those
// another engine now holds, or all of them when no renewal went through for a whole lease.
func (e *Engine) heartbeat() {
	ls := &e.lease
	live := e.executing()
	ls.mu.Lock()
	stale := time.Since(ls.lastRenew) > ls.info.Lease
	ls.mu.Unlock()
	if stale {
		// No renewal went through for a whole lease (the process was suspended, the database
		// away): the leases may have expired and other engines may have taken these runs. Stop
		// them before anything else; the sweep takes back those nobody took.
		for _, h := range live {
			e.abandon(h)
		}
		live = nil
	}
	ids := make([]string, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
	info := ls.info
	info.Tools, info.Lanes = e.hostedTools()
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), ls.every*2)
	defer cancel()
	owned, err := ls.l.Heartbeat(ctx, info, ids)
	if err != nil {
		return // the next beat tries again; past a whole lease, it abandons the runs (above)
	}
	ls.mu.Lock()
	ls.lastRenew = sent
	ls.mu.Unlock()
	ls.renewed.Store(int64(sent.Sub(leaseEpoch)))
	if stale {
		e.router.Host().WakePullers() // the host handed out nothing meanwhile (SetStale)
	}
	mine := make(map[string]bool, len(owned))
	for _, id := range owned {
		mine[id] = true
	}
	for id, h := range live {
		if mine[id] {
			continue
		}
		// Not renewed: ended meanwhile, or another engine holds it now.
		if holder, err := ls.l.Holder(ctx, id); err == nil && holder != "" {
			e.abandon(h)
		}
	}
}

// abandon stops orchestrating a run whose lease this engine lost, writing nothing more of it.
func (e *Engine) abandon(h *exec.Run) {
	if isDone(h.Done()) {
		return
	}
	h.Abandon()
	e.lease.mu.Lock()
	e.lease.lost++
	e.lease.mu.Unlock()
	e.hub.notify()
}

// sweep claims the runs whose lease expired and that this engine can run (it hosts their
// tools), and resumes each: no completed step instance runs again. A paused run is claimed
// only to interrupt its steps in flight; it stays paused until someone unpauses it.
func (e *Engine) sweep(ctx context.Context) {
	ls := &e.lease
	if e.isClosed() {
		return
	}
	runs, err := ls.l.Expired(ctx, sweepBatch)
	ls.mu.Lock()
	ls.sweepErr = err
	ls.mu.Unlock()
	if err != nil {
		return
	}
	for _, r := range runs {
		if e.isClosed() {
			return
		}
		if r.Status != run.StatusPaused {
			s, err := spec.Parse(r.SpecJSON, spec.Options{Format: spec.FormatJSON, Source: "run " + r.ID})
			if err != nil || e.checkTools(s) != nil {
				continue // an engine that hosts its tools takes it
			}
		}
		detail, _ := json.Marshal(map[string]string{"reason": "its engine closed and handed it over, or stopped renewing its lease", "taken_over_by": ls.info.ID})
		ok, err := ls.l.ClaimRun(ctx, r.ID, e.clock.Now(), store.Interruption{Detail: detail, Error: &store.RunError{Kind: "interrupted",
			Message: fmt.Sprintf("the engine running this run closed and handed it over, or stopped renewing its lease; engine %s took it over", ls.info.ID)}})
		if err != nil {
			ls.mu.Lock()
			ls.sweepErr = err
			ls.mu.Unlock()
			return
		}
		if !ok {
			continue // another engine was quicker
		}
		ls.mu.Lock()
		ls.taken++
		ls.mu.Unlock()
		e.hub.notify()
		if r.Status == run.StatusPaused {
			continue
		}
		if _, err := e.Resume(ctx, r.ID, ResumeOptions{By: "engine " + e.EngineID() + " (takeover)"}); err != nil {
			ls.mu.Lock()
			ls.sweepErr = fmt.Errorf("resuming run %s, taken over: %w", r.ID, err)
			ls.mu.Unlock()
		}
	}
}

// acquire makes this engine the owner of runID before it resumes or unpauses it, on a shared
// database; another engine's live lease is code invalid_state naming it.
func (e *Engine) acquire(ctx context.Context, runID string) error {
	ls := &e.lease
	if ls.l == nil {
		return nil
	}
	ok, holder, err := ls.l.Acquire(ctx, runID)
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
	if e.lease.l == nil {
		return false
	}
	ok, err := e.lease.l.Leased(ctx, runID)
	return err == nil && ok
}

// heldElsewhere reports whether another live engine holds runID's lease (its control requests
// go there).
func (e *Engine) heldElsewhere(ctx context.Context, runID string) bool {
	if e.lease.l == nil {
		return false
	}
	holder, err := e.lease.l.Holder(ctx, runID)
	return err == nil && holder != ""
}

// markClosing, on a shared database, marks the engine closing (store.Leaser.Closing) as Close
// starts, whether or not it runs anything: from then on the other engines do not hand it
// their runs (its own sweep is off). A failure is ignored: the mark only narrows a race.
func (e *Engine) markClosing(ctx context.Context) {
	if e.lease.l == nil || e.cfg.ReadOnly {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.lease.every)
	defer cancel()
	_ = e.lease.l.Closing(ctx)
}

// handOver, on a shared database, gives the other engines the top-level runs of live that
// one of them can run, as the engine closes (markClosing came first), and returns their ids.
// Not handed over, so stopped (interrupted) as on a database of one's own: a paused run or one
// with a paused child run (it stays paused). Returns nil when no engine can take any.
//
// A run to hand over may have host calls that this engine's host is running. handOver holds
// the host (no call is handed out any more) and those runs (no step instance starts), then
// waits up to the close grace (Config.CloseGraceSecs) until every such call is answered and
// its answer written: those steps do not run again. It then abandons each run (nothing more of
// it is written; its child runs go with it, a call it queued stays queued for the next
// orchestrator to adopt, and a host call still running is cancelled: the host is told, and
// the next engine calls that step again, as after a kill), and waits up to the interrupt grace
// for the host to let go of the calls it cancelled. stopLeases then releases the leases and
// wakes the other engines, whose sweep claims and resumes the runs at once, through the
// takeover path: no completed step runs again.
func (e *Engine) handOver(ctx context.Context, live []*exec.Run) map[string]bool {
	ls := &e.lease
	if ls.l == nil || e.cfg.ReadOnly || len(live) == 0 {
		return nil
	}
	engines, err := ls.l.Engines(ctx)
	if err != nil {
		return nil
	}
	others := &capabilities{tools: map[string]bool{}, remotes: map[string]bool{}}
	for _, en := range engines {
		if en.ID == ls.info.ID || !en.Live || en.Closing {
			continue
		}
		others.engines++
		for _, t := range en.Tools {
			others.tools[t] = true
		}
		for _, r := range en.Remotes {
			others.remotes[r] = true
		}
	}
	if others.engines == 0 {
		return nil
	}
	keep := map[string]bool{} // runs with a paused child run
	for _, h := range live {
		if a := h.Ancestors(); len(a) > 0 && h.Paused() {
			keep[a[0]] = true
		}
	}
	cands := map[string]*exec.Run{}
	for _, h := range live {
		if len(h.Ancestors()) > 0 || keep[h.ID()] || isDone(h.Done()) || h.Paused() {
			continue
		}
		rec, err := e.store.GetRun(ctx, h.ID())
		if err != nil {
			continue
		}
		s, err := spec.Parse(rec.SpecJSON, spec.Options{Format: spec.FormatJSON, Source: "run " + rec.ID})
		if err != nil || !e.canRun(s, others) {
			continue
		}
		cands[h.ID()] = h
	}
	if len(cands) == 0 {
		return nil
	}
	// Each candidate with its child runs: their host calls count as the candidate's.
	group := map[string][]*exec.Run{}
	for _, h := range live {
		top := h.ID()
		if a := h.Ancestors(); len(a) > 0 {
			top = a[0]
		}
		if cands[top] != nil {
			group[top] = append(group[top], h)
		}
	}
	// Nothing new starts here any more: no host call is handed out, and no step instance of
	// any run starts (those not handed over are stopped right after).
	host := e.router.Host()
	host.Hold()
	for _, h := range live {
		h.Hold()
	}
	busy := func(top string) bool {
		for _, h := range group[top] {
			if h.HostBusy() {
				return true
			}
		}
		return false
	}
	e.settleHostCalls(ctx, cands, busy)
	handed := map[string]bool{}
	cut := map[string]bool{} // handed over with a host call still running: cancelled
	for id, h := range cands {
		if isDone(h.Done()) || h.Paused() { // ended, or paused, within the grace
			continue
		}
		if busy(id) {
			cut[id] = true
		}
		h.Abandon()
		handed[id] = true
	}
	if len(cut) > 0 {
		e.awaitLetGo(ctx, host.LetGoOf(cut))
	}
	if len(handed) > 0 {
		ls.mu.Lock()
		ls.handed += len(handed)
		ls.cut += len(cut)
		ls.mu.Unlock()
		e.hub.notify()
	}
	return handed
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
// (docs/cluster.md, "Closing an engine"); 0 when the database is not shared. Callers that
// bound Close (the C ABI's dccflow_engine_close) add it to their own bound.
func (e *Engine) CloseBudget() time.Duration {
	if e.lease.l == nil || e.cfg.ReadOnly {
		return 0
	}
	return e.closeGrace() + e.interruptGrace()
}

// settleHostCalls waits, up to the close grace or the end of ctx, until no run of cands that is
// still going has a host call in flight whose outcome is not written (busy).
func (e *Engine) settleHostCalls(ctx context.Context, cands map[string]*exec.Run, busy func(string) bool) {
	deadline := time.Now().Add(e.closeGrace())
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		waiting := false
		for id, h := range cands {
			if !isDone(h.Done()) && busy(id) {
				waiting = true
				break
			}
		}
		if !waiting || !time.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// awaitLetGo waits, up to the interrupt grace or the end of ctx, until every channel of
// letGo is closed: the host let go of the calls a hand-over cancelled (a host that honours
// the cancel stops them before the next engine calls the step again).
func (e *Engine) awaitLetGo(ctx context.Context, letGo []<-chan struct{}) {
	t := time.NewTimer(e.interruptGrace())
	defer t.Stop()
	for _, ch := range letGo {
		select {
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// capabilities are what the other live engines on a shared database host, together.
type capabilities struct {
	engines        int
	tools, remotes map[string]bool
}

// canRun reports whether an engine with c's tools and remotes (and the built-in tools every
// engine has) can run every tool step and remote call of s, and of the catalog workflows its
// workflow steps run, all the way down (one not in this engine's catalog: false).
func (e *Engine) canRun(s *spec.Spec, c *capabilities) bool {
	return e.canRunWithin(s, c, map[string]bool{})
}

func (e *Engine) canRunWithin(s *spec.Spec, c *capabilities, seen map[string]bool) bool {
	ok := true
	s.Walk(func(st *spec.Step, _ []*spec.Step) bool {
		if st.Kind != spec.KindWorkflow || seen[st.Workflow] {
			return ok
		}
		seen[st.Workflow] = true
		child, found := e.Workflow(st.Workflow)
		ok = found && e.canRunWithin(child, c, seen)
		return ok
	})
	if !ok {
		return false
	}
	toolNames, remotes, err := e.exec.Tools(s)
	if err != nil {
		return false
	}
	has := func(tool string) bool {
		info, ok := e.router.Lookup(tool)
		return ok && info.Builtin || c.tools[tool]
	}
	for _, t := range toolNames {
		if !has(t) {
			return false
		}
	}
	for _, rt := range remotes {
		if !c.remotes[rt.DCC] && !(rt.Optional && has(rt.Tool)) {
			return false
		}
	}
	return true
}

// stopLeases stops the heartbeat and releases the leases of the runs still held (paused
// ones): other engines may claim them at once. Called after the runs stopped.
func (e *Engine) stopLeases(ctx context.Context) {
	ls := &e.lease
	if ls.l == nil {
		return
	}
	close(ls.stop)
	<-ls.done
	if ctx.Err() != nil { // Close's context ran out waiting for the runs: release them all the same
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), ls.every)
		defer cancel()
	}
	_ = ls.l.Detach(ctx)
}

// cancelOrphan cancels an unfinished run that no live engine holds (its engine died and no
// engine has taken it over yet): it claims the run (which interrupts it and its steps in
// flight), then records it cancelled, with its children. A run another engine took over
// meanwhile gets the cancel as a control request.
func (e *Engine) cancelOrphan(ctx context.Context, rec store.Run, reason string) error {
	ls := &e.lease
	detail, _ := json.Marshal(map[string]string{"reason": "cancelled while no engine held its lease", "taken_over_by": ls.info.ID})
	ok, err := ls.l.ClaimRun(ctx, rec.ID, e.clock.Now(), store.Interruption{Detail: detail,
		Error: &store.RunError{Kind: "interrupted", Message: "the engine running this run stopped renewing its lease"}})
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
	e.hub.notify()
	return e.cancelStoredChildren(ctx, rec.ID, reason, 0)
}
