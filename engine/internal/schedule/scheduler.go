package schedule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/template"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// DefaultMaxBodyBytes is the default webhook body limit (1 MiB).
const DefaultMaxBodyBytes = 1 << 20

// maxSleep bounds one timer wait of a schedule loop, so that a wall-clock jump (NTP, a laptop
// resumed from sleep) delays a fire by at most this much.
const maxSleep = time.Minute

// ErrStopped is the cancellation cause of the context passed to Starter.Start when the
// scheduler stops (or the schedule is removed) during the call; but the start of a fire that
// claimed its slot (WithSlotClaimer) is not cancelled.
var ErrStopped = errors.New("scheduler stopped")

// Config configures a Scheduler. The zero value is usable.
type Config struct {
	// Schedules are registered by New, validated together (ids and webhook paths unique).
	Schedules []Spec
	// Workflows reports whether a workflow name is in the catalog; nil accepts every name.
	Workflows func(name string) bool
	// MaxBodyBytes limits webhook bodies; larger ones get 413. 0 means DefaultMaxBodyBytes;
	// negative is invalid.
	MaxBodyBytes int64
	// DedupSize is how many delivery ids each webhook schedule remembers; 0 means
	// DefaultDedupSize; negative is invalid.
	DedupSize int
	// DedupTTL is how long a delivery id is remembered; 0 means DefaultDedupTTL; negative is
	// invalid.
	DedupTTL time.Duration
	// LookupEnv reads webhook secrets; nil means os.LookupEnv.
	LookupEnv func(key string) (string, bool)
}

// Option configures a Scheduler beyond its Config.
type Option func(*Scheduler)

// WithClock sets the clock: the engine's (engine.WithClock), so that a stub clock drives cron
// and interval schedules too. nil, or no WithClock, means the real clock.
func WithClock(c clock.Clock) Option {
	return func(s *Scheduler) {
		if c != nil {
			s.clk = c
		}
	}
}

// WithRand sets the random source of cron jitter (default: math/rand/v2's global source). The
// scheduler serialises its calls to r.
func WithRand(r *rand.Rand) Option { return func(s *Scheduler) { s.rnd = r } }

// WithLogger sets the logger for problems that have no caller to return to (a FireLog that
// cannot record). The default discards.
func WithLogger(l *slog.Logger) Option { return func(s *Scheduler) { s.log = l } }

// WithFireObserver calls fn with every fire as it is recorded (fired, skipped or failed), also
// when recording it fails: the engine's metrics count them (docs/operations/metrics.md). fn must not block.
func WithFireObserver(fn func(Fire)) Option { return func(s *Scheduler) { s.onFire = fn } }

// WithSlotClaimer makes the scheduler share its cron and interval fires with the other engines
// that have the same schedules on one database (docs/operations/cluster.md, "Schedules"): each fire is
// claimed with c before its run starts, and a fire another engine claimed is not fired here.
// Intervals are then on the phase of the Unix epoch (every k·every seconds since 1970), so that
// every engine computes the same fire times. A claim that fails (the database is away) skips
// the fire, with a warning: better a missed fire than two.
func WithSlotClaimer(c store.SlotClaimer) Option { return func(s *Scheduler) { s.slots = c } }

// WithAdmitter makes the admission of every fire that depends on what other engines did — a
// webhook with a delivery id, a schedule with max_concurrent — one critical section across the
// engines sharing a's database (docs/operations/cluster.md, "Schedules"): the redelivery check, the
// max_concurrent count (a.ActiveScheduleRuns: the schedule's unfinished runs of every engine,
// instead of Starter.Active), the start and the record of the fire run under a's lock of the
// schedule. A lock that cannot be taken fails the fire (reason status_failed; a webhook gets 500
// start_failed), as a count that fails does.
func WithAdmitter(a store.ScheduleAdmitter) Option { return func(s *Scheduler) { s.admitter = a } }

// WithDeliveryObserver calls fn with every webhook request the handler answers, just before its
// reply is written: the engine's metrics count them by status (docs/operations/metrics.md). fn must not block.
func WithDeliveryObserver(fn func(Delivery)) Option { return func(s *Scheduler) { s.onDelivery = fn } }

// Delivery is one webhook request the handler answered (WithDeliveryObserver).
type Delivery struct {
	// ScheduleID is the schedule of the request's path; "" when no enabled webhook schedule has it.
	ScheduleID string
	// Status is the HTTP status answered: 202 enqueued, 200 duplicate, else an error's.
	Status int
	// Result is "enqueued", "duplicate", or the error code of the reply (the Webhook* constants).
	Result string
}

// Scheduler fires schedules: a loop per enabled cron or interval schedule while started, and
// an http.Handler for webhook schedules. It is safe for concurrent use.
type Scheduler struct {
	cfg     Config
	starter Starter
	fires   FireLog
	clk     clock.Clock
	log     *slog.Logger
	onFire  func(Fire)        // WithFireObserver; nil = none
	slots   store.SlotClaimer // WithSlotClaimer; nil = fires are this scheduler's alone
	// admitter is WithAdmitter's; nil = admissions are this scheduler's alone.
	admitter store.ScheduleAdmitter
	// onDelivery is WithDeliveryObserver's function; nil = none.
	onDelivery func(Delivery)
	randMu     sync.Mutex
	rnd        *rand.Rand

	changeMu sync.Mutex // serialises Schedule and Unschedule (they wait for loops without mu)
	mu       sync.Mutex
	entries  map[string]*entry
	// paths maps the path of every webhook schedule to its id (under mu), for the duplicate check.
	paths map[string]string
	// routes maps the path of every enabled webhook schedule to its entry: read without a lock by
	// the webhook handler, changed one path at a time (registering n schedules costs O(n)).
	routes sync.Map
	// runCtx is the lifetime context of the running loops (like http.Server's BaseContext);
	// nil while stopped.
	runCtx context.Context
	cancel context.CancelCauseFunc
	// loops counts the running loop goroutines, the only goroutines the Scheduler starts.
	loops atomic.Int64
}

// entry is a registered schedule.
type entry struct {
	spec          Spec
	trig          trigger // nil for webhooks
	secret        []byte
	secretMissing bool

	admit      sync.Mutex     // serialises dedup, max_concurrent checks and starts
	deliveries *deliveryCache // webhooks: recent delivery ids → run ids; guarded by admit
	replays    *replayGuard   // signature: timestamped: recent signatures → run ids; guarded by admit
	tolerance  time.Duration  // signature: timestamped: tolerance_secs
	macs       sync.Pool      // webhooks with a secret: HMAC-SHA256 hashes keyed with it

	// Loop state, guarded by Scheduler.mu.
	stop context.CancelCauseFunc
	done chan struct{}
	next time.Time
}

// Info describes a registered schedule.
type Info struct {
	Spec Spec `json:"spec"`
	// NextFire is when the schedule fires next (jitter included once its loop has planned it);
	// zero for webhooks, disabled schedules and schedules that never fire again.
	NextFire time.Time `json:"next_fire,omitzero"`
	// SecretMissing reports a webhook whose secret_env was empty or unset when registered: its
	// requests get 500 webhook_secret_missing.
	SecretMissing bool `json:"secret_missing,omitempty"`
}

// New returns a stopped Scheduler with cfg.Schedules registered. starter is required; fires
// nil means NewMemFireLog(0). Webhook secrets are read from the environment now (and, for
// schedules added later, by Schedule). The error is a *ValidationError for invalid schedules,
// or a *run.Error with code invalid_request for an invalid Config.
func New(cfg Config, starter Starter, fires FireLog, opts ...Option) (*Scheduler, error) {
	if starter == nil {
		return nil, run.Errorf(run.CodeInvalidRequest, "schedule.New: the Starter is nil; pass the engine's Starter")
	}
	switch {
	case cfg.MaxBodyBytes < 0:
		return nil, run.Errorf(run.CodeInvalidRequest, "schedule config: MaxBodyBytes is %d; use 0 for the default (1 MiB) or a positive limit", cfg.MaxBodyBytes)
	case cfg.DedupSize < 0:
		return nil, run.Errorf(run.CodeInvalidRequest, "schedule config: DedupSize is %d; use 0 for the default (%d) or a positive size", cfg.DedupSize, DefaultDedupSize)
	case cfg.DedupTTL < 0:
		return nil, run.Errorf(run.CodeInvalidRequest, "schedule config: DedupTTL is %v; use 0 for the default (24h) or a positive duration", cfg.DedupTTL)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.DedupSize == 0 {
		cfg.DedupSize = DefaultDedupSize
	}
	if cfg.DedupTTL == 0 {
		cfg.DedupTTL = DefaultDedupTTL
	}
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	if fires == nil {
		fires = NewMemFireLog(0)
	}
	s := &Scheduler{cfg: cfg, starter: starter, fires: fires, clk: clock.New(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), entries: map[string]*entry{}, paths: map[string]string{}}
	for _, o := range opts {
		o(s)
	}
	ls := make([]*located, len(cfg.Schedules))
	for i, sp := range cfg.Schedules {
		ls[i] = &located{spec: sp, index: -1, file: sp.Source}
		if sp.Line > 0 {
			ls[i].pos = map[string]pos{"": {line: sp.Line, col: 1}}
		}
	}
	ps, cs := checkSet(ls, cfg.Workflows)
	if len(ps) > 0 {
		return nil, newValidationError(ps)
	}
	for _, c := range cs {
		e := s.newEntry(c)
		s.entries[c.spec.ID] = e
		s.routeLocked(e)
	}
	return s, nil
}

func (s *Scheduler) newEntry(c compiled) *entry {
	e := &entry{spec: c.spec, trig: c.trig}
	if c.spec.Trigger.Kind == KindWebhook {
		e.deliveries = newDeliveryCache(s.cfg.DedupSize, s.cfg.DedupTTL)
		if name := c.spec.Trigger.SecretEnv; name != "" {
			v, _ := s.cfg.LookupEnv(name)
			e.secret, e.secretMissing = []byte(v), v == ""
		}
		if c.spec.Trigger.Signature == SignatureTimestamped {
			e.replays = newReplayGuard()
			e.tolerance = time.Duration(c.spec.Trigger.ToleranceSecs) * time.Second
			if e.tolerance == 0 {
				e.tolerance = DefaultToleranceSecs * time.Second
			}
		}
	}
	return e
}

// routeLocked records the webhook path of e, and routes it when e is enabled. s.mu must be held.
func (s *Scheduler) routeLocked(e *entry) {
	if e.spec.Trigger.Kind != KindWebhook {
		return
	}
	s.paths[e.spec.Trigger.Path] = e.spec.ID
	if e.spec.Enabled {
		s.routes.Store(e.spec.Trigger.Path, e)
	}
}

// unrouteLocked forgets the webhook path of e (if it is still e's). s.mu must be held.
func (s *Scheduler) unrouteLocked(e *entry) {
	if e.spec.Trigger.Kind != KindWebhook {
		return
	}
	p := e.spec.Trigger.Path
	if s.paths[p] == e.spec.ID {
		delete(s.paths, p)
	}
	s.routes.CompareAndDelete(p, e)
}

// Schedule validates spec and registers it, replacing the schedule with the same id (whose
// loop is stopped first). If the scheduler is started, an enabled cron or interval schedule
// starts firing at once. The error is a *ValidationError (a webhook path used by another
// schedule is duplicate_webhook_path).
func (s *Scheduler) Schedule(spec Spec) error {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	return s.scheduleLocked(spec)
}

// SetEnabled enables or disables the schedule id: it is registered again with Enabled set
// (Schedule), so an enabled cron or interval schedule plans its next fire as at Start (an
// interval on the phase of its last fire, catch-up included). Setting the
// state it has does nothing. The error is a *run.Error with code not_found for an unknown id.
func (s *Scheduler) SetEnabled(id string, enabled bool) error {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	e := s.entries[id]
	s.mu.Unlock()
	if e == nil {
		return run.Errorf(run.CodeNotFound, "no schedule %q; Schedules() lists the registered ids", id)
	}
	if e.spec.Enabled == enabled {
		return nil
	}
	spec := e.spec
	spec.Enabled = enabled
	return s.scheduleLocked(spec)
}

// scheduleLocked is Schedule; s.changeMu must be held.
func (s *Scheduler) scheduleLocked(spec Spec) error {
	l := &located{spec: spec, index: -1, file: spec.Source}
	fps, trig := checkSpec(&l.spec, s.cfg.Workflows)
	var ps []Problem
	for _, fp := range fps {
		ps = append(ps, l.problem(fp))
	}
	s.mu.Lock()
	if p := spec.Trigger.Path; spec.Trigger.Kind == KindWebhook && p != "" {
		if other, used := s.paths[p]; used && other != spec.ID {
			ps = append(ps, l.problem(fieldProblem{code: CodeDuplicateWebhookPath, field: "trigger.path",
				msg:  fmt.Sprintf("webhook path %q is already used by schedule %q", p, other),
				hint: "give each webhook schedule its own path, or Unschedule the other one first"}))
		}
	}
	if len(ps) > 0 {
		s.mu.Unlock()
		return newValidationError(ps)
	}
	old := s.entries[spec.ID]
	s.mu.Unlock()
	if old != nil {
		s.stopLoop(old)
	}
	e := s.newEntry(compiled{spec: spec, trig: trig})
	s.mu.Lock()
	defer s.mu.Unlock()
	if old != nil {
		s.unrouteLocked(old)
	}
	s.entries[spec.ID] = e
	s.routeLocked(e)
	if s.runCtx != nil {
		s.startLoopLocked(e)
	}
	return nil
}

// Unschedule removes the schedule id, stopping its loop (and waiting for a fire in progress).
// The error is a *run.Error with code not_found for an unknown id.
func (s *Scheduler) Unschedule(id string) error {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	e := s.entries[id]
	if e == nil {
		s.mu.Unlock()
		return run.Errorf(run.CodeNotFound, "no schedule %q; Schedules() lists the registered ids", id)
	}
	delete(s.entries, id)
	s.unrouteLocked(e)
	s.mu.Unlock()
	s.stopLoop(e)
	return nil
}

// Schedules returns every registered schedule, by id, with its next fire as NextFire says.
func (s *Scheduler) Schedules() []Info {
	s.mu.Lock()
	entries := make([]*entry, 0, len(s.entries))
	for _, e := range s.entries {
		entries = append(entries, e)
	}
	s.mu.Unlock()
	out := make([]Info, 0, len(entries))
	for _, e := range entries {
		out = append(out, Info{Spec: e.spec, NextFire: s.nextFire(e), SecretMissing: e.secretMissing})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.ID < out[j].Spec.ID })
	return out
}

// NextFire returns when schedule id fires next, and false for an unknown id, a webhook, a
// disabled schedule, or one that never fires again. While the scheduler runs it is the time the
// loop waits for (jitter included). While stopped (or before the loop has planned), it is when
// a loop started now would fire, from the fire history as the loop reads it: for an interval,
// the last fire + every (+ k·every, the first such time at or after now), or now + every without
// a fire; for cron, the next matching time after now; now itself when catch-up would fire a
// missed fire at once. Cron jitter is then not included.
func (s *Scheduler) NextFire(id string) (time.Time, bool) {
	s.mu.Lock()
	e := s.entries[id]
	s.mu.Unlock()
	if e == nil {
		return time.Time{}, false
	}
	t := s.nextFire(e)
	return t, !t.IsZero()
}

// nextFire is NextFire of e. It reads the fire history without holding s.mu.
func (s *Scheduler) nextFire(e *entry) time.Time {
	if !e.spec.Enabled || e.trig == nil {
		return time.Time{}
	}
	s.mu.Lock()
	planned, looping := e.next, e.done != nil
	s.mu.Unlock()
	if looping && !planned.IsZero() { // the loop has planned its next fire (jitter included)
		return planned
	}
	now := s.clk.Now()
	last, hasLast, err := s.fires.LastFire(context.Background(), e.spec.ID)
	if err != nil {
		hasLast = false // as the loop does: no history
	}
	missed, next := s.firstPlan(e, now, last, hasLast)
	if !missed.IsZero() {
		return now // the catch-up fire happens as soon as the loop starts
	}
	return next
}

// Start starts a loop for every enabled cron and interval schedule; schedules added later
// start at once. The loops run until Stop is called or ctx ends. Starting a started scheduler
// is an error (code invalid_state).
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runCtx != nil {
		return run.Errorf(run.CodeInvalidState, "the scheduler is already started; call Stop first")
	}
	s.runCtx, s.cancel = context.WithCancelCause(ctx)
	for _, e := range s.entries {
		s.startLoopLocked(e)
	}
	return nil
}

// Started reports whether the loops run: from Start until Stop (which cancels the fires in
// progress, but for those that claimed their slot, in the same step that makes this false).
func (s *Scheduler) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runCtx != nil
}

// Stop stops every loop and waits for them to return (a fire in progress sees its context
// cancelled with cause ErrStopped, unless it claimed its slot on a shared database: that one
// starts its run). If ctx ends first, Stop returns ctx's error and the loops
// finish in the background. Stopping a stopped scheduler does nothing. Webhooks keep being
// served: the handler does not depend on the loops.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.runCtx == nil {
		s.mu.Unlock()
		return nil
	}
	s.cancel(ErrStopped)
	s.runCtx, s.cancel = nil, nil
	var dones []chan struct{}
	for _, e := range s.entries {
		if e.done != nil {
			dones = append(dones, e.done)
		}
	}
	s.mu.Unlock()
	for _, d := range dones {
		select {
		case <-d:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// startLoopLocked starts e's loop if it is an enabled time-based schedule. s.mu must be held
// and the scheduler started.
func (s *Scheduler) startLoopLocked(e *entry) {
	if !e.spec.Enabled || e.trig == nil {
		return
	}
	ctx, cancel := context.WithCancelCause(s.runCtx)
	e.stop, e.done = cancel, make(chan struct{})
	done := e.done
	s.loops.Add(1)
	go func() {
		defer close(done)
		defer s.loops.Add(-1)
		defer func() {
			s.mu.Lock()
			if e.done == done {
				e.stop, e.done, e.next = nil, nil, time.Time{}
			}
			s.mu.Unlock()
		}()
		s.loop(ctx, e)
	}()
}

// stopLoop stops e's loop, if any, and waits for it.
func (s *Scheduler) stopLoop(e *entry) {
	s.mu.Lock()
	stop, done := e.stop, e.done
	e.stop = nil
	s.mu.Unlock()
	if stop != nil {
		stop(ErrStopped)
		<-done
	}
}

// loop fires one cron or interval schedule until ctx ends.
func (s *Scheduler) loop(ctx context.Context, e *entry) {
	now := s.clk.Now()
	last, hasLast, err := s.fires.LastFire(ctx, e.spec.ID)
	if err != nil {
		s.log.Warn("schedule: reading the last fire failed; no catch-up", "schedule_id", e.spec.ID, "error", err)
		hasLast = false
	}
	missed, next := s.firstPlan(e, now, last, hasLast)
	if !missed.IsZero() {
		s.fireScheduled(ctx, e, missed, true)
	}
	for {
		if ctx.Err() != nil {
			return
		}
		planned := next
		if !next.IsZero() {
			planned = next.Add(s.jitter(e))
		}
		s.mu.Lock()
		e.next = planned
		s.mu.Unlock()
		if next.IsZero() {
			<-ctx.Done() // never fires again
			return
		}
		if !s.sleepUntil(ctx, planned) {
			return
		}
		s.fireScheduled(ctx, e, next, false)
		// Fires that fell due while this one was handled are dropped, not queued.
		now := s.clk.Now()
		next = s.nextAfter(e, next, now)
	}
}

// firstPlan is what a loop of e starting at now does first, given the schedule's last recorded
// fire (hasLast false: none, or it could not be read): the missed fire it catches up at once
// (zero for none) and the nominal time of the fire after that (jitter not included; zero when it
// never fires again). An interval keeps the phase of the last fire (last + k·every), or of now
// without one; on a shared database (WithSlotClaimer) the phase of the Unix epoch. A last fire
// in the future (a clock set back) is ignored.
func (s *Scheduler) firstPlan(e *entry, now time.Time, last Fire, hasLast bool) (missed, next time.Time) {
	if hasLast && (last.ScheduledAt.IsZero() || last.ScheduledAt.After(now)) {
		hasLast = false // a clock set back: ignore the history
	}
	base := now.Add(-time.Nanosecond) // a fire due exactly now still fires
	anchor := now                     // interval phase
	if s.slots != nil {
		anchor = time.Unix(0, 0) // the same phase on every engine
		hasLast = hasLast && e.spec.Catchup
	}
	if hasLast {
		anchor = last.ScheduledAt
		if last.ScheduledAt.After(base) {
			base = last.ScheduledAt
		}
		if e.spec.Catchup {
			if m, ok := lastMissed(e.trig, last.ScheduledAt, now); ok {
				missed, base, anchor = m, m, m
			}
		}
	}
	return missed, s.nextAfter(e, anchor, base)
}

// nextAfter returns the first fire time after `after`; for an interval it is on the phase of
// anchor (anchor + k·every, k ≥ 1).
func (s *Scheduler) nextAfter(e *entry, anchor, after time.Time) time.Time {
	if it, ok := e.trig.(intervalTrigger); ok {
		if first := anchor.Add(it.every); first.After(after) {
			return first
		}
		k := after.Sub(anchor)/it.every + 1
		return anchor.Add(k * it.every)
	}
	return e.trig.next(after)
}

// lastMissed returns the latest fire time in (last, now], if any.
func lastMissed(trig trigger, last, now time.Time) (time.Time, bool) {
	if it, ok := trig.(intervalTrigger); ok {
		k := now.Sub(last) / it.every
		if k < 1 {
			return time.Time{}, false
		}
		return last.Add(k * it.every), true
	}
	var missed time.Time
	for t, i := trig.next(last), 0; !t.IsZero() && !t.After(now) && i < maxScan; t, i = trig.next(t), i+1 {
		missed = t
	}
	return missed, !missed.IsZero()
}

// jitter returns a uniform random delay in [0, jitter_secs] for a cron schedule.
func (s *Scheduler) jitter(e *entry) time.Duration {
	j := e.spec.Trigger.JitterSecs
	if e.spec.Trigger.Kind != KindCron || j <= 0 {
		return 0
	}
	n := int64(j)*int64(time.Second) + 1
	if s.rnd == nil {
		return time.Duration(rand.Int64N(n))
	}
	s.randMu.Lock()
	defer s.randMu.Unlock()
	return time.Duration(s.rnd.Int64N(n))
}

// sleepUntil waits until the clock reaches t (in steps of at most maxSleep) and reports
// whether it did before ctx ended.
func (s *Scheduler) sleepUntil(ctx context.Context, t time.Time) bool {
	for {
		d := t.Sub(s.clk.Now())
		if d <= 0 {
			return ctx.Err() == nil
		}
		tm := s.clk.NewTimer(min(d, maxSleep))
		select {
		case <-tm.C():
		case <-ctx.Done():
			tm.Stop()
			return false
		}
	}
}

// fireScheduled handles one cron or interval fire due at scheduled.
func (s *Scheduler) fireScheduled(ctx context.Context, e *entry, scheduled time.Time, catchup bool) {
	firedAt := s.clk.Now()
	trig := map[string]any{
		"kind":         string(e.spec.Trigger.Kind),
		"schedule_id":  e.spec.ID,
		"workflow":     e.spec.Workflow,
		"fired_at":     rfc3339(firedAt),
		"scheduled_at": rfc3339(scheduled),
		"catchup":      catchup,
	}
	f := Fire{ScheduleID: e.spec.ID, Origin: OriginSchedule, ScheduledAt: scheduled, FiredAt: firedAt}
	if catchup {
		f.Reason = ReasonCatchup
	}
	if s.slots != nil {
		won, err := s.slots.ClaimSlot(context.WithoutCancel(ctx), e.spec.ID, scheduled)
		if err != nil {
			s.log.Warn("schedule: claiming a fire failed; not fired", "schedule_id", e.spec.ID, "scheduled_at", scheduled, "error", err)
			return
		}
		if !won {
			return // another engine fires it
		}
		// The slot is this engine's on every engine: its run starts even if the scheduler
		// stops meanwhile (Stop waits for it, bounded by Stop's context; the start's write is
		// bounded by the store's own write timeout, PostgreSQL's 2 minutes), else that slot had
		// no run anywhere (Engine.Close stops the scheduler first; a start cancelled by it
		// failed with "context canceled").
		ctx = context.WithoutCancel(ctx)
	}
	e.admit.Lock()
	defer e.admit.Unlock()
	unlock, err := s.lockShared(ctx, e, false)
	if err != nil {
		s.lockFailed(ctx, f, err)
		return
	}
	defer unlock()
	s.admitLocked(ctx, e, trig, "", f)
}

// lockShared takes the database-wide admission lock of e (WithAdmitter) when its admission
// depends on what other engines did: a max_concurrent count, or a delivery id or timestamped
// signature to check against the shared history (dedup).
// Otherwise, or without an admitter, it takes nothing and returns a no-op unlock.
func (s *Scheduler) lockShared(ctx context.Context, e *entry, dedup bool) (unlock func(), err error) {
	if s.admitter == nil || (!dedup && e.spec.MaxConcurrent <= 0) {
		return func() {}, nil
	}
	defer func() {
		if v := recover(); v != nil {
			unlock, err = nil, fmt.Errorf("the store panicked taking the lock: %v", v)
		}
	}()
	return s.admitter.LockSchedule(context.WithoutCancel(ctx), e.spec.ID)
}

// lockFailed records f as failed because lockShared returned err, and returns its admission.
func (s *Scheduler) lockFailed(ctx context.Context, f Fire, err error) admission {
	f.Kind, f.Reason = FireFailed, ReasonStatusFailed
	f.Message = "taking the schedule's admission lock on the shared database failed: " + err.Error()
	s.record(ctx, f)
	return admission{fire: f, err: err}
}

// admission is the outcome of admitLocked.
type admission struct {
	fire      Fire
	duplicate bool
	inFlight  int   // Active count when skipped
	err       error // Start or Active error when failed
}

// admitLocked starts a run for e unless it is over max_concurrent, and records the fire. f
// carries the fields known by the caller. e.admit must be held.
func (s *Scheduler) admitLocked(ctx context.Context, e *entry, trig map[string]any, deliveryID string, f Fire) admission {
	if e.spec.MaxConcurrent > 0 {
		n, err := s.active(ctx, e.spec.ID)
		switch {
		case err != nil:
			f.Kind, f.Reason, f.Message = FireFailed, ReasonStatusFailed, "counting the active runs failed: "+err.Error()
			s.record(ctx, f)
			return admission{fire: f, err: err}
		case n >= e.spec.MaxConcurrent:
			f.Kind, f.Reason = FireSkipped, ReasonMaxConcurrent
			f.Message = fmt.Sprintf("%d runs active; max_concurrent is %d", n, e.spec.MaxConcurrent)
			s.record(ctx, f)
			return admission{fire: f, inFlight: n}
		}
	}
	inputs, err := renderInputs(e.spec.Inputs, trig)
	var runID string
	written := false // the fire was written with the run (FireWriter)
	if err == nil {
		req := StartRequest{ScheduleID: e.spec.ID, Workflow: e.spec.Workflow,
			Inputs: inputs, Trigger: trig, Origin: f.Origin, DeliveryID: deliveryID}
		runID, written, err = s.start(ctx, req, f)
	}
	if err != nil {
		f.Kind, f.Reason, f.Message = FireFailed, ReasonStartFailed, err.Error()
		s.record(ctx, f)
		return admission{fire: f, err: err}
	}
	f.Kind, f.RunID = FireFired, runID
	if written {
		s.observe(f)
	} else {
		s.record(ctx, f)
	}
	return admission{fire: f}
}

// start starts the run of req, with its fire f written in the same write when the Starter is a
// FireWriter that writes fires (written reports it), else through Starter.Start; a panic
// becomes an error: a bug in the engine must not take down the host process from a scheduler
// goroutine.
func (s *Scheduler) start(ctx context.Context, req StartRequest, f Fire) (runID string, written bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			runID, written, err = "", false, fmt.Errorf("the engine panicked starting the run: %v", v)
		}
	}()
	if fw, ok := s.starter.(FireWriter); ok && fw.WritesFires() {
		f.Kind, f.RunID = FireFired, ""
		runID, err = fw.StartWritingFire(ctx, req, f)
		return runID, err == nil, err
	}
	runID, err = s.starter.Start(ctx, req)
	return runID, false, err
}

// active calls Starter.Active (with an admitter, its ActiveScheduleRuns: the runs of every
// engine), turning a panic into an error.
func (s *Scheduler) active(ctx context.Context, id string) (n int, err error) {
	defer func() {
		if v := recover(); v != nil {
			n, err = 0, fmt.Errorf("the engine panicked counting the active runs: %v", v)
		}
	}()
	if s.admitter != nil {
		return s.admitter.ActiveScheduleRuns(context.WithoutCancel(ctx), id)
	}
	return s.starter.Active(ctx, id)
}

// observe passes f to the fire observer (WithFireObserver), if any.
func (s *Scheduler) observe(f Fire) {
	if s.onFire != nil {
		s.onFire(f)
	}
}

// record passes f to the fire observer and appends it to the fire history.
func (s *Scheduler) record(ctx context.Context, f Fire) {
	s.observe(f)
	if err := s.fires.RecordFire(context.WithoutCancel(ctx), f); err != nil {
		s.log.Warn("schedule: recording a fire failed", "schedule_id", f.ScheduleID, "kind", f.Kind, "run_id", f.RunID, "error", err)
	}
}

// renderInputs renders the {{trigger.…}} templates of inputs; the result is never nil.
func renderInputs(inputs map[string]any, trig map[string]any) (map[string]any, error) {
	if len(inputs) == 0 {
		return map[string]any{}, nil
	}
	doc := map[string]any{"trigger": trig}
	v, err := template.RenderValue(inputs, func(r template.Ref) any { return template.Lookup(doc, r) })
	if err != nil {
		return nil, fmt.Errorf("rendering the inputs: %w", err)
	}
	return v.(map[string]any), nil
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Handler returns the webhook handler (see webhookHandler), with opts (AllowUnsigned). It serves every enabled webhook
// schedule by its exact path, whether or not the loops are started.
func (s *Scheduler) Handler(opts ...HandlerOption) http.Handler {
	h := &webhookHandler{s: s}
	for _, o := range opts {
		if o != nil {
			o(h)
		}
	}
	return h
}

// UnsignedWebhooks returns the ids of the enabled webhook schedules without secret_env, sorted:
// anyone who can reach their server can start their runs.
func (s *Scheduler) UnsignedWebhooks() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, e := range s.entries {
		if e.spec.Trigger.Kind == KindWebhook && e.spec.Enabled && e.spec.Trigger.SecretEnv == "" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}
