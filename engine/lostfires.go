package engine

import (
	"context"
	"encoding/json"
	"log"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/schedule"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// How far back recordLostFires looks: from lostFireSlack before the newest fire recorded, and
// never past lostFireWindow (the scheduler's own window of deliveries, docs/guide/scheduler.md
// "Redeliveries"), at most maxLostFireRuns runs.
const (
	lostFireSlack   = time.Minute
	lostFireWindow  = 24 * time.Hour
	maxLostFireRuns = 10_000
)

// recordLostFires records the fire of each recent webhook run whose fire the process that started
// it never recorded. A run's start and its fire were two writes (before the store wrote them in
// one, store.Batch.Fires): a process killed between them left a run that the fire history did
// not know, and the sender's redelivery of its delivery id (the first post had no answer) started
// it a second time. This repairs the runs such a process left. Called once, when the scheduler
// starts, before it admits a delivery. Only for a store one engine uses: on a shared database
// another engine's run may be in its first write at this moment. Failures are logged: the
// scheduler starts regardless, as it did before.
func (e *Engine) recordLostFires(ctx context.Context, fires store.FireLog) {
	df, ok := fires.(store.DeliveryFinder)
	if !ok || e.shared() {
		return
	}
	since := e.clock.Now().Add(-lostFireWindow)
	newest, err := fires.Fires(ctx, "", 1)
	if err != nil {
		log.Printf("dcc-flow: looking for webhook runs whose fire was not recorded: %v", err)
		return
	}
	if len(newest) == 1 {
		if t := newest[0].FiredAt.Add(-lostFireSlack); t.After(since) {
			since = t
		}
	}
	runs, err := e.store.ListRuns(ctx, store.RunFilter{Since: since, Limit: maxLostFireRuns})
	if err != nil {
		log.Printf("dcc-flow: looking for webhook runs whose fire was not recorded: %v", err)
		return
	}
	for _, r := range runs {
		if r.Origin != OriginWebhook || len(r.Trigger) == 0 {
			continue
		}
		var trig struct {
			ScheduleID string `json:"schedule_id"`
			DeliveryID string `json:"delivery_id"`
			FiredAt    string `json:"fired_at"`
		}
		if json.Unmarshal(r.Trigger, &trig) != nil || trig.ScheduleID == "" || trig.DeliveryID == "" {
			continue
		}
		if _, found, err := df.FireByDelivery(ctx, trig.ScheduleID, trig.DeliveryID); err != nil || found {
			continue
		}
		at := r.CreatedAt
		if t, err := time.Parse(time.RFC3339Nano, trig.FiredAt); err == nil {
			at = t
		}
		f := store.Fire{ScheduleID: trig.ScheduleID, Kind: store.FireFired, RunID: r.ID, Origin: schedule.OriginWebhook,
			ScheduledAt: at, FiredAt: at, DeliveryID: trig.DeliveryID}
		if err := fires.RecordFire(ctx, f); err != nil {
			log.Printf("dcc-flow: recording the fire of webhook run %s (delivery %s): %v", r.ID, trig.DeliveryID, err)
		}
	}
}
