package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/startstop"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/internal/tracing/tracectx"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The tool-call queue of a shared database (docs/operations/cluster.md, "The tool-call queue"). An engine
// that orchestrates a run and does not host a step's tool, while another engine attached to the
// database does (its engines row lists it), puts the call on the queue (store.CallQueue) and
// waits for its outcome; an engine that hosts the tool claims the call, runs it through its
// host-tool path and writes the outcome. Likewise the call of a remote (a worker pool, an MCP
// server: a pool step's or a tool_remote step's) that this engine does not have and another
// engine does ("Pools and remotes on other engines") is queued with that remote's name and
// claimed by an engine that has it, which runs it through its own remote pool. Wake-ups are LISTEN/NOTIFY, with a poll every
// QueuePoll as the fallback. A claim is under a lease the claiming engine renews with its
// heartbeat; a claim whose lease expired (its engine died) is failed worker_lost by whichever
// engine's heartbeat notices first, and the step is retried per its policy. What the call
// reports while it runs (progress, log lines) is relayed the same way (relay.go); the
// files it read and wrote and its env cross with its outcome (queue_files.go); the traceparent
// of its call span goes with the call, to the tool on the claiming engine (docs/guide/tracing.md).

const (
	// QueuePoll is the fallback poll of waiters and claimers when no notification comes.
	QueuePoll = time.Second
	// MaxClaims bounds the queued calls one engine runs at once.
	MaxClaims = 64
)

// Caller is what the call queue needs from its engine: what it hosts, and the paths that run
// the calls it claims.
type Caller interface {
	// HasTool reports whether tool is registered here (a host or built-in tool).
	HasTool(tool string) bool
	// HasRemote reports whether this engine can call the remote name (a worker pool, an MCP
	// server of its config).
	HasRemote(name string) bool
	// HostedTools returns the host tools registered here and their lanes, sorted.
	HostedTools() (tools, lanes []string)
	// RemoteNames returns the remotes this engine can call, sorted.
	RemoteNames() []string
	// PoolWorkers returns the most workers of each worker pool: the queue claims no more calls
	// of a pool than it can run at once.
	PoolWorkers() map[string]int
	// Call runs a claimed call of a host tool through the host-tool path.
	Call(ctx context.Context, call tools.Call) (tools.Result, error)
	// CallRemote runs a claimed call of a remote through this engine's remote pool.
	CallRemote(ctx context.Context, call tools.Call) (tools.Result, error)
}

// Queue is an engine's side of the tool-call queue: it queues the calls of tools and remotes
// that only other engines have and waits for their outcomes (Call, Adopt: the engine's router
// sends them here), and it claims and runs the queued calls of the tools and remotes this
// engine has. Start runs its listener and claimer; Stop cancels the calls it runs (their claims
// fail worker_lost at once, to be retried elsewhere).
type Queue struct {
	m      *Membership
	q      store.CallQueue
	caller Caller
	clock  clock.Clock

	svc  startstop.Base
	ctx  context.Context // the claimer's: cancelled by Stop
	wg   sync.WaitGroup
	kick chan struct{} // claim soon

	mu      sync.Mutex
	waiters map[int64]chan struct{}      // calls this engine queued, by id
	running map[int64]context.CancelFunc // calls this engine claimed and runs
	busy    map[string]int               // of those, the calls of each remote
	remote  map[string]bool              // tools other engines host (engines rows)
	remotes map[string]bool              // remotes other engines have (engines rows)
	fetched time.Time                    // when remote and remotes were read

	// maxFiles and maxFilePathBytes bound the files a claimed call's outcome carries
	// (MaxQueuedFiles, MaxQueuedFilePathBytes; lower in tests).
	maxFiles, maxFilePathBytes int
}

// NewQueue returns the call queue of the engine of m, on q, not started. Until Start, waiters
// poll and nothing is claimed.
func NewQueue(m *Membership, q store.CallQueue, caller Caller) *Queue {
	cq := &Queue{m: m, q: q, caller: caller, clock: m.cfg.Clock, kick: make(chan struct{}, 1), waiters: map[int64]chan struct{}{},
		running: map[int64]context.CancelFunc{}, busy: map[string]int{}, maxFiles: MaxQueuedFiles, maxFilePathBytes: MaxQueuedFilePathBytes}
	cq.ctx = context.Background()
	return cq
}

// Start starts the listener and the claimer.
func (cq *Queue) Start(ctx context.Context) error {
	cq.svc.Go(ctx, func(ctx context.Context) {
		cq.mu.Lock()
		cq.ctx = ctx
		cq.mu.Unlock()
		cq.wg.Add(2)
		go cq.listen(ctx)
		go cq.claimLoop(ctx)
		<-ctx.Done()
		cq.wg.Wait()
	})
	return nil
}

// Stop stops claiming; the calls this engine runs are cancelled (their claims fail worker_lost
// at once, to be retried elsewhere). It returns once they have written their outcomes.
func (cq *Queue) Stop() { cq.svc.Stop() }

// KickNow makes the claimer look for calls now (a tool was registered).
func (cq *Queue) KickNow() {
	select {
	case cq.kick <- struct{}{}:
	default:
	}
}

func (cq *Queue) listen(ctx context.Context) {
	defer cq.wg.Done()
	for ctx.Err() == nil {
		err := cq.q.ListenCalls(ctx, cq.listening, cq.notified)
		if ctx.Err() != nil {
			return
		}
		_ = err // the database is away: the polls carry on; listen again shortly
		_ = clock.Sleep(ctx, cq.clock, QueuePoll)
	}
}

// listening is called each time the listener listens (at Start, and again after a lost
// connection): the wake-ups sent before then are lost (an engine that closed as this one
// opened, a call queued meanwhile), so it does what they would have asked — a sweep (h:, the
// released runs are claimed now, not at the next beat), a look for calls to claim (q:, r:) and
// a read of each awaited call's status (d:, p:). A lost c: is the next beat's (the claim is not
// renewed).
func (cq *Queue) listening() {
	cq.m.Kick()
	cq.KickNow()
	cq.mu.Lock()
	for _, ch := range cq.waiters {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	cq.mu.Unlock()
}

func (cq *Queue) notified(p string) {
	kind, rest, _ := strings.Cut(p, ":")
	switch kind {
	case "q":
		if cq.caller.HasTool(rest) {
			cq.KickNow()
		}
	case "r":
		if cq.caller.HasRemote(rest) {
			cq.KickNow()
		}
	case "h": // an engine closed and released its runs' leases (Store.Detach): claim them now
		cq.m.Kick()
	case "d", "c", "p":
		id, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return
		}
		cq.mu.Lock()
		if ch, ok := cq.waiters[id]; ok {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		cancel := cq.running[id]
		cq.mu.Unlock()
		if kind == "c" && cancel != nil {
			cancel()
		}
	}
}

// HostedNow is Hosted, reading the engines table on a miss whenever it is asked (a submit).
func (cq *Queue) HostedNow(tool string) bool {
	return cq.lookup(func() map[string]bool { return cq.remote }, tool, true)
}

// Hosted reports whether another engine attached to the database hosts tool (read from the
// engines table, at most once a second on a miss).
func (cq *Queue) Hosted(tool string) bool {
	return cq.lookup(func() map[string]bool { return cq.remote }, tool, false)
}

// HasRemoteNow is HasRemote, reading the engines table on a miss whenever it is asked.
func (cq *Queue) HasRemoteNow(name string) bool {
	return cq.lookup(func() map[string]bool { return cq.remotes }, name, true)
}

// HasRemote reports whether another engine attached to the database has the remote name (a
// worker pool, an MCP server) in its config, as hosted does for tools.
func (cq *Queue) HasRemote(name string) bool {
	return cq.lookup(func() map[string]bool { return cq.remotes }, name, false)
}

// lookup reports whether set() (read under mu) has name, reading the engines table on a
// miss: always when now, else at most once a second.
func (cq *Queue) lookup(set func() map[string]bool, name string, now bool) bool {
	cq.mu.Lock()
	if set()[name] {
		cq.mu.Unlock()
		return true
	}
	fresh := !now && cq.clock.Now().Sub(cq.fetched) < time.Second
	ctx := cq.ctx
	cq.mu.Unlock()
	if fresh {
		return false
	}
	cq.refresh(ctx)
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return set()[name]
}

// refresh reads the tools the other engines host.
func (cq *Queue) refresh(ctx context.Context) {
	es, err := cq.m.cfg.Leaser.Engines(ctx)
	if err != nil {
		return
	}
	m, r := map[string]bool{}, map[string]bool{}
	for _, en := range es {
		if en.ID == cq.m.ID() {
			continue
		}
		for _, t := range en.Tools {
			m[t] = true
		}
		for _, name := range en.Remotes {
			r[name] = true
		}
	}
	cq.mu.Lock()
	cq.remote, cq.remotes, cq.fetched = m, r, cq.clock.Now()
	cq.mu.Unlock()
}

// Call queues a call — of a host tool, or of the remote call.DCC (a pool step's or a
// tool_remote step's) — and waits for its outcome (wait). The call carries a nonce, so the
// store can send it again after a lost connection without queueing it twice; when it still
// cannot tell whether the call was queued, the error wraps store.ErrConnectionLost and the run
// is given up to the takeover path, whose resume adopts the call if it was (Adopt).
func (cq *Queue) Call(ctx context.Context, call tools.Call) (tools.Result, error) {
	args, err := json.Marshal(call.Args)
	if err != nil {
		return tools.Failure(run.KindInvalidInput, "the args cannot be queued as JSON: "+err.Error()), nil
	}
	id, err := cq.q.EnqueueCall(ctx, store.QueuedCall{RunID: call.RunID, StepKey: call.StepKey, Attempt: call.Attempt, Tool: call.Tool,
		Remote: call.DCC, Args: args, Nonce: newNonce(), Traceparent: call.Traceparent})
	if err != nil {
		if ctx.Err() != nil {
			return tools.Result{}, ctx.Err()
		}
		if errors.Is(err, store.ErrConnectionLost) {
			return tools.Result{}, err
		}
		return tools.Failure(run.KindTransient, fmt.Sprintf("queueing the call of %s for another engine: %v", callName(call), err)), nil
	}
	return cq.wait(ctx, id, call, false)
}

// Adopt takes over the call of a resumed step (tools.Call.Adopt) that the run's former
// orchestrator left queued or claimed, or that ended after it stopped (tools.Call.AdoptAttempt),
// with the same tool, remote and args: it waits for that call's outcome (wait; at once for one
// that ended) and reports true; false when there is none. A failed lookup fails the
// attempt (kind transient), as a failed queueing does.
func (cq *Queue) Adopt(ctx context.Context, call tools.Call) (tools.Result, bool, error) {
	args, err := json.Marshal(call.Args)
	if err != nil {
		return tools.Result{}, false, nil // Call reports it
	}
	id, ok, err := cq.q.AdoptCall(ctx, store.QueuedCall{RunID: call.RunID, StepKey: call.StepKey, Attempt: call.Attempt,
		Interrupted: call.AdoptAttempt, Tool: call.Tool, Remote: call.DCC, Args: args, Traceparent: call.Traceparent})
	switch {
	case err != nil && ctx.Err() != nil:
		return tools.Result{}, true, ctx.Err()
	case err != nil:
		return tools.Failure(run.KindTransient, fmt.Sprintf("looking for a call of %s in flight on the queue: %v", callName(call), err)), true, nil
	case !ok:
		return tools.Result{}, false, nil
	}
	res, err := cq.wait(ctx, id, call, true)
	return res, true, err
}

// callName names a call's tool in messages: TOOL, or REMOTE/TOOL.
func callName(call tools.Call) string {
	if call.DCC != "" {
		return call.DCC + "/" + call.Tool
	}
	return call.Tool
}

// newNonce returns a random nonce for a queued call (store.QueuedCall.Nonce).
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// wait waits for the outcome of queued call id, feeding its reports to call.Reporter (readNow:
// reading its status at once, not at the first wake-up or poll); when ctx ends first (a cancel, the step's timeout, the run abandoned) the call is cancelled.
func (cq *Queue) wait(ctx context.Context, id int64, call tools.Call, readNow bool) (tools.Result, error) {
	ch := make(chan struct{}, 1)
	if readNow {
		ch <- struct{}{} // an adopted call may have ended before this waiter was registered
	}
	cq.mu.Lock()
	cq.waiters[id] = ch
	cq.mu.Unlock()
	defer func() {
		cq.mu.Lock()
		delete(cq.waiters, id)
		cq.mu.Unlock()
	}()
	after := 0 // the last report fed to the step
	for {
		poll := cq.clock.NewTimer(QueuePoll)
		select {
		case <-ctx.Done():
			if exec.Abandoned(context.Cause(ctx)) {
				poll.Stop()
				// The run is given up to the takeover path: its resume adopts the call
				// (cancelling it would fail the step of the engine that took the run over
				// and adopted it already).
				return tools.Result{}, ctx.Err()
			}
			// The store retries the cancel across a lost connection (a restart) for up to
			// the lease; a cancel that never lands leaves the call to the run's end, which
			// cancels the calls its run left.
			poll.Stop()
			cctx, cancel := context.WithTimeout(context.Background(), 3*cq.m.Every()+5*time.Second)
			_ = cq.q.CancelCall(cctx, id)
			cancel()
			return tools.Result{}, ctx.Err()
		case <-ch:
			poll.Stop()
		case <-poll.C():
		}
		status, out, err := cq.q.CallStatus(ctx, id)
		if err != nil {
			continue // the database is away: the next poll tries again
		}
		// The reports are read after the status: once it is done, every report is in (the
		// worker writes its last one before the outcome), so the step gets all the lines
		// before the outcome, as from a local call.
		if out.LastReport > after {
			if err := cq.feedReports(ctx, id, call.Reporter, &after); err != nil && status == "done" {
				continue // the next poll reads them, then returns the outcome
			}
		}
		switch status {
		case "done":
			res := tools.Result{Worker: out.Worker, LogsDropped: out.LogsDropped}
			if len(out.Logs) > 0 && json.Unmarshal(out.Logs, &res.Logs) != nil {
				res.Logs = nil // not ours to fail the call over
			}
			if out.ErrorKind != "" {
				res.Error = &tools.ToolError{Kind: out.ErrorKind, Message: out.ErrorMessage, Trace: out.ErrorTrace}
			} else {
				res.OutputJSON = out.Output
			}
			resultFiles(&res, out, id) // queue_files.go: the files and env, a failure's too
			return res, nil
		case "cancelled":
			return tools.Failure(run.KindCancelled, "the queued call was cancelled"), nil
		}
	}
}

// claimLoop claims the queued calls of the tools this engine hosts and of the remotes it has
// while it has room: at most maxClaims in all, and no more calls of a worker pool than its
// workers (the others stay queued for another engine with the pool, or for a free worker).
func (cq *Queue) claimLoop(ctx context.Context) {
	defer cq.wg.Done()
	for {
		cq.claimAll(ctx)
		poll := cq.clock.NewTimer(QueuePoll)
		select {
		case <-ctx.Done():
			poll.Stop()
			cq.mu.Lock()
			for _, cancel := range cq.running {
				cancel()
			}
			cq.mu.Unlock()
			return
		case <-cq.kick:
			poll.Stop()
		case <-poll.C():
		}
	}
}

func (cq *Queue) claimAll(qctx context.Context) {
	hosted, _ := cq.caller.HostedTools()
	names := cq.caller.RemoteNames()
	capacity := cq.caller.PoolWorkers() // a pool's workers: it claims no more calls than it can run
	for qctx.Err() == nil {
		cq.mu.Lock()
		full := len(cq.running) >= MaxClaims
		remotes := make([]string, 0, len(names))
		for _, name := range names {
			if n, ok := capacity[name]; !ok || cq.busy[name] < n {
				remotes = append(remotes, name)
			}
		}
		cq.mu.Unlock()
		if full || len(hosted) == 0 && len(remotes) == 0 {
			return
		}
		c, err := cq.q.ClaimCall(qctx, hosted, remotes)
		if err != nil || c == nil {
			return
		}
		ctx, cancel := context.WithCancel(qctx)
		cq.mu.Lock()
		cq.running[c.ID] = cancel
		if c.Remote != "" {
			cq.busy[c.Remote]++
		}
		cq.mu.Unlock()
		cq.wg.Add(1)
		go cq.run(qctx, ctx, cancel, c)
	}
}

// run runs a claimed call through the host-tool path (a call of a remote: through this
// engine's remote pool, as a local tool_remote or pooled call) and writes its outcome, with
// the worker that ran it (this engine, and the pool worker when there is one), its log lines,
// and the files it read and wrote and its env (carryFiles). The tool gets the call's
// traceparent (store.QueuedCall.Traceparent).
func (cq *Queue) run(qctx, ctx context.Context, cancel context.CancelFunc, c *store.QueuedCall) {
	defer cq.wg.Done()
	defer func() {
		cancel()
		cq.mu.Lock()
		delete(cq.running, c.ID)
		if c.Remote != "" {
			if cq.busy[c.Remote]--; cq.busy[c.Remote] <= 0 {
				delete(cq.busy, c.Remote)
			}
		}
		cq.mu.Unlock()
		cq.KickNow() // room for another
	}()
	var out store.CallOutcome
	var args map[string]any
	if err := json.Unmarshal(c.Args, &args); err != nil {
		out = store.CallOutcome{ErrorKind: run.KindInvalidInput, ErrorMessage: "the queued args are not a JSON object: " + err.Error()}
	} else {
		rl := newRelay(cq.q, c.ID, cq.clock)
		call := tools.Call{RunID: c.RunID, StepKey: c.StepKey, Tool: c.Tool, DCC: c.Remote, Args: args, Attempt: c.Attempt,
			Queued: true, Reporter: rl}
		// The traceparent of the call's span in the orchestrating engine's trace goes to the tool
		// (a host tool's PendingCall, a pool worker's tools/call _meta), so that its spans join
		// the run's trace; one not of the W3C form is dropped.
		if tracectx.Valid(c.Traceparent) {
			call.Traceparent = c.Traceparent
			ctx = tracectx.With(ctx, c.Traceparent)
		}
		var res tools.Result
		if c.Remote != "" {
			res, err = cq.caller.CallRemote(ctx, call)
		} else {
			res, err = cq.caller.Call(ctx, call)
		}
		rl.finish() // every report is written before the outcome
		out = outcome(res, err, qctx.Err() != nil, cq.m.ID())
		out.Worker = cq.m.ID()
		if res.Worker != "" {
			out.Worker += "/" + res.Worker
		}
		if len(res.Logs) > 0 {
			out.Logs, _ = json.Marshal(res.Logs) // strings and JSON the worker sent: cannot fail
		}
		out.LogsDropped = res.LogsDropped
		cq.carryFiles(&out, res, c) // queue_files.go
	}
	// The store retries the write across a lost connection for up to the lease (a failover):
	// past it the claim has expired and the call is failed worker_lost anyway.
	wctx, wcancel := context.WithTimeout(context.Background(), 3*cq.m.Every()+10*time.Second)
	defer wcancel()
	_, _ = cq.q.CompleteCall(wctx, c.ID, out) // false: cancelled or lost meanwhile; the outcome is dropped
}

// outcome turns a call's result into what is written on the queue. A call stopped because the
// engine closes is worker_lost (retried elsewhere per the step's policy).
func outcome(res tools.Result, err error, closing bool, engineID string) store.CallOutcome {
	switch {
	case closing:
		return store.CallOutcome{ErrorKind: run.KindWorkerLost, ErrorMessage: fmt.Sprintf("engine %s closed while it ran the call", engineID)}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return store.CallOutcome{ErrorKind: run.KindCancelled, ErrorMessage: "the call was cancelled"}
	case err != nil:
		return store.CallOutcome{ErrorKind: run.KindError, ErrorMessage: fmt.Sprintf("engine %s could not make the call: %v", engineID, err)}
	case res.Error != nil:
		kind := res.Error.Kind
		if kind == "" {
			kind = run.KindError
		}
		return store.CallOutcome{ErrorKind: kind, ErrorMessage: res.Error.Message, ErrorTrace: res.Error.Trace}
	case res.OutputJSON != nil:
		return store.CallOutcome{Output: res.OutputJSON}
	default:
		b, err := json.Marshal(res.Output)
		if err != nil {
			return store.CallOutcome{ErrorKind: run.KindError, ErrorMessage: "the tool's output is not JSON-encodable: " + err.Error()}
		}
		return store.CallOutcome{Output: b}
	}
}

// Beat renews the claims of the calls this engine runs (those cancelled or lost meanwhile are
// stopped), fails the expired claims of dead engines worker_lost, and reads the tools the other
// engines host. Called with every heartbeat.
func (cq *Queue) Beat(ctx context.Context) {
	cq.mu.Lock()
	ids := make([]int64, 0, len(cq.running))
	for id := range cq.running {
		ids = append(ids, id)
	}
	cq.mu.Unlock()
	if len(ids) > 0 {
		if held, err := cq.q.RenewCalls(ctx, ids); err == nil {
			keep := make(map[int64]bool, len(held))
			for _, id := range held {
				keep[id] = true
			}
			cq.mu.Lock()
			for _, id := range ids {
				if cancel, ok := cq.running[id]; ok && !keep[id] {
					cancel()
				}
			}
			cq.mu.Unlock()
		}
	}
	_, _ = cq.q.ExpireCalls(ctx)
	cq.refresh(ctx)
}
