package store

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Features a store may have beyond Store. The engine finds them by asserting these interfaces
// on its store, never by naming a concrete store, so that another store (PostgreSQL) gets them
// by implementing the interface and passing its storetest sub-suite (ExercisePruner,
// ExerciseController, ExerciseFireLog; ExerciseLeaser and ExerciseCallQueue for the features of
// a database that engines share, which memcluster implements in memory for unit tests). An implementation states each one it has with a
// compile-time check: var _ store.Pruner = (*Store)(nil).

// Pruner deletes finished runs (Engine.Prune). Without it, Prune is code invalid_state.
type Pruner interface {
	// Prune deletes the terminal runs whose status is one of statuses (every terminal status
	// when empty; a status that is not terminal selects nothing) and whose FinishedAt is set
	// and before olderThan, with their steps, their events and their workflow-scoped
	// idempotency entries, and returns how many runs it deleted. Global idempotency entries and
	// artefacts stay. It never deletes a run that is not terminal, and the Seq of a deleted
	// event is never assigned again, also across a reopen.
	Prune(ctx context.Context, olderThan time.Time, statuses []run.Status) (int, error)

	// PruneCandidates returns the runs Prune(ctx, olderThan, statuses) would delete now, the
	// earliest FinishedAt first (ties: smaller id first), at most limit of them (≤ 0 = all).
	// Only ID, Name, Status, Origin, CreatedAt and FinishedAt are set: it is a dry run, and what
	// the engine deletes in steps.
	PruneCandidates(ctx context.Context, olderThan time.Time, statuses []run.Status, limit int) ([]Run, error)

	// PruneRuns deletes, as Prune does, those of ids that Prune(ctx, olderThan, statuses) would
	// delete now, and returns how many. An id that no longer qualifies (resumed since it was
	// listed, already deleted, unknown) is skipped. A store may split the work into several
	// atomic transactions so that writers are not held up for the whole prune (the SQLite store
	// deletes PruneChunk runs per transaction); after each it calls progress, when not nil, with
	// the number deleted so far. When ctx ends between two transactions it returns what it
	// deleted and context.Cause(ctx).
	PruneRuns(ctx context.Context, ids []string, olderThan time.Time, statuses []run.Status, progress func(deleted int)) (int, error)
}

// Controller carries control requests between processes sharing a database: a process that
// opened it read-only files a request (approve, cancel, pause or unpause a run); the owner takes the pending
// ones, applies them and answers each (docs/reference/state-machine.md, "Crashes and the one owner").
// Without it, an engine can act only on the runs it owns.
type Controller interface {
	// RequestControl files r (its ID is ignored) and returns the request's id, > 0. An Action
	// that is not one of ValidControlAction's is an error and files nothing. It works on a store
	// opened read-only too: it is how such a store acts on a run.
	RequestControl(ctx context.Context, r ControlRequest) (int64, error)
	// ControlAnswer returns the answer to request id; Handled is false while it is pending.
	ControlAnswer(ctx context.Context, id int64) (ControlAnswer, error)
	// PendingControl returns the requests not answered yet, oldest first.
	PendingControl(ctx context.Context) ([]ControlRequest, error)
	// AnswerControl records the outcome of request id: code and message "" for success, else
	// an error code (run.Code…) and its message. An answered request is no longer pending.
	AnswerControl(ctx context.Context, id int64, now time.Time, code, message string) error
}

// ControlRequest asks the process that owns the database to act on one of its runs: approve
// (or deny) an open approval, cancel, pause or unpause the run.
type ControlRequest struct {
	ID        int64
	RunID     string
	Action    string // "approve", "cancel", "pause" or "unpause"
	StepKey   string // the approve step's instance key; "" for the others
	Approved  bool
	Reason    string
	By        string
	CreatedAt time.Time
}

// ValidControlAction reports whether action is one a ControlRequest may carry: "approve",
// "cancel", "pause" or "unpause".
func ValidControlAction(action string) bool {
	switch action {
	case "approve", "cancel", "pause", "unpause":
		return true
	}
	return false
}

// ControlAnswer is the owner's answer to a request: Handled is false while it is pending;
// ErrorCode and Error are "" when the action succeeded.
type ControlAnswer struct {
	Handled   bool
	ErrorCode string
	Error     string
}

// FireBatcher is a FireLog whose Write takes Batch.Fires: its fire history is in the same
// database as its runs, and a run's fire is written with the run, in one transaction (SQLite,
// PostgreSQL). The engine writes the fires of the runs it starts that way only on such a store.
type FireBatcher interface {
	FireLog
	// BatchesFires marks the store (it does nothing).
	BatchesFires()
}

// FireLog keeps the scheduler's fire history. A store that has it keeps the history across
// restarts (and catch-up fires see the last one); without it the engine keeps it in memory.
// Implementations must be safe for concurrent use. A store keeps every fire of kind FireFired
// (one per run started: what redelivery and replay checks find) but only the newest refused
// ones (FireSkipped, FireFailed) of each schedule: at most MaxRefusedFires + RefusedFiresSlack,
// so a flood of refused webhooks cannot grow the database without bound.
type FireLog interface {
	// RecordFire appends f.
	RecordFire(ctx context.Context, f Fire) error
	// LastFire returns the most recently recorded fire of scheduleID, and false if there is none.
	LastFire(ctx context.Context, scheduleID string) (Fire, bool, error)
	// Fires returns up to limit fires of scheduleID, newest first. scheduleID "" means every
	// schedule; limit ≤ 0 means all that are kept.
	Fires(ctx context.Context, scheduleID string, limit int) ([]Fire, error)
}

// MaxRefusedFires is how many refused fires (FireSkipped, FireFailed) of one schedule a store's
// FireLog keeps at least; the older ones are deleted. RefusedFiresSlack more may be kept for a
// while: a store trims once every RefusedFiresSlack refused fires it records.
const (
	MaxRefusedFires   = 1000
	RefusedFiresSlack = 32
)

// RefusedFiresCounter tells a FireLog when to trim a schedule's refused fires: once every
// RefusedFiresSlack refused fires of that schedule. The count is per schedule: one count across
// schedules trimmed only the schedule whose fire hit it, so refused fires interleaved with
// another schedule's (every RefusedFiresSlack-th one the other's) were never trimmed. The zero
// value is ready; safe for concurrent use. It remembers up to refusedCountersMax schedules;
// beyond them, a schedule it does not know is trimmed at each refused fire.
type RefusedFiresCounter struct {
	mu sync.Mutex
	m  map[string]int
}

const refusedCountersMax = 10_000

// Due counts one refused fire of scheduleID and reports whether to trim its refused fires now.
func (c *RefusedFiresCounter) Due(scheduleID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	n, ok := c.m[scheduleID]
	if !ok && len(c.m) >= refusedCountersMax {
		return true
	}
	n++
	if n >= RefusedFiresSlack {
		n = 0
	}
	c.m[scheduleID] = n
	return n == 0
}

// DeliveryFinder is an optional FireLog method. When the FireLog has it, a webhook redelivery
// is recognised for as long as its fire is in the history, not only while its delivery id is in
// the scheduler's in-memory window.
type DeliveryFinder interface {
	// FireByDelivery returns the latest fire of Kind FireFired of scheduleID with deliveryID.
	FireByDelivery(ctx context.Context, scheduleID, deliveryID string) (Fire, bool, error)
}

// ReplayFinder is an optional FireLog method of a fire history that several engines share
// (docs/operations/cluster.md, "Schedules"): it keeps the ReplayKey of each fire, so that a timestamped
// webhook signature replayed to any engine of the database is answered as a duplicate of the
// run it started. The key holds the signed time t, and a request is checked against the
// tolerance window before its key is looked up, so a key can only match within its window: an
// expired key is never found by a request that gets this far.
type ReplayFinder interface {
	// FireByReplay returns the latest fire of Kind FireFired of scheduleID whose ReplayKey is
	// key ("" finds nothing).
	FireByReplay(ctx context.Context, scheduleID, key string) (Fire, bool, error)
}

// FireKind says what happened when a schedule was due or a webhook was accepted.
type FireKind string

// Fire kinds.
const (
	FireFired   FireKind = "fired"   // a run was started
	FireSkipped FireKind = "skipped" // no run: max_concurrent runs were active
	FireFailed  FireKind = "failed"  // no run: the engine could not start it
)

// Fire is one entry of a schedule's fire history. It is JSON-friendly: the SQLite store keeps
// it in the schedule_fires table, one column per field.
type Fire struct {
	ScheduleID string   `json:"schedule_id"`
	Kind       FireKind `json:"kind"`
	// Reason is one of the scheduler's Reason constants, or "".
	Reason string `json:"reason,omitempty"`
	// Message is a human description of a failure, or "".
	Message string `json:"message,omitempty"`
	// RunID is the started run (Kind fired), or "".
	RunID string `json:"run_id,omitempty"`
	// Origin is "schedule" or "webhook".
	Origin string `json:"origin"`
	// ScheduledAt is the nominal fire time of a cron or interval fire (before jitter); for a
	// webhook it equals FiredAt.
	ScheduledAt time.Time `json:"scheduled_at"`
	// FiredAt is when the fire was handled.
	FiredAt time.Time `json:"fired_at"`
	// DeliveryID is the webhook delivery id, or "".
	DeliveryID string `json:"delivery_id,omitempty"`
	// ReplayKey is, for a webhook with signature: timestamped, the signature that was accepted:
	// "<t>.<v1 hex digest>" (see ReplayFinder), else "". Only a ReplayFinder keeps it; it is
	// not part of the JSON (the history does not hand out signatures).
	ReplayKey string `json:"-"`
}

// Catalog keeps the workflows registered with the engine, so that the catalog outlives the
// process, and every version of each: a version is one spec hash under one name, numbered from
// 1 in the order first registered. Runs name their version by their workflow name and spec hash.
type Catalog interface {
	// SaveWorkflow makes w (Name, SpecHash, Spec, Description, RegisteredAt) the current version
	// of w.Name and returns it with Version and Current set. A spec hash already registered
	// under that name keeps its version number (re-registering an older spec makes that version
	// current again, with the new RegisteredAt); a new one gets the next number.
	SaveWorkflow(ctx context.Context, w WorkflowVersion) (WorkflowVersion, error)
	// RemoveWorkflow unsets the current version of name, so it is no longer in the catalog, and
	// reports whether it had one. Its versions stay, for the runs that used them.
	RemoveWorkflow(ctx context.Context, name string) (bool, error)
	// WorkflowVersions returns the versions of name ("" = of every workflow), by name, then
	// newest version first. Without versions it returns none and no error.
	WorkflowVersions(ctx context.Context, name string) ([]WorkflowVersion, error)
}

// WorkflowVersion is one version of a workflow in a Catalog.
type WorkflowVersion struct {
	Name     string `json:"name"`
	Version  int    `json:"version"`   // 1, 2, … per name
	SpecHash string `json:"spec_hash"` // the spec's canonical hash
	// Spec is the spec's canonical JSON text, from which the engine rebuilds it.
	Spec         []byte    `json:"-"`
	Description  string    `json:"description,omitempty"`
	RegisteredAt time.Time `json:"registered_at"` // when it last became current
	Current      bool      `json:"current"`       // the version runs by name use
}

// CommitObserver is an optional Store feature of a store that commits transactions (SQLite: one
// per group of concurrent Writes): it reports each commit, so that the engine's metrics show the
// database's commit latency (docs/operations/metrics.md). The memory store has none.
type CommitObserver interface {
	// ObserveCommits makes the store call fn after each transaction it commits, on the goroutine
	// that committed it (fn must not block: the Writes of the group wait for it to return), and
	// after none once fn is nil. Failed transactions are not reported.
	ObserveCommits(fn func(Commit))
}

// Commit is one committed transaction of a CommitObserver.
type Commit struct {
	// Batches is how many Write batches the transaction held: 1 up to the store's group bound.
	Batches int
	// Duration runs from the committer taking the group to the end of COMMIT: the batches'
	// statements, a WAL checkpoint done before the transaction, and the sync of the commit. The
	// time a Write waited for the previous group is not in it.
	Duration time.Duration
}

// Leaser is the feature of a store that many read-write engines share at once (PostgreSQL,
// docs/operations/cluster.md): each engine registers itself, and each unfinished run is orchestrated by one
// engine at a time under a lease that engine renews. Lease times are the database server's, so
// the clocks of the engines' hosts do not matter. A run whose lease expired is taken over by
// another engine (ClaimRun), which resumes it.
//
// Once Attach is called, the store writes the engine's id as the owner of every run it creates
// and of every run it updates to an unfinished status (a resume, an unpause), with a new lease;
// a run's terminal update releases the lease (the owner stays, for the record). A lease is live
// until its end, that end included (lease_until ≥ now()): a lease of L written at T is live at
// T+L and expired just after. A batch of an attached store that updates a run, or writes steps,
// workflow-scoped idempotency entries, events, attempts, file records or cache entries of a run
// (other than one the batch creates), whose live lease another engine holds fails with
// ErrLeaseLost and applies nothing: an engine that lost a run cannot overwrite the new owner's
// record. A store not attached (or detached) writes no owner and is not fenced.
//
// The methods that act as the engine (Heartbeat, ClaimRun, Acquire, Closing, Detach) fail
// before Attach; the others read and work on any store. storetest.ExerciseLeaser is the suite
// (with a clock the test moves: no sleeps).
type Leaser interface {
	// Attach registers the engine e (its row in the engines table) and makes the store act as it.
	// Call it once, before the first Write. e.ID must not be "" and e.Lease must be > 0 (else an
	// error, and nothing registered). An id registered already has its row replaced but for its
	// StartedAt and Closing. It deletes the rows of engines whose heartbeat is more than ten of
	// their leases old (at least a minute): engines that died without Detach.
	Attach(ctx context.Context, e EngineInfo) error
	// Heartbeat renews the engine's heartbeat (and its row's tools, lanes and remotes, from e;
	// Host and PID only when the row was deleted and is registered again; Closing stays) and the
	// leases of those of runIDs it owns that have not finished, in one round trip, and returns
	// their ids (in no set order). A run whose lease expired is still owned until another engine
	// claims or acquires it, so a late heartbeat takes it back. Those not returned are lost to
	// another engine, or ended meanwhile (Holder tells), or unknown.
	Heartbeat(ctx context.Context, e EngineInfo, runIDs []string) (owned []string, err error)
	// Expired returns up to limit (≤ 0: all) top-level unfinished runs that no live lease holds,
	// oldest CreatedAt first (ties: smaller id first): the candidates for ClaimRun. A child run is
	// never one: it goes with its parent. A paused run is one only while it has step instances
	// in flight (which ClaimRun interrupts). Only ID, Name, Status, SpecJSON and CreatedAt are set.
	Expired(ctx context.Context, limit int) ([]Run, error)
	// ClaimRun takes run id over if no live lease holds it and it has not finished, and reports
	// whether it did (false and no error for a run that is held, finished or unknown). In one
	// transaction it makes this engine the owner with a new lease and interrupts the run as
	// MarkInterrupted does (its step instances in flight — pending, running, retrying,
	// waiting_approval, waiting_resources — become interrupted with UpdatedAt now; the run becomes interrupted with
	// in.Error, UpdatedAt and FinishedAt now, its progress as committed with those steps counted,
	// and an interrupted event with that progress and in.Detail; or it stays paused, with no
	// event), ready for the resume path. Its unfinished child runs (recursively) are interrupted
	// alike and get this engine as their owner, without a lease of their own (Leased finds the
	// parent's). The claim is not the run's end: its queued calls stay (CallQueue.AdoptCall). Of
	// engines claiming a run at once, one gets it.
	ClaimRun(ctx context.Context, id string, now time.Time, in Interruption) (bool, error)
	// Acquire makes this engine the owner of run id, with a new lease, unless another engine
	// holds a live lease on it: then it returns false and that engine's id. Whatever the run's
	// status, and also when this engine holds it. It is how an engine resumes (or unpauses) a
	// run that no engine runs: of engines doing so at once, one wins. ErrNotFound for an unknown
	// run.
	Acquire(ctx context.Context, id string) (ok bool, holder string, err error)
	// Holder returns the id of the engine that holds a live lease on run id, "" when none does
	// or this engine does. ErrNotFound for an unknown run.
	Holder(ctx context.Context, id string) (string, error)
	// Leased reports whether a live lease of any engine, this one included, holds run id or
	// one of the runs above it (a child run goes with its parent's lease). ErrNotFound for an
	// unknown run.
	Leased(ctx context.Context, id string) (bool, error)
	// Closing marks the engine as closing: from then on Engines reports it with Closing set, so
	// the other engines neither hand their runs to it nor count it as one that could take them.
	// Its heartbeat keeps the mark.
	Closing(ctx context.Context) error
	// Detach releases the leases of the engine's runs (they become claimable at once), deletes
	// its registration and wakes the other engines' sweeps (a CallQueue's listeners get
	// "h:ENGINE": a run it released is claimed within a round trip, not a heartbeat). The store
	// acts as no engine afterwards: it writes no owner, and Detach again is an error.
	Detach(ctx context.Context) error
	// Engines returns the registered engines, by id, live or not.
	Engines(ctx context.Context) ([]EngineInfo, error)
}

// ErrLeaseLost: a run update of an engine that no longer holds the run's lease.
var ErrLeaseLost = errors.New("store: another engine holds this run's lease")

// ErrConnectionLost is wrapped by the error of a write whose database connection was lost (a
// server restart, a network cut) so that the store cannot say whether it was applied: it was
// sent and the connection died before its commit was confirmed, or the database stayed out of
// reach for longer than the store retries a write that never reached it (about a lease). The
// writer must not guess: an engine stops orchestrating the runs the write was for without
// recording anything more of them (as for ErrLeaseLost), and their leases expire, so an engine
// takes them over and resumes them once the database is back. The error's code stays storage.
var ErrConnectionLost = errors.New("store: the connection to the database was lost before the write was confirmed")

// EngineInfo is one engine attached to a Leaser store.
type EngineInfo struct {
	ID    string   `json:"id"`
	Host  string   `json:"host"`
	PID   int      `json:"pid"`
	Tools []string `json:"tools"` // the host tools it hosts, when it registered or last beat
	Lanes []string `json:"lanes"`
	// Remotes are the remotes (worker pools, MCP servers) of its config, whose calls other
	// engines may queue for it (docs/operations/cluster.md, "Pools and remotes on other engines").
	Remotes     []string      `json:"remotes"`
	Lease       time.Duration `json:"-"`
	StartedAt   time.Time     `json:"started_at"`
	HeartbeatAt time.Time     `json:"heartbeat_at"`
	// Live: its last heartbeat is less than its lease old, by the database's clock (an engine
	// that died or hangs is registered but not live): HeartbeatAt + Lease > now(). Closing: it is closing (Leaser.Closing).
	Live    bool `json:"live"`
	Closing bool `json:"closing,omitempty"`
}

// SlotClaimer is an optional FireLog method of a fire history that several engines share: a
// cron or interval fire is claimed before its run starts, so that of the engines that have the
// schedule, one fires each slot (docs/operations/cluster.md, "Schedules").
type SlotClaimer interface {
	// ClaimSlot records that the fire of scheduleID due at slot (its nominal time) is being
	// handled, and reports whether this call recorded it: false when it was claimed before
	// (by this engine or another). Claims older than a day may be forgotten.
	ClaimSlot(ctx context.Context, scheduleID string, slot time.Time) (bool, error)
}

// ScheduleAdmitter is an optional FireLog feature of a fire history that several engines share
// (docs/operations/cluster.md, "Schedules"): it makes the admission of a schedule's fire — the webhook
// redelivery check, the max_concurrent count, the start of the run and the record of the fire —
// one critical section across every engine on the database, and counts the schedule's
// unfinished runs of all of them.
type ScheduleAdmitter interface {
	// LockSchedule waits until this engine holds the database-wide admission lock of scheduleID
	// and returns the function that releases it (call it exactly once). While one engine holds
	// it, another engine's LockSchedule of the same schedule waits; other schedules do not. The
	// lock goes with the holder's database session: a holder whose process dies releases it.
	// The wait is bounded by the store (an error once it is over, the fire then fails).
	LockSchedule(ctx context.Context, scheduleID string) (unlock func(), err error)
	// ActiveScheduleRuns counts the top-level runs that a fire of scheduleID started (their
	// trigger names it), of any engine, whose stored status is not terminal (pending, running,
	// waiting, paused). The fire's run is stored before Starter.Start returns, so a count made
	// after it, under the lock, sees it.
	ActiveScheduleRuns(ctx context.Context, scheduleID string) (int, error)
}

// CallQueue is the durable queue of tool calls of a store that many engines share
// (docs/operations/cluster.md, "The tool-call queue"): an engine that orchestrates a run and does not host
// a tool that another live engine hosts enqueues the call; an engine that hosts the tool claims
// it, runs it and writes its result, under a claim lease it renews with its heartbeat. Lease
// times are the database server's. Every method that changes a call's status wakes the
// listeners (ListenCalls), and so does a Write that ends a run (a terminal status): it cancels
// the run's calls still queued or claimed, which nobody waits for any more (ClaimRun, which
// interrupts a run, does not). A call's life: queued → claimed → done, or cancelled from
// queued or claimed. The methods that act as the engine (EnqueueCall, AdoptCall, ClaimCall,
// CompleteCall, RenewCalls, ReportCall) need the store attached (Leaser.Attach).
// storetest.ExerciseCallQueue is the suite.
type CallQueue interface {
	// EnqueueCall adds c (status queued; Args "" is stored as {}) and returns its id, > 0 and
	// larger than every id before. With c.Nonce set it is idempotent: a call of EnqueueCall with
	// a nonce already on a call (queued or since claimed, done or cancelled, but not yet deleted
	// by ExpireCalls) returns that call's id and adds nothing (so a try sent again after a lost
	// connection, when the first may have been applied, never queues the call twice). An error
	// wrapping ErrConnectionLost leaves it unknown whether the call was queued.
	EnqueueCall(ctx context.Context, c QueuedCall) (int64, error)
	// AdoptCall returns the id of the call a run's former orchestrator left in flight when it
	// died or gave the run up, and whether there is one: the engine that resumes the run waits
	// for it (or takes its outcome, when it ended after its orchestrator stopped) instead of
	// making the call again. That is the newest call of c's RunID and StepKey with c's Tool,
	// Remote and Args (byte for byte) still queued or claimed, or else, when c.Interrupted > 0,
	// the step's newest call if it is done and of attempt c.Interrupted (the attempt of the
	// interrupted step row) or of attempt c.Attempt (the same adoption made again, after a lost
	// connection). Any other call of the step that is newer, whatever its tool or status, hides
	// a done one. The adopted call's attempt becomes c.Attempt, the adopter's, so that the next
	// adopter finds it by the attempt the step row then records; a call still queued also
	// takes c.Traceparent when it is not "".
	AdoptCall(ctx context.Context, c QueuedCall) (int64, bool, error)
	// ClaimCall claims the oldest queued call for this engine — a host-tool call (Remote "")
	// of one of tools, or a call of one of remotes (a worker pool or MCP server it has) — with
	// a lease of the engine's lease_secs, and returns it; nil when none is queued, or when tools
	// and remotes are both empty. Oldest is the smallest id. Engines claiming at once never get
	// the same call (FOR UPDATE SKIP LOCKED). The call returned has every field EnqueueCall
	// stored (Traceparent included) but Nonce.
	ClaimCall(ctx context.Context, tools, remotes []string) (*QueuedCall, error)
	// CompleteCall records the outcome of a call this engine claimed, and reports whether it
	// did: false when the call is no longer this engine's claim (cancelled, or failed
	// worker_lost after its lease expired, done already): the outcome is dropped. A success
	// (ErrorKind "") without Output is recorded as the output null; a failure records no output.
	CompleteCall(ctx context.Context, id int64, out CallOutcome) (bool, error)
	// CallStatus returns a call's status ("queued", "claimed", "done", "cancelled"), the Seq of
	// its newest report kept (CallOutcome.LastReport) and, once done, its outcome. ErrNotFound
	// for an unknown id (or one ExpireCalls deleted).
	CallStatus(ctx context.Context, id int64) (string, CallOutcome, error)
	// CancelCall marks a queued or claimed call cancelled (the engine that claimed it stops it);
	// a call already done or cancelled, or an unknown id, is left alone (no error).
	CancelCall(ctx context.Context, id int64) error
	// RenewCalls extends the leases of the calls of ids that this engine still holds claimed,
	// and returns those ids (in no set order); the others were cancelled, completed or lost. A
	// claim whose lease ended is still held until ExpireCalls fails it.
	RenewCalls(ctx context.Context, ids []int64) ([]int64, error)
	// ExpireCalls fails every claimed call whose lease expired (lease end < now) with kind
	// worker_lost and a message naming the engine that claimed it ("engine ID claimed this call
	// and stopped renewing its claim …"), wakes their orchestrators ("d:ID") and returns their
	// ids. Of engines doing so at once, each call is failed by one. It also deletes the calls
	// finished (done or cancelled) more than a day ago, with their reports, and the reports
	// written more than an hour ago.
	ExpireCalls(ctx context.Context) ([]int64, error)
	// ReportCall records report r (its Seq: 1 for a call's first, one more for each next) of a
	// call this engine holds claimed, and wakes its orchestrator ("p:ID"). It reports whether it
	// did: false, and nothing written, when the call is no longer this engine's claim (done,
	// cancelled, failed worker_lost, or claimed by another engine) — the same rule as
	// CompleteCall's. A Seq the call has a report of already is an error.
	ReportCall(ctx context.Context, id int64, r CallReport) (bool, error)
	// CallReports returns the reports of call id numbered past after, in Seq order (none for an
	// unknown id).
	CallReports(ctx context.Context, id int64, after int) ([]CallReport, error)
	// ListenCalls calls fn with each wake-up of the queue until ctx ends or the connection
	// fails (then it returns the error; call it again). A wake-up is "q:TOOL" (a call of a host
	// tool queued), "r:REMOTE" (a call of a remote queued), "d:ID" (a call done: an outcome or
	// an expiry), "c:ID" (a call cancelled), "p:ID" (a call reported progress or log lines) or
	// "h:ENGINE" (an engine detached: Leaser.Detach). A claim wakes nobody. The listener may
	// start listening only after ListenCalls was called (PostgreSQL's LISTEN): a wake-up of a
	// change made before then is lost, as are those sent while a failed connection is replaced.
	// ready (when not nil) is called once it listens: no wake-up of a change made after ready
	// was called is missed, so a caller that must not miss one looks at the state once in ready
	// (or waits for a first wake-up, a probe) before it relies on them. Wake-ups of changes made
	// one after the other arrive in that order; when ctx ends it returns ctx's error.
	ListenCalls(ctx context.Context, ready func(), fn func(payload string)) error
}

// CallReport is what a queued call reported while it ran on the engine that claimed it, since
// its previous report (docs/operations/cluster.md, "The tool-call queue"): the latest progress, the lines
// logged, the lines dropped.
type CallReport struct {
	Seq      int               // 1, 2, … per call
	Progress *run.StepProgress // nil: unchanged since the previous report
	Lines    []run.LogLine
	Dropped  int // lines the worker's side logged and did not relay
}

// QueuedCall is one tool call on a CallQueue.
type QueuedCall struct {
	ID      int64
	RunID   string
	StepKey string
	Attempt int
	// Interrupted is, for AdoptCall only, the attempt of the interrupted step row whose call
	// is looked for (0: only a call still queued or claimed is adopted).
	Interrupted int
	Tool        string
	// Remote is the remote (worker pool, MCP server) the call must run on, "" for a host tool:
	// a pool step's or a tool_remote step's call queued for an engine that has that remote.
	Remote string
	Args   json.RawMessage // a JSON object
	// Nonce, when set, makes EnqueueCall idempotent: unique per call, made by the engine that
	// queues it. "" = none (every EnqueueCall adds a call).
	Nonce string
	// Traceparent is the W3C traceparent of the call's span in the orchestrating engine's trace
	// (docs/guide/tracing.md), "" when it does not trace: EnqueueCall stores it and ClaimCall
	// returns it, so that the claiming engine hands it to the tool (tools.Call.Traceparent).
	// AdoptCall gives a call still queued the adopter's (when not ""), the span of the resumed
	// step's call; a claimed or done call keeps the one its tool got. Stored as text (PostgreSQL
	// migration 0015).
	Traceparent string
}

// CallOutcome is what a queued call returned: Output (JSON text) or an error.
type CallOutcome struct {
	Output       json.RawMessage
	ErrorKind    string // "" = success
	ErrorMessage string
	ErrorTrace   string
	// Logs are the output lines the call wrote (a JSON array of run.LogLine: a pool worker's
	// captured output), LogsDropped the lines not kept; empty and 0 when none.
	Logs        json.RawMessage
	LogsDropped int
	// Files are the files the call said it read and wrote (flowtype.ToolResult.Files), with a
	// success and a failure alike: a JSON array of flowtype.FileUse ({"path", "role"}), kept as
	// the JSON text it is, as Logs (a store does not parse it; the engine that ran the call
	// makes it, within cluster.MaxQueuedFiles and MaxQueuedFilePathBytes). Empty when none:
	// CallStatus returns nil then.
	Files json.RawMessage
	// Env is the environment of the process that ran the call (flowtype.ToolResult.Env, else the
	// running engine's own), a JSON object kept as its text; nil when none.
	Env json.RawMessage
	// Worker names what ran the call: CompleteCall records it (the engine id, then "/" and the
	// pool worker, "ENGINE/POOL/PID", when a pool ran it); CallStatus returns it, or the id of
	// the engine that claimed the call when none was recorded ("" when none claimed it).
	Worker string
	// LastReport is the Seq of the call's newest report (CallStatus; 0 when it has none), so a
	// waiter reads the reports only when there are new ones.
	LastReport int
}

// AttemptLog reads the attempt history of step instances (docs/reference/cli/inspecting.md "show"): one Attempt per
// call a tool or tool_remote step made, written through Batch.Attempts with the step's own row.
// A store without it keeps no attempts (Write ignores Batch.Attempts) and the engine shows only
// the step rows. Prune deletes a run's attempts with the run.
type AttemptLog interface {
	// ListAttempts returns the kept attempts of step instance stepKey of run runID, by attempt
	// number; stepKey "" returns those of every step instance of the run, by step key, then
	// attempt. None (and no error) for an unknown run or step.
	ListAttempts(ctx context.Context, runID, stepKey string) ([]Attempt, error)
	// Resumes returns the run's workflow_resumed events (run.EventWorkflowResumed: when, by
	// whom, which steps were forced, in their Detail), in Seq order; none for a run never
	// resumed or unknown. Indexed: it does not read the run's other events.
	Resumes(ctx context.Context, runID string) ([]run.Event, error)
}

// The attempts of one step instance a store keeps: the first MaxAttemptsFirst and the last
// MaxAttemptsLast (a retry loop of 100,000 attempts keeps 110 rows). The number left out is the
// step's Attempt minus the rows kept.
const (
	MaxAttemptsFirst = 10
	MaxAttemptsLast  = 100
)

// AttemptDropped returns the attempt a store deletes when it writes attempt n (0 when none):
// n-MaxAttemptsLast once that is past the first MaxAttemptsFirst.
func AttemptDropped(n int) int {
	if d := n - MaxAttemptsLast; d > MaxAttemptsFirst {
		return d
	}
	return 0
}

// Attempt is one call a step instance made, keyed by (RunID, StepKey, Attempt). Writes replace
// the whole row: the engine writes it when the attempt starts (Status running) and again when
// it ends. Stored in the table step_attempts (SQLite migration 0010, PostgreSQL 0009), deleted
// with its run.
type Attempt struct {
	RunID   string
	StepKey string
	Attempt int    // 1, 2, …
	Tool    string // the tool called; "DCC/TOOL" for a tool_remote step
	// Status is running while the call is in flight, then completed, failed, cancelled or
	// interrupted (run.StepStatus values).
	Status run.StepStatus
	// Args are the rendered arguments of the call, a JSON object, secrets redacted and at most
	// MaxAttemptArgs bytes: a larger one is {"_truncated": true, "bytes": N, "preview": "…"}.
	// nil when not recorded.
	Args json.RawMessage
	// Worker is the pool worker ("POOL/PID"), the engine of a queued call ("ENGINE" or
	// "ENGINE/POOL/PID"), or "" for a tool run in the engine's process; Host and PID name the
	// process that ran the call where known (the engine's for an in-process tool), "" and 0
	// otherwise.
	Worker string
	Host   string
	PID    int
	// ErrorKind, ErrorMessage and ErrorTrace describe the attempt's failure, "" when none. Exit
	// is, for a lost worker, how its process ended ("exit status 139", "signal: killed"), else "".
	ErrorKind    string
	ErrorMessage string
	ErrorTrace   string
	Exit         string
	// Env is the environment of the process that ran the call (DCC name and version, plugin
	// versions: docs/guide/assets.md), a JSON object; nil when none was reported.
	Env        json.RawMessage
	StartedAt  time.Time
	FinishedAt time.Time // zero while running
}

// MaxAttemptArgs bounds the JSON text of an attempt's Args: 64 KiB.
const MaxAttemptArgs = 64 << 10
