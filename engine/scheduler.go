package engine

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/schedule"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// ScheduleInfo is a schedule with its next fire time (zero for webhooks and disabled schedules)
// and whether its webhook secret was missing when it was registered.
type ScheduleInfo = schedule.Info

// Fire is one entry of a schedule's fire history: fired (with the run id), skipped (with the
// reason, e.g. max_concurrent) or failed to start.
type Fire = schedule.Fire

// schedulerState is the engine's scheduler, created on first use.
type schedulerState struct {
	mu      sync.Mutex
	s       *schedule.Scheduler
	fires   schedule.FireLog
	running bool
	// runs starts the schedules' runs through Submit and counts those of each schedule that
	// are still executing (max_concurrent).
	runs *schedule.Tracker
}

// scheduler returns the engine's scheduler, creating it on first use. Its fire history is kept
// by the store when the store can (store.FireLog: SQLite), else in memory.
func (e *Engine) scheduler() (*schedule.Scheduler, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	st := &e.sched
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.s != nil {
		return st.s, nil
	}
	fires, ok := e.store.(store.FireLog)
	if !ok {
		fires = schedule.NewMemFireLog(schedule.DefaultFireLogSize)
	} else {
		e.recordLostFires(context.Background(), fires)
	}
	startReq := func(req schedule.StartRequest) StartRequest {
		return StartRequest{Workflow: req.Workflow, Inputs: req.Inputs, Origin: req.Origin, Trigger: req.Trigger}
	}
	st.runs = schedule.NewTracker(func(ctx context.Context, req schedule.StartRequest) (string, error) {
		return e.Submit(ctx, startReq(req))
	}, func(id string) bool { return isDone(e.RunDone(id)) })
	if _, batches := e.store.(store.FireBatcher); batches {
		// The store keeps the fire history beside the runs: a run's fire is written with the
		// run, in one write.
		st.runs.WriteFiresWith(func(ctx context.Context, req schedule.StartRequest, f schedule.Fire) (string, error) {
			return e.submit(ctx, startReq(req), &f)
		})
	}
	opts := []schedule.Option{schedule.WithClock(e.clock), schedule.WithFireObserver(e.observeFire), schedule.WithDeliveryObserver(e.observeDelivery)}
	if sc, ok := fires.(store.SlotClaimer); ok && e.shared() {
		opts = append(opts, schedule.WithSlotClaimer(sc)) // a shared database: each fire once across engines
	}
	if a, ok := fires.(store.ScheduleAdmitter); ok && e.shared() {
		// A shared database: redeliveries and max_concurrent are checked across engines.
		opts = append(opts, schedule.WithAdmitter(a))
	}
	s, err := schedule.New(schedule.Config{Workflows: e.hasWorkflow, LookupEnv: e.lookupEnv}, st.runs, fires, opts...)
	if err != nil {
		return nil, err
	}
	st.s, st.fires = s, fires
	return s, nil
}

// lookupEnv reads a variable of the engine's environment (see WithEnviron): webhook secrets
// are read when a schedule is registered.
func (e *Engine) lookupEnv(key string) (string, bool) {
	for _, kv := range e.environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

func (e *Engine) hasWorkflow(name string) bool {
	_, ok := e.Workflow(name)
	return ok
}

// Schedule adds (or, with the same id, replaces) a schedule. Its workflow must be in the
// catalog (Register). A schedule added while the scheduler runs starts firing at once.
func (e *Engine) Schedule(spec flowtype.ScheduleSpec) error {
	s, err := e.scheduler()
	if err != nil {
		return err
	}
	return s.Schedule(spec)
}

// Unschedule removes a schedule; an unknown id is code not_found.
func (e *Engine) Unschedule(id string) error {
	s, err := e.scheduler()
	if err != nil {
		return err
	}
	return s.Unschedule(id)
}

// Schedules lists the schedules with their next fire times, sorted by id.
func (e *Engine) Schedules() []ScheduleInfo {
	s, err := e.scheduler()
	if err != nil {
		return nil
	}
	return s.Schedules()
}

// LoadSchedules reads every *.schedules.yaml / *.schedules.yml file of dir (not recursive, in
// name order), validates them all against the catalog and adds them. Nothing is added when any
// file has a problem (a *flowtype.ScheduleValidationError lists every one).
func (e *Engine) LoadSchedules(dir string) ([]flowtype.ScheduleSpec, error) {
	s, err := e.scheduler()
	if err != nil {
		return nil, err
	}
	specs, err := schedule.LoadDir(dir, schedule.ParseOptions{Workflows: e.hasWorkflow})
	if err != nil {
		return nil, err
	}
	for _, sp := range specs {
		if err := s.Schedule(sp); err != nil {
			return nil, err
		}
	}
	return specs, nil
}

// StartScheduler starts firing cron and interval schedules (webhooks answer whether or not the
// scheduler was started). Starting twice is not an error. Close stops it.
func (e *Engine) StartScheduler(ctx context.Context) error {
	if e.cfg.ReadOnly {
		return e.errReadOnly("start the scheduler")
	}
	s, err := e.scheduler()
	if err != nil {
		return err
	}
	e.sched.mu.Lock()
	defer e.sched.mu.Unlock()
	if e.sched.running {
		return nil
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	e.sched.running = true
	return nil
}

// StopScheduler stops firing schedules and waits for fires in progress, or until ctx ends.
func (e *Engine) StopScheduler(ctx context.Context) error {
	e.sched.mu.Lock()
	s, running := e.sched.s, e.sched.running
	e.sched.running = false
	e.sched.mu.Unlock()
	if s == nil || !running {
		return nil
	}
	return s.Stop(ctx)
}

// WebhookHandler returns the http.Handler of the webhook schedules (docs/guide/scheduler.md,
// "Webhooks"): mount it so request paths are the schedules' paths. Schedules without
// secret_env answer only requests that arrived on a loopback address, unless opts include
// AllowUnsignedWebhooks.
func (e *Engine) WebhookHandler(opts ...WebhookOption) (http.Handler, error) {
	s, err := e.scheduler()
	if err != nil {
		return nil, err
	}
	return s.Handler(opts...), nil
}

// ScheduleFires returns up to limit fires of scheduleID ("" = every schedule), newest first.
func (e *Engine) ScheduleFires(ctx context.Context, scheduleID string, limit int) ([]Fire, error) {
	if _, err := e.scheduler(); err != nil {
		return nil, err
	}
	return e.sched.fires.Fires(ctx, scheduleID, limit)
}

// NextFire returns when a schedule fires next; false for webhooks, disabled or unknown schedules.
func (e *Engine) NextFire(id string) (time.Time, bool) {
	s, err := e.scheduler()
	if err != nil {
		return time.Time{}, false
	}
	return s.NextFire(id)
}

// SetScheduleEnabled enables or disables the registered schedule id: a disabled schedule is
// listed but never fires and its webhook answers 404 (docs/guide/scheduler.md). The change is held by
// the running engine only: schedules loaded from files come back as their file says when they
// are loaded again. An unknown id is code not_found; setting the state it has does nothing.
func (e *Engine) SetScheduleEnabled(id string, enabled bool) error {
	s, err := e.scheduler()
	if err != nil {
		return err
	}
	return s.SetEnabled(id, enabled)
}
