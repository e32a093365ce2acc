package schedule

import (
	"context"
	"sync"
)

// Origins of a StartRequest.
const (
	OriginSchedule = "schedule" // a cron or interval fire, including a catch-up fire
	OriginWebhook  = "webhook"  // an accepted webhook request
)

// StartRequest asks the engine to start one run of a workflow for a schedule.
type StartRequest struct {
	ScheduleID string `json:"schedule_id"`
	Workflow   string `json:"workflow"`
	// Inputs are the schedule's inputs with their {{trigger.…}} templates rendered; never nil.
	Inputs map[string]any `json:"inputs"`
	// Trigger is the trigger context, the `trigger` root of the run's templates: kind,
	// schedule_id, workflow, fired_at (RFC 3339, UTC), and scheduled_at and catchup for cron and
	// interval fires, or payload and delivery_id (when the request had one) for webhooks.
	Trigger map[string]any `json:"trigger"`
	// Origin is OriginSchedule or OriginWebhook.
	Origin string `json:"origin"`
	// DeliveryID is the webhook's delivery id (X-GitHub-Delivery or Idempotency-Key), or "".
	DeliveryID string `json:"delivery_id,omitempty"`
}

// Starter is what the scheduler needs from the engine. Implementations must be safe for
// concurrent use; the scheduler never calls Start twice at once for the same schedule.
type Starter interface {
	// Start starts (enqueues) a run of req.Workflow and returns its run id once the run is
	// registered, so that a following Active call counts it. It must not wait for the run to
	// finish. An error is recorded as a failed fire (a webhook gets 500 start_failed).
	Start(ctx context.Context, req StartRequest) (runID string, err error)
	// Active returns how many runs started for scheduleID are not terminal yet. It is called
	// only for schedules with max_concurrent > 0.
	Active(ctx context.Context, scheduleID string) (int, error)
}

// FireWriter is a Starter that can write the fire of a run it starts in the run's own first
// write (store.Batch.Fires): a process killed between two writes would leave a run whose fire
// (its delivery id) the history does not know, and the sender's redelivery would start it again.
// When WritesFires reports true, the scheduler starts each run that fires through
// StartWritingFire, with the fire (Kind FireFired; the run id is the writer's to set), and
// records that fire nowhere else; a fire that starts no run is recorded as before.
type FireWriter interface {
	WritesFires() bool
	StartWritingFire(ctx context.Context, req StartRequest, f Fire) (runID string, err error)
}

// Tracker is a Starter for an engine whose runs do not know their schedule: it starts runs
// through a function and remembers, by schedule, the runs started that may still be executing,
// forgetting those ended (pruned at each Start and Active, so a schedule with max_concurrent 0,
// never asked Active, holds at most its last run). Its methods are safe for concurrent use.
type Tracker struct {
	start func(ctx context.Context, req StartRequest) (string, error)
	ended func(runID string) bool
	// startWritingFire, when set (WriteFiresWith), makes the Tracker a FireWriter.
	startWritingFire func(ctx context.Context, req StartRequest, f Fire) (string, error)

	mu   sync.Mutex
	runs map[string][]string
}

// NewTracker returns a Tracker starting runs with start; ended reports whether a run has
// finished executing.
func NewTracker(start func(ctx context.Context, req StartRequest) (string, error), ended func(runID string) bool) *Tracker {
	return &Tracker{start: start, ended: ended, runs: map[string][]string{}}
}

// WriteFiresWith makes t a FireWriter whose runs that fire start through fn, which writes the
// fire with the run. Call it before the Tracker is used.
func (t *Tracker) WriteFiresWith(fn func(ctx context.Context, req StartRequest, f Fire) (string, error)) {
	t.startWritingFire = fn
}

// Start implements Starter.
func (t *Tracker) Start(ctx context.Context, req StartRequest) (string, error) {
	return t.started(req, func() (string, error) { return t.start(ctx, req) })
}

// WritesFires implements FireWriter: whether WriteFiresWith was given a function.
func (t *Tracker) WritesFires() bool { return t.startWritingFire != nil }

// StartWritingFire implements FireWriter.
func (t *Tracker) StartWritingFire(ctx context.Context, req StartRequest, f Fire) (string, error) {
	return t.started(req, func() (string, error) { return t.startWritingFire(ctx, req, f) })
}

// started runs start and remembers the run it started for req's schedule.
func (t *Tracker) started(req StartRequest, start func() (string, error)) (string, error) {
	id, err := start()
	if err != nil {
		return "", err
	}
	t.mu.Lock()
	t.runs[req.ScheduleID] = append(t.liveLocked(req.ScheduleID), id)
	t.mu.Unlock()
	return id, nil
}

// Active implements Starter: the runs started for scheduleID that have not ended.
func (t *Tracker) Active(_ context.Context, scheduleID string) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.liveLocked(scheduleID)), nil
}

// Held returns how many runs of scheduleID the tracker remembers, ended ones not yet pruned
// included (tests).
func (t *Tracker) Held(scheduleID string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.runs[scheduleID])
}

// liveLocked drops the ended runs from the runs of scheduleID and returns the others. The
// caller holds t.mu.
func (t *Tracker) liveLocked(scheduleID string) []string {
	live := t.runs[scheduleID][:0]
	for _, id := range t.runs[scheduleID] {
		if !t.ended(id) {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		delete(t.runs, scheduleID)
		return nil
	}
	t.runs[scheduleID] = live
	return live
}
