// Package store defines the persistence boundary of the engine: the Store interface the executor
// writes every state change through, and the records it holds (runs, step instances, events,
// idempotency entries, artefacts). Values cross this boundary as JSON (json.RawMessage) so a SQL
// implementation stores them as is.
//
// Implementations: store/memstore (in memory, the default engine), store/sqlite (one file;
// docs/design/architecture.md, "Durability") and store/postgres (a database many engines share,
// docs/operations/cluster.md); store/memcluster is an in-memory database of engines for the cluster's unit
// tests. Each must pass storetest.Exercise, and the sub-suite of each optional feature it has
// (features.go: Pruner, Controller, FireLog, Leaser, CallQueue…). The engine reaches them only
// through store/storeopen, the one package that names a concrete store.
//
// Concurrency and durability: every method is safe for concurrent use. The executor calls Write
// from many goroutines at once; each call returns only when its batch is durable, so an
// implementation may coalesce concurrent batches into one transaction (group commit). A batch is
// atomic: all of it is visible, or none of it.
//
// Ownership: Write does not keep b or the backing arrays of its slices (callers reuse them), but
// it may keep the json.RawMessage byte slices inside, and the read
// methods may return slices shared with the store: nobody modifies them after handing them over.
// Times may come back in another location and with at least microsecond precision: compare them
// with time.Time.Equal.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Errors returned by stores. Match them with errors.Is.
var (
	// ErrNotFound: no run (or artefact) with that id.
	ErrNotFound = errors.New("store: not found")
	// ErrExists: CreateRuns named a run id that is already stored.
	ErrExists = errors.New("store: already exists")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
)

// Store is the engine's persistence. See the package comment for the concurrency contract.
type Store interface {
	// Write applies b atomically and durably. It creates b.CreateRuns (ErrExists if an id is
	// taken), applies b.RunUpdates (ErrNotFound for an unknown run), upserts b.Steps keyed by
	// (RunID, Key) (the run must exist), upserts b.Idempotency keyed by (Scope, RunID, Key) and
	// appends b.Events, assigning each its Seq in slice order: engine-wide, strictly increasing,
	// never reused, also across a reopen. Events become visible to ListEvents in Seq order: once
	// an event is listed, no event with a smaller Seq appears later. On error nothing is applied.
	Write(ctx context.Context, b *Batch) error

	// GetRun returns the run, or ErrNotFound.
	GetRun(ctx context.Context, id string) (Run, error)
	// ListRuns returns the runs matching f, newest CreatedAt first (ties: larger id first).
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error)
	// ListSteps returns every step instance of a run in the order each was first written;
	// nil for a run without steps. ErrNotFound when the run does not exist.
	ListSteps(ctx context.Context, runID string) ([]Step, error)

	// ListEvents returns the events with Seq > f.AfterSeq (of run f.RunID when not ""), in Seq
	// order, at most f.Limit of them (0 = no limit).
	ListEvents(ctx context.Context, f EventFilter) ([]run.Event, error)
	// LastSeq returns the largest Seq assigned so far, 0 when no event was ever written.
	LastSeq(ctx context.Context) (uint64, error)

	// GetIdempotency returns the entry stored for (scope, runID, key) if it is live at now: an
	// entry with a non-zero ExpiresAt is expired once now ≥ ExpiresAt and is then a miss.
	// runID is "" for the global scope.
	GetIdempotency(ctx context.Context, scope, runID, key string, now time.Time) (IdempotencyEntry, bool, error)
	// PurgeExpired deletes the idempotency entries expired at now and returns how many.
	PurgeExpired(ctx context.Context, now time.Time) (int, error)

	// MarkInterrupted is the recovery step after a crash, called when a persistent store is
	// opened. In one atomic, durable write it turns every non-terminal run into
	// StatusInterrupted, with Error in.Error, UpdatedAt and FinishedAt now and its progress as
	// committed (see Run.Progress), its interrupted steps counted; every non-terminal step
	// instance of those runs into StepInterrupted, UpdatedAt now; and appends for each of those
	// runs, in id order, one event {Type: run.EventInterrupted, Time: now, Status
	// "interrupted", Progress: the run's, Detail: in.Detail}. A crash during it leaves all of it
	// or none of it. A paused run stays paused, without an event, but its non-terminal step
	// instances become StepInterrupted too (Unpause resumes it). It returns the ids of the runs
	// it made interrupted, sorted.
	MarkInterrupted(ctx context.Context, now time.Time, in Interruption) ([]string, error)

	ArtefactStore

	// Close releases the store. Further calls return ErrClosed. Closing twice is not an error.
	Close() error
}

// ArtefactStore keeps artefact bytes content-addressed by their sha256.
type ArtefactStore interface {
	// PutArtefact stores data and returns its lowercase hex sha256. Storing the same bytes twice
	// keeps one copy.
	PutArtefact(ctx context.Context, data []byte) (string, error)
	// GetArtefact returns the bytes stored under sha256 (lowercase hex), or ErrNotFound.
	GetArtefact(ctx context.Context, sha256 string) ([]byte, error)
}

// Interruption is what MarkInterrupted records on each run it interrupts.
type Interruption struct {
	Error  *RunError       // the run's error (nil: none)
	Detail json.RawMessage // the Detail of each run's interrupted event (nil: none)
}

// Batch is one atomic write. Any field may be empty.
type Batch struct {
	CreateRuns  []Run
	RunUpdates  []RunUpdate
	Steps       []Step
	Idempotency []IdempotencyEntry
	// Events are appended in order; Write sets each one's Seq.
	Events []run.Event
	// Attempts are upserted keyed by (RunID, StepKey, Attempt) after the steps, so an attempt
	// row is written in the same transaction as its step's row (the run must exist). A store
	// keeps at most MaxAttemptsFirst + MaxAttemptsLast rows per step instance: writing attempt
	// n deletes attempt n-MaxAttemptsLast when that is past the first MaxAttemptsFirst
	// (features.go, AttemptLog).
	Attempts []Attempt
	// Files are the files attempts read and wrote (assets.go), written after the attempts, in
	// the same transaction; a record with the key of one already stored replaces it.
	Files []FileRecord
	// CacheEntries are upserted keyed by (Key, RunID, StepKey, Attempt), after the files.
	CacheEntries []CacheEntry
	// Fires are appended to the fire history (FireLog), last: the fire of a run a schedule or a
	// webhook delivery started, written with the run's creation, so that no process killed
	// between two writes leaves a run whose fire (its delivery id) the history does not know
	// (docs/guide/scheduler.md, "Redeliveries"). Each must be of Kind FireFired (others are an
	// error). A store that is not a FireBatcher fails a batch with fires, writing nothing.
	Fires []Fire
}

// Run is the record of one workflow run.
type Run struct {
	ID       string
	Name     string // the spec's name; may be ""
	SpecJSON json.RawMessage
	SpecHash string
	Inputs   json.RawMessage // the checked inputs, defaults applied (a JSON object)
	Status   run.Status
	Error    *RunError // nil unless the run failed, was cancelled or interrupted
	// Origin says who started the run: "local", "mcp", "webhook", "schedule" or "ui" (the dashboard).
	Origin string
	// EnvAllow is the env_allow patterns the run's `env` root was filtered with; nil when the
	// run sees the whole environment (a local run).
	EnvAllow []string
	Trigger  json.RawMessage // the trigger document, or nil
	// ParentRunID and ParentStepKey name the run and the step instance ("publish",
	// "per_shot[2].render") of the `kind: workflow` step that started this run as its child;
	// "" for a run started on its own. Stored in the nullable columns parent_run_id and
	// parent_step_key (migration 0009).
	ParentRunID   string
	ParentStepKey string
	// Priority is the run's own priority, given when it started over its spec's `priority`
	// (docs/guide/resources.md, "Who goes first"), so that a resume or a takeover gives it
	// again; nil: the spec's. Written when the run is created, never changed. Stored in the
	// nullable column priority (SQLite migration 0016, PostgreSQL 0018).
	Priority *int
	// Progress is written with the run (created, resumed, finished, interrupted). A read of a
	// run that has not finished returns its progress as committed instead, whoever wrote it:
	// Completed is the number of its step rows in a finished status (StepStatus.Terminal) and
	// Total the Progress.Total of its newest event (the written one when it has none), at least
	// Completed. So the step path writes no run row, and a reader beside the writer, or after
	// a crash, sees what is committed.
	Progress run.Progress

	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time // zero until terminal
}

// RunError says why a run did not complete (flowtype.RunError, the form callers read on a
// run's record). Stored as JSON.
type RunError = flowtype.RunError

// RunUpdate replaces the mutable fields of a run.
type RunUpdate struct {
	ID         string
	Status     run.Status
	Error      *RunError // replaces the stored error; nil clears it
	Progress   run.Progress
	UpdatedAt  time.Time
	FinishedAt time.Time // zero clears it (a resumed run is no longer finished)
}

// Step is the record of one step instance, keyed by (RunID, Key). Writes replace the whole row.
type Step struct {
	RunID  string
	Key    string // instance key: "export", "per_file[3].export", "outer[1].inner[2].leaf"
	StepID string // the spec step id: "export"
	Kind   string // the spec step kind: "tool", "foreach", …
	Status run.StepStatus
	// Attempt is the attempt in progress or the last one made; 0 when no attempt was made
	// (cached, skipped, control steps).
	Attempt  int
	Output   json.RawMessage // nil until the step has an output
	FileRefs json.RawMessage // captured artefact references (a JSON array), or nil
	// ErrorKind, ErrorMessage and ErrorTrace describe the last failure; "" when none.
	ErrorKind    string
	ErrorMessage string
	ErrorTrace   string
	Cached       bool // the output came from the idempotency cache
	// Worker is the pool worker that ran the last attempt, "POOL/PID" (docs/guide/pools.md); "" when
	// it did not run on a pool worker. Stored in the nullable column worker (migration 0005).
	Worker string
	// Logs are the output lines of the step's attempts, a JSON array of run.LogLine objects,
	// newest last, within run.MaxStepLogLines and run.MaxStepLogBytes; nil when there are none.
	// LogsDropped counts the older lines left out. Stored in the columns logs and logs_dropped
	// (migration 0006).
	Logs        []byte
	LogsDropped int
	// Progress is the latest progress the step's tool reported, a JSON run.StepProgress object;
	// nil when it reported none. Stored in the nullable column progress (migration 0008).
	Progress   []byte
	StartedAt  time.Time
	FinishedAt time.Time // zero until terminal
	UpdatedAt  time.Time
	// Insert is a hint from the writer: this is the instance's first write, so (RunID, Key) is
	// not stored yet and a store may skip looking it up (an INSERT rather than an upsert).
	// False is always correct. Not stored.
	Insert bool
}

// IdempotencyEntry is a cached step output keyed by (Scope, RunID, Key).
type IdempotencyEntry struct {
	Scope     string // "workflow" or "global"
	RunID     string // the owning run for workflow scope; "" for global scope
	Key       string
	Output    json.RawMessage
	FileRefs  json.RawMessage // nil when the output had no file_refs
	CreatedAt time.Time
	ExpiresAt time.Time // zero = never expires
}

// RunFilter selects runs. The zero value selects every run.
type RunFilter struct {
	Statuses []run.Status // any of these; empty = any status
	Name     string       // exact spec name; "" = any
	// ParentRunID selects the child runs of that run (Run.ParentRunID); "" = any run.
	ParentRunID string
	Since       time.Time // CreatedAt ≥ Since when not zero
	Until       time.Time // CreatedAt < Until when not zero
	// After, when not nil, selects only the runs listed after it in the newest-first order:
	// created before After.CreatedAt, or at the same time with a smaller id (cursor paging;
	// the run at After itself is not listed, and need not exist any more).
	After *RunPosition
	Limit int // at most this many; 0 = no limit

	// The search fields (docs/reference/cli/inspecting.md "runs"); each one set narrows the selection (AND). The
	// engine checks them (known statuses and kinds, texts within MaxSearchText) before a
	// store sees them.

	// Inputs selects the runs whose inputs have each key as a top-level member whose value is
	// that text: a string equal to it, an integer (int64) whose decimal text it is, or the
	// boolean true or false. Only members whose key and value are at most MaxSearchText
	// characters are indexed (run_inputs), so a longer one never matches.
	Inputs map[string]string
	// Tool selects runs with an attempt (step_attempts) that called this tool; "" = any.
	Tool string
	// StepStatuses selects runs with a step instance in one of these statuses; empty = any.
	StepStatuses []run.StepStatus
	// ErrorKind selects runs with a step instance or an attempt that failed with this error
	// kind (run.Kind*); "" = any.
	ErrorKind string
	// Worker selects runs with an attempt run by this worker: its Worker ("POOL/PID",
	// "ENGINE/POOL/PID") or its Host equal to it; "" = any.
	Worker string
	// ErrorText selects runs with a step instance or an attempt whose error message contains
	// this text, ignoring ASCII case (a substring, no wildcards: % and _ are literal); "" = any.
	ErrorText string
}

// MaxSearchText bounds, in characters, every text of a RunFilter search (an input key or
// value, a tool, a worker, an error text) and the input members indexed for it.
const MaxSearchText = 256

// Searches reports whether f uses a search field (Inputs, Tool, StepStatuses, ErrorKind,
// Worker, ErrorText).
func (f *RunFilter) Searches() bool {
	return len(f.Inputs) > 0 || f.Tool != "" || len(f.StepStatuses) > 0 || f.ErrorKind != "" ||
		f.Worker != "" || f.ErrorText != ""
}

// EscapeLike escapes s for a LIKE pattern with ESCAPE '\': %, _ and \ match themselves.
func EscapeLike(s string) string {
	return likeEscaper.Replace(s)
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// RunPosition is a place in the newest-first listing of runs (RunFilter.After): the
// CreatedAt and ID of a run listed.
type RunPosition struct {
	CreatedAt time.Time
	ID        string
}

// Before reports whether a run created at createdAt with id comes after p in the
// newest-first order (CreatedAt descending, then ID descending).
func (p RunPosition) Before(createdAt time.Time, id string) bool {
	if c := createdAt.Compare(p.CreatedAt); c != 0 {
		return c < 0
	}
	return id < p.ID
}

// EventFilter selects events.
type EventFilter struct {
	AfterSeq uint64   // only events with Seq > AfterSeq
	RunID    string   // "" = every run
	Types    []string // only events of one of these types (run.Event.Type); empty = every type
	Limit    int      // at most this many (of those selected); 0 = no limit
}
