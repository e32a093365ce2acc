package schedule

import "context"

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
