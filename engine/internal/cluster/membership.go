// Package cluster is what an engine does with the other engines on a shared database
// (docs/operations/cluster.md): its membership (the heartbeat that renews its leases, the sweep that takes
// over the runs of dead engines, the hand-over of its runs as it closes), the durable tool-call
// queue through which engines call the tools and remotes only another engine has (and the relay
// of those calls' reports), and the control requests by which a process that does not own a
// run reaches the one that does.
//
// Each part is built from explicit dependencies and a config — the store feature it works
// through, a clock, and a small interface of what it needs from the engine (Local, Router,
// Applier) — never from the engine itself, and each loop reads the injected clock, so that the
// logic is tested on a stub clock without a database server (membership_test.go) while
// tests/go/cluster*_test.go run it end to end on PostgreSQL. The loops are startstop services:
// Engine.Open starts them, Engine.Close stops them in reverse.
package cluster

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/startstop"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Many engines on one database (docs/operations/cluster.md, "Leases"). On a store that several read-write
// engines share (store.Leaser: PostgreSQL) an engine registers itself and orchestrates each run
// under a lease it renews with its heartbeat, every lease/3. When a run's lease expires (its
// engine died, hung, or lost the database for longer than the lease), another engine claims it
// and continues it through the resume path; an engine that finds a run of its own taken over,
// or that could not renew its leases for a whole lease, abandons the run locally: it stops
// orchestrating it and writes nothing more of it.

// SweepBatch bounds how many expired runs one sweep looks at.
const SweepBatch = 100

// Run is a run the engine orchestrates (the executor's *exec.Run).
type Run interface {
	ID() string
	// Done is closed once the run has stopped executing here.
	Done() <-chan struct{}
	// Abandon stops orchestrating the run without writing anything more of it.
	Abandon()
	// Ancestors are the ids of the runs above a child run, the top one first; none for a
	// top-level run.
	Ancestors() []string
	// Paused reports whether the run is paused.
	Paused() bool
	// Hold lets no new step instance of the run start.
	Hold()
	// HostBusy reports whether a host call of the run is in flight, its outcome not written.
	HostBusy() bool
}

// Host is the engine's host-tool queue, as a hand-over uses it (*tools.Host).
type Host interface {
	// Hold hands no call out any more.
	Hold()
	// LetGoOf cancels the calls in flight of the runs given and returns a channel per call,
	// closed once the host let go of it.
	LetGoOf(runs map[string]bool) []<-chan struct{}
	// Reopen wakes the waiting pullers: the leases are fresh again (Fresh).
	Reopen()
}

// Local is what the membership needs from the engine it belongs to.
type Local interface {
	// Executing returns the runs orchestrated here that have not ended, by id.
	Executing() map[string]Run
	// HostedTools returns the host tools registered here and their lanes, sorted.
	HostedTools() (tools, lanes []string)
	// Closed reports whether the engine is closing (no sweep then).
	Closed() bool
	// CanTakeOver reports whether this engine can run r, found with an expired lease: it hosts
	// the tools of r's spec. Asked of runs that are not paused.
	CanTakeOver(r store.Run) bool
	// Resume continues a run this engine claimed (the resume path: no completed step instance
	// runs again); by says who resumed it.
	Resume(ctx context.Context, runID, by string) error
	// CanRunOn reports whether engines with the given host tools and remotes (with the built-in
	// tools every engine has) can run the run runID, all the way down its sub-workflows.
	CanRunOn(ctx context.Context, runID string, tools, remotes map[string]bool) bool
	// Notify wakes the watchers of the event stream: a run changed hands.
	Notify()
}

// Config is a membership's dependencies.
type Config struct {
	Leaser store.Leaser
	Clock  clock.Clock
	// Info is the engine's row: its id, host, pid, lease and remotes (the tools and lanes are
	// read from Local at each beat).
	Info store.EngineInfo
	// Host is the engine's host-tool queue: a hand-over holds it and cancels its calls.
	Host Host
	// CloseGrace bounds how long a hand-over waits for host calls to be answered;
	// InterruptGrace how long it then waits for the host to let go of the calls it cancelled.
	CloseGrace, InterruptGrace time.Duration
	// OnBeat is called after each heartbeat, with a context bounded by two beats (the call
	// queue renews its claims then); nil for none.
	OnBeat func(ctx context.Context)
}

// Membership is an engine's place among the engines of a shared database: its heartbeat, its
// sweeps and takeovers, and its hand-over as it closes. Start runs the heartbeat loop; Stop
// ends it and detaches the engine, releasing its leases.
type Membership struct {
	cfg   Config
	local Local
	every time.Duration // the heartbeat period: the lease / 3

	kick chan struct{} // a sweep soon (Kick)
	loop startstop.Base

	mu        sync.Mutex
	lastRenew time.Time // when the last heartbeat that succeeded was sent
	taken     int       // runs this engine took over
	lost      int       // runs it abandoned
	handed    int       // runs it handed over as it closed
	cut       int       // of those, runs whose host call it cancelled past the close grace
	sweepErr  error     // the last sweep's error, or nil
}

// Stats says what an engine on a shared database did with leases.
type Stats struct {
	TakenOver, Abandoned, HandedOver, HandedOverCancelled int
	LastSweepErr                                          error
}

// NewEngineID returns "HOST-PID-" + 8 random hex digits.
func NewEngineID(host string, pid int) string {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, pid, hex.EncodeToString(b[:]))
}

// Join registers the engine with the shared database (store.Leaser.Attach) and returns its
// membership, not started. cfg.Info.Lease must be positive.
func Join(ctx context.Context, cfg Config, local Local) (*Membership, error) {
	cfg.Info.Tools, cfg.Info.Lanes = local.HostedTools()
	if err := cfg.Leaser.Attach(ctx, cfg.Info); err != nil {
		return nil, err
	}
	return &Membership{cfg: cfg, local: local, every: cfg.Info.Lease / 3, kick: make(chan struct{}, 1),
		lastRenew: cfg.Clock.Now()}, nil
}

// ID is the engine's id in the database (the owner written on the runs it orchestrates).
func (m *Membership) ID() string { return m.cfg.Info.ID }

// Every is the heartbeat period: a third of the lease.
func (m *Membership) Every() time.Duration { return m.every }

// Leaser is the store feature the membership works through.
func (m *Membership) Leaser() store.Leaser { return m.cfg.Leaser }

// CountLost counts a run the engine stopped orchestrating because it lost the run's lease, found
// other than by this membership's heartbeat (a write the store refused): Stats.Abandoned.
func (m *Membership) CountLost() {
	m.mu.Lock()
	m.lost++
	m.mu.Unlock()
}

// Stats returns the membership's figures.
func (m *Membership) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{TakenOver: m.taken, Abandoned: m.lost, HandedOver: m.handed, HandedOverCancelled: m.cut, LastSweepErr: m.sweepErr}
}

// Start starts the heartbeat loop: every lease/3 a heartbeat, OnBeat, then a sweep; a Kick
// sweeps at once.
func (m *Membership) Start(ctx context.Context) error {
	m.loop.Go(ctx, m.run)
	return nil
}

// Stop stops the heartbeat and detaches the engine: the leases of the runs it still holds
// (paused ones) are released, and other engines may claim them at once. Called after the runs
// stopped.
func (m *Membership) Stop() {
	if !m.loop.Running() {
		return
	}
	m.loop.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), m.every)
	defer cancel()
	_ = m.cfg.Leaser.Detach(ctx)
}

// Fresh reports whether the last heartbeat that went through was sent at most a lease ago on
// the engine clock. While it was not (the process was suspended, the database is away), other
// engines may have taken this engine's runs over: the engine's host hands out no call
// (tools.Host.SetGate), and the next beat abandons the runs.
func (m *Membership) Fresh() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg.Clock.Now().Sub(m.lastRenew) <= m.cfg.Info.Lease
}

// Kick asks for a sweep soon (a tool was registered: runs that need it may be taken over).
func (m *Membership) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *Membership) run(ctx context.Context) {
	c := m.cfg.Clock
	next := c.Now().Add(m.every) // beats keep their pace whatever the kicks in between
	for {
		t := c.NewTimer(next.Sub(c.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-m.kick:
			t.Stop()
			m.Sweep(context.WithoutCancel(ctx))
			continue
		case <-t.C():
		}
		m.Heartbeat()
		if m.cfg.OnBeat != nil {
			bctx, cancel := context.WithTimeout(context.Background(), m.every*2)
			m.cfg.OnBeat(bctx)
			cancel()
		}
		// One indexed read per beat: a dead engine's runs are taken over within a third of a
		// lease of their lease expiring.
		m.Sweep(context.WithoutCancel(ctx))
		// As a ticker: the next beat a period after this one was due; when this one ran later
		// than that (a slow database), at once — the claims and leases it renews are due.
		if next = next.Add(m.every); next.Before(c.Now()) {
			next = c.Now()
		}
	}
}

// Publish writes the host tools this engine hosts in its engines row now (not at the next
// heartbeat), so that other engines queue their calls at once. A failure is left to the next
// beat.
func (m *Membership) Publish() {
	info := m.cfg.Info
	info.Tools, info.Lanes = m.local.HostedTools()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = m.cfg.Leaser.Heartbeat(ctx, info, nil)
}

// Heartbeat renews the engine's leases in one round trip and abandons the runs it lost: those
// another engine now holds, or all of them when no renewal went through for a whole lease.
func (m *Membership) Heartbeat() {
	live := m.local.Executing()
	m.mu.Lock()
	stale := m.cfg.Clock.Now().Sub(m.lastRenew) > m.cfg.Info.Lease
	m.mu.Unlock()
	if stale {
		// No renewal went through for a whole lease (the process was suspended, the database
		// away): the leases may have expired and other engines may have taken these runs. Stop
		// them before anything else; the sweep takes back those nobody took.
		for _, h := range live {
			m.abandon(h)
		}
		live = nil
	}
	ids := make([]string, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
	info := m.cfg.Info
	info.Tools, info.Lanes = m.local.HostedTools()
	sent := m.cfg.Clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), m.every*2)
	defer cancel()
	owned, err := m.cfg.Leaser.Heartbeat(ctx, info, ids)
	if err != nil {
		return // the next beat tries again; past a whole lease, it abandons the runs (above)
	}
	m.mu.Lock()
	m.lastRenew = sent
	m.mu.Unlock()
	if stale {
		m.cfg.Host.Reopen() // the host hands out calls again (Fresh)
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
		if holder, err := m.cfg.Leaser.Holder(ctx, id); err == nil && holder != "" {
			m.abandon(h)
		}
	}
}

// abandon stops orchestrating a run whose lease this engine lost, writing nothing more of it.
func (m *Membership) abandon(h Run) {
	if isDone(h.Done()) {
		return
	}
	h.Abandon()
	m.mu.Lock()
	m.lost++
	m.mu.Unlock()
	m.local.Notify()
}

func (m *Membership) setSweepErr(err error) {
	m.mu.Lock()
	m.sweepErr = err
	m.mu.Unlock()
}

// Sweep claims the runs whose lease expired and that this engine can run (it hosts their
// tools), and resumes each: no completed step instance runs again. A paused run is claimed only
// to interrupt its steps in flight; it stays paused until someone unpauses it.
func (m *Membership) Sweep(ctx context.Context) {
	if m.local.Closed() {
		return
	}
	runs, err := m.cfg.Leaser.Expired(ctx, SweepBatch)
	m.setSweepErr(err)
	if err != nil {
		return
	}
	for _, r := range runs {
		if m.local.Closed() {
			return
		}
		if r.Status != run.StatusPaused && !m.local.CanTakeOver(r) {
			continue // an engine that hosts its tools takes it
		}
		detail, _ := json.Marshal(map[string]string{"reason": "its engine closed and handed it over, or stopped renewing its lease", "taken_over_by": m.ID()})
		ok, err := m.cfg.Leaser.ClaimRun(ctx, r.ID, m.cfg.Clock.Now(), store.Interruption{Detail: detail, Error: &store.RunError{Kind: "interrupted",
			Message: fmt.Sprintf("the engine running this run closed and handed it over, or stopped renewing its lease; engine %s took it over", m.ID())}})
		if err != nil {
			m.setSweepErr(err)
			return
		}
		if !ok {
			continue // another engine was quicker
		}
		m.mu.Lock()
		m.taken++
		m.mu.Unlock()
		m.local.Notify()
		if r.Status == run.StatusPaused {
			continue
		}
		if err := m.local.Resume(ctx, r.ID, "engine "+m.ID()+" (takeover)"); err != nil {
			m.setSweepErr(fmt.Errorf("resuming run %s, taken over: %w", r.ID, err))
		}
	}
}

// ClaimOrphan claims runID, an unfinished run no live engine holds, to cancel it: the claim
// interrupts it and its steps in flight. False when another engine holds it or it finished.
func (m *Membership) ClaimOrphan(ctx context.Context, runID string) (bool, error) {
	detail, _ := json.Marshal(map[string]string{"reason": "cancelled while no engine held its lease", "taken_over_by": m.ID()})
	return m.cfg.Leaser.ClaimRun(ctx, runID, m.cfg.Clock.Now(), store.Interruption{Detail: detail,
		Error: &store.RunError{Kind: "interrupted", Message: "the engine running this run stopped renewing its lease"}})
}

// MarkClosing marks the engine closing (store.Leaser.Closing) as Close starts, whether or not
// it runs anything: from then on the other engines do not hand it their runs (its own sweep is
// off). A failure is ignored: the mark only narrows a race.
func (m *Membership) MarkClosing(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, m.every)
	defer cancel()
	_ = m.cfg.Leaser.Closing(ctx)
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
