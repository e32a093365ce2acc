// Package engine is the facade of dcc-flow: the one Go API that every door (the C ABI, MCP,
// webhooks, the CLI through Python) calls. An Engine runs workflows, keeps their records in its
// store, routes their tool calls (built-in tools, host tools pulled by the host process, remote
// MCP servers) and publishes a sequence-numbered event stream; docs/design/architecture.md shows how.
//
// Every method is safe for concurrent use. Errors carry stable codes: *run.Error (run.CodeOf),
// or *spec.ValidationError for a bad spec. Nothing here panics, exits or writes to stdout.
package engine

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/catalog"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/cluster"
	"github.com/dcc-flow/dcc-flow/engine/internal/eventhub"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/metrics"
	"github.com/dcc-flow/dcc-flow/engine/internal/remote"
	"github.com/dcc-flow/dcc-flow/engine/internal/resgate"
	"github.com/dcc-flow/dcc-flow/engine/internal/retention"
	"github.com/dcc-flow/dcc-flow/engine/internal/runtree"
	"github.com/dcc-flow/dcc-flow/engine/internal/startstop"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/internal/tracing"
	"github.com/dcc-flow/dcc-flow/engine/internal/unsaved"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The engine's public vocabulary (tool results and errors, host tool calls, the clock, approvals,
// schedules) is defined in the leaf package engine/flowtype, and the run's (events, statuses,
// error codes) in engine/run. The names below stay here because they are not vocabulary but the
// engine's own machinery, which lives in internal packages.
type (
	// StubClock is a manual clock for tests: time moves only with Advance/Set, and
	// WaitForTimers blocks until the engine has scheduled the wake-ups a test expects. It is an
	// implementation (a timer heap) beside the real clock in engine/internal/clock, not a type
	// callers define values of: they get one from NewStubClock.
	StubClock = clock.Stub
	// Store is the engine's persistence (see WithStore). Its methods read and write the
	// store's record types (runs, steps, attempts, idempotency keys, events, …): moving it to a
	// public package would move the whole store vocabulary with it. Get one from
	// NewMemoryStore, or wrap one to inject faults in tests.
	Store = store.Store
	// StoreBatch is what Store.Write applies atomically (for stores wrapped or written outside
	// engine/, e.g. to inject faults in tests). It holds the store's record types, so it stays
	// with Store.
	StoreBatch = store.Batch
	// Host is the queue host tools are pulled from (Pull, Complete, Cancelled, Report;
	// OpenPuller, Release, ClosePuller): the engine's call queue itself, whose methods are
	// the internal machinery of host tool calls. Its values are flowtype.PendingCall,
	// flowtype.PullRequest and flowtype.ToolReport.
	Host = tools.Host
)

// NewMemoryStore returns an empty in-memory Store. Give it to several engines in turn with
// WithStore to keep records across Close and Open (nothing survives the process).
func NewMemoryStore() Store { return storeopen.Memory() }

// NewStubClock returns a StubClock showing t0.
func NewStubClock(t0 time.Time) *StubClock { return clock.NewStub(t0) }

// Option customises Open, mostly for tests.
type Option func(*options)

type options struct {
	clock   clock.Clock
	source  rand.Source
	remote  tools.RemoteCaller
	store   store.Store
	environ func() []string
}

// WithClock makes the engine use c for every time, timer and sleep (retries, timeouts, TTLs,
// approval timeouts, stall detection, flow__sleep) and for the cron and interval schedules.
func WithClock(c flowtype.Clock) Option { return func(o *options) { o.clock = c } }

// WithRandSource makes retry jitter draw from src instead of a source seeded by Config.Seed.
func WithRandSource(src rand.Source) Option { return func(o *options) { o.source = src } }

// WithRemoteCaller routes tool_remote steps to rc.
func WithRemoteCaller(rc flowtype.RemoteCaller) Option { return func(o *options) { o.remote = rc } }

// WithStore makes the engine keep its records in s instead of opening Config.DB. The engine
// does not close a store given this way.
func WithStore(s Store) Option { return func(o *options) { o.store = s } }

// WithEnviron makes the engine read the environment from fn ("KEY=value" strings) instead of
// os.Environ, everywhere it reads one: {{env.X}}, webhook secrets (secret_env), the bearer
// tokens of remotes (token_env) and the environment of stdio remotes. Go's os.Environ is a copy
// taken when the process started: the C ABI passes a reader of the live C environment, so
// that variables a host sets later (os.environ[...] = ... in a DCC's Python) are seen.
func WithEnviron(fn func() []string) Option { return func(o *options) { o.environ = fn } }

// Engine runs workflows. Create it with Open and release it with Close.
type Engine struct {
	cfg      Config
	clock    clock.Clock
	store    store.Store
	ownStore bool
	router   *tools.Router
	exec     *exec.Executor
	hub      *eventhub.Hub
	resGate  *resgate.Gate // nil when the config declares no resources (resources.go)

	randMu sync.Mutex
	rng    *rand.Rand

	idMu       sync.Mutex // newRunID's last id: its millisecond and low 64 bits
	idLastMS   uint64
	idLastRand uint64

	mu        sync.Mutex
	closed    bool
	closeDone chan struct{}
	runs      map[string]*exec.Run
	// trees are the counts of the trees of runs with a run live here (max_tree_runs,
	// max_tree_instances, max_tree_parallel) and their shape in the store.
	trees   *runtree.Registry
	unsaved unsaved.Runs // ended runs whose terminal record is not stored (unsaved.go)
	wg      sync.WaitGroup
	// starting counts the starts under way (start): Close waits for them before it lists the
	// runs to stop, so that a run whose start began before the close is stopped with the others.
	starting sync.WaitGroup
	catalog  *catalog.Catalog // the registered workflows (catalog.go)

	sched     schedulerState  // see scheduler.go
	retention *retention.Loop // see retention.go
	metrics   metrics.Feed    // see metrics.go
	environ   func() []string // the process environment: WithEnviron's, else os.Environ
	remotes   *remote.Pool    // the MCP clients of Config.Remotes, or nil
	ol        *olEmitter      // the OpenLineage emitter (openlineage.go); never nil once opened
	tracer    *tracing.Tracer // the spans of the runs (tracing.go); nil = tracing off

	// The background services of engine/internal/cluster (cluster.go): started by Open, stopped
	// by Close in reverse once the runs have ended.
	services startstop.Group
	members  *cluster.Membership // the heartbeat and leases on a shared database; nil otherwise
	queue    *cluster.Queue      // the tool-call queue on a shared database; nil otherwise
}

// Open starts an engine. cfg is completed with WithDefaults and validated: a bad config is a
// *run.Error with code invalid_request naming every bad field.
func Open(ctx context.Context, cfg Config, opts ...Option) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock == nil {
		o.clock = clock.New()
	}
	if o.environ == nil {
		o.environ = os.Environ
	}
	if o.source == nil {
		seed := uint64(cfg.Seed)
		if seed == 0 {
			var b [8]byte
			_, _ = crand.Read(b[:])
			seed = binary.LittleEndian.Uint64(b[:])
		}
		o.source = rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	}
	e := &Engine{
		cfg: cfg, clock: o.clock, rng: rand.New(o.source), hub: eventhub.New(), environ: o.environ,
		runs: map[string]*exec.Run{}, closeDone: make(chan struct{}),
	}
	e.retention = e.newRetention()
	switch {
	case o.store != nil:
		e.store = o.store
	case cfg.DB != "":
		st, err := storeopen.Open(ctx, cfg.DB, cfg.ReadOnly)
		if err != nil {
			return nil, err
		}
		e.store, e.ownStore = st, true
	default:
		e.store, e.ownStore = storeopen.Memory(), true
	}
	if o.remote == nil && len(cfg.Remotes) > 0 {
		pool, err := newRemotePool(cfg.Remotes, o.environ, e.poolUnits)
		if err != nil {
			if e.ownStore {
				_ = e.store.Close()
			}
			return nil, err
		}
		e.remotes, o.remote = pool, poolCaller{pool}
	}
	lin, err := openLineage(cfg.OpenLineage, o.environ)
	if err != nil {
		if e.remotes != nil {
			e.remotes.Close()
		}
		if e.ownStore {
			_ = e.store.Close()
		}
		return nil, err
	}
	e.ol = lin
	if e.tracer, err = openTracing(cfg.Tracing, o.environ); err != nil {
		lin.close(ctx)
		if e.remotes != nil {
			e.remotes.Close()
		}
		if e.ownStore {
			_ = e.store.Close()
		}
		return nil, err
	}
	e.trees = runtree.New(e.store, runtree.Limits{MaxRuns: cfg.MaxTreeRuns, MaxInstances: cfg.MaxTreeInstances,
		MaxParallel: cfg.MaxTreeParallel}, notFound)
	e.router = tools.NewRouter(o.clock, o.remote)
	e.router.SetRemoteNames(slices.Collect(maps.Keys(cfg.Remotes)))
	if cfg.InterruptGraceSecs > 0 {
		e.router.Host().SetInterruptGrace(time.Duration(cfg.InterruptGraceSecs * float64(time.Second)))
	}
	var stall time.Duration
	if cfg.StallAfterSecs > 0 {
		stall = time.Duration(cfg.StallAfterSecs * float64(time.Second))
	}
	defaults, _ := cfg.Defaults.specDefaults() // checked by validate
	var onAttemptEnd func(exec.AttemptEnd)
	if lin.em != nil {
		onAttemptEnd = lin.onAttemptEnd
	}
	var gate exec.ResourceGate
	waited := func(resource string, d time.Duration) {
		if m := e.metrics.On(); m != nil {
			m.ResourceWait(resource, d)
		}
	}
	if e.resGate = resgate.New(resgate.Config{Limits: cfg.resourceLimits(), Probes: cfg.probeSpecs(), Warn: probeWarn,
		Store: e.store, Clock: o.clock, Waited: waited}); e.resGate != nil {
		gate = e.resGate
	}
	e.exec = exec.New(exec.Config{
		Store: e.store, Clock: o.clock, Router: e.router, Rand: e.float64, StallAfter: stall,
		OnWrite: e.hub.Notify, Environ: o.environ, Limits: cfg.limits(), PoolFor: exec.PoolRouter(cfg.ToolPools),
		Children:     children{e},
		Defaults:     defaults,
		Env:          cfg.Env,
		OnAttemptEnd: onAttemptEnd, // nil with OpenLineage off
		Tracer:       e.tracer,     // nil with tracing off
		Resources:    gate,
	})
	e.catalog = e.newCatalog()
	if err := e.catalog.Load(ctx); err != nil {
		e.ol.close(ctx)
		e.closeTracing(ctx)
		if e.ownStore {
			_ = e.store.Close()
		}
		return nil, err
	}
	if cfg.ReadOnly {
		return e, nil
	}
	shared, err := e.attach(ctx)
	if err == nil && !shared {
		err = e.recover(ctx)
	}
	if err != nil {
		e.ol.close(ctx)
		e.closeTracing(ctx)
		if e.ownStore {
			_ = e.store.Close()
		}
		return nil, err
	}
	if err := e.startServices(ctx); err != nil {
		e.services.Stop()
		e.ol.close(ctx)
		e.closeTracing(ctx)
		if e.ownStore {
			_ = e.store.Close()
		}
		return nil, err
	}
	return e, nil
}

// Config returns the engine's configuration, defaults applied.
func (e *Engine) Config() Config { return e.cfg }

func (e *Engine) float64() float64 {
	e.randMu.Lock()
	defer e.randMu.Unlock()
	return e.rng.Float64()
}

// Close stops the engine: runs in flight are stopped and become interrupted (not cancelled),
// except, on a shared database, those another live engine can run: they are handed over to it
// and go on there (docs/operations/cluster.md, "Closing an engine"). Blocked Host.Pull calls and event subscriptions return code closed, and the store is closed
// if the engine opened it. It waits for the runs to write their final state, or until ctx
// ends (it then returns context.Cause(ctx)). Closing twice is not an error.
func (e *Engine) Close(ctx context.Context) error {
	closedAlready := func() (bool, error) {
		e.mu.Lock()
		if !e.closed {
			return false, nil // e.mu still held
		}
		e.mu.Unlock()
		select {
		case <-e.closeDone:
			return true, nil
		case <-ctx.Done():
			return true, context.Cause(ctx)
		}
	}
	if done, err := closedAlready(); done {
		return err
	}
	e.mu.Unlock()
	// The scheduler stops first, while the engine still starts runs: a fire in flight that
	// claimed its slot starts its run (stopped or handed over below like any other), where after
	// closed it failed with code closed, and on a shared database the slot's run was lost.
	stopErr := e.StopScheduler(ctx)
	if done, err := closedAlready(); done {
		return err
	}
	e.closed = true // from here every start (Submit, Resume, a child run) fails with code closed
	e.mu.Unlock()
	e.markClosing(ctx) // on a shared database (cluster.go)
	// Started again meanwhile (a StartScheduler beside the Close): stop it.
	if err := e.StopScheduler(ctx); stopErr == nil {
		stopErr = err
	}
	e.StopRetention()
	e.awaitStarts(ctx)
	e.mu.Lock()
	live := make([]*exec.Run, 0, len(e.runs))
	for _, r := range e.runs {
		live = append(live, r)
	}
	e.mu.Unlock()
	handed := e.handOver(ctx, live) // on a shared database: to the other engines (cluster.go)
	for _, r := range live {
		if a := r.Ancestors(); handed[r.ID()] || len(a) > 0 && handed[a[0]] {
			continue // abandoned here; another engine continues it
		}
		r.Stop()
	}
	waited := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(waited)
	}()
	var err error
	select {
	case <-waited:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if err == nil && !e.cfg.ReadOnly {
		e.writeUnsaved(ctx) // a last try for the ends of runs a full disk did not take
	}
	e.services.Stop() // the call queue, the heartbeat (releasing the leases), the control poller
	e.router.Host().Close()
	if e.remotes != nil {
		e.remotes.Close()
	}
	e.hub.Close()
	// The runs have ended: their last events are queued. Sent within openlineage.timeout_secs
	// (or what is left of ctx); the rest is counted as failed (OpenLineageStats).
	e.ol.close(ctx)
	e.closeTracing(ctx) // the runs' last spans, within 5 s
	if e.ownStore && err == nil {
		err = e.store.Close()
	}
	if err == nil {
		err = stopErr
	}
	close(e.closeDone)
	return err
}

// awaitStarts waits, up to the end of ctx, for the starts that began before Close marked the
// engine closed: each either failed or registered its run, which Close then stops (or hands
// over) with the others. A start takes one write.
func (e *Engine) awaitStarts(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		e.starting.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

func errClosed() error { return run.Errorf(run.CodeClosed, "the engine is closed") }

// RegisterTool registers (or replaces) a host tool: a tool whose calls the host process pulls
// from Host() on its lane ("main", the default, or "worker"). MaxConcurrent bounds its calls in
// flight across runs (0 = no limit). Names starting with "flow__" are reserved. Schema and
// OutputSchema, JSON Schema documents, are compiled here and enforced on every call: args that do
// not conform fail the attempt with kind invalid_input before the call (never retried), an output
// that does not conform with kind invalid_output (docs/reference/c-abi/engine.md "dccflow_tool_register"). Resources,
// each a name the engine declares and 1 to its limit, are held by every call of the tool whose
// step does not say its own (docs/guide/resources.md). Errors have code invalid_request (a schema
// that is not one names the tool and its problem; an undeclared resource, with a suggestion).
func (e *Engine) RegisterTool(info flowtype.ToolInfo) error {
	if e.isClosed() {
		return errClosed()
	}
	if err := e.checkToolResources(info); err != nil {
		return err
	}
	if err := e.router.RegisterHost(info); err != nil {
		return err
	}
	e.publishTools()
	e.kickSweep() // runs that need this tool may be taken over now
	return nil
}

// UnregisterTool removes a host tool and reports whether it was registered.
func (e *Engine) UnregisterTool(name string) bool { return e.router.UnregisterHost(name) }

// Tools lists the registered tools (built-in and host), sorted by name.
func (e *Engine) Tools() []flowtype.ToolInfo { return e.router.Tools() }

// Host returns the queue the host process pulls host tool calls from.
func (e *Engine) Host() *Host { return e.router.Host() }

// newRunID returns a new run id: "r" + 12 hex digits of the creation time in milliseconds +
// 16 hex digits, so ids sort by creation time — also within one millisecond (a clock as coarse
// as Windows' often gives two runs the same time): the 16 digits are random for the first id of
// a millisecond and the previous id's plus one for the next ones (as monotonic ULIDs do), and a
// clock that steps back keeps the last millisecond.
func (e *Engine) newRunID() string {
	ms := uint64(e.clock.Now().UnixMilli())
	e.idMu.Lock()
	if ms <= e.idLastMS {
		ms = e.idLastMS
		e.idLastRand++
		if e.idLastRand == 0 { // 2^64 ids in one millisecond: borrow the next one
			ms++
		}
	} else {
		var r [8]byte
		_, _ = crand.Read(r[:])
		e.idLastRand = binary.BigEndian.Uint64(r[:]) >> 1 // room for increments
	}
	e.idLastMS = ms
	rnd := e.idLastRand
	e.idMu.Unlock()
	var b [14]byte
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	binary.BigEndian.PutUint64(b[6:], rnd)
	return "r" + hex.EncodeToString(b[:])
}
