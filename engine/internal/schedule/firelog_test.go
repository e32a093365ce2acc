package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
)

// MemFireLog passes the store's FireLog suite, as the SQLite store does.
func TestMemFireLogContract(t *testing.T) {
	t.Parallel()
	storetest.ExerciseFireLog(t, func(t *testing.T) store.FireLog { return NewMemFireLog(0) })
}

func TestMemFireLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := NewMemFireLog(3)
	if _, ok, _ := l.LastFire(ctx, "a"); ok {
		t.Error("LastFire of an empty log")
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		_ = l.RecordFire(ctx, Fire{ScheduleID: "a", Kind: FireFired, RunID: fmt.Sprint("a", i), DeliveryID: fmt.Sprint("d", i), ScheduledAt: at, FiredAt: at})
		_ = l.RecordFire(ctx, Fire{ScheduleID: "b", Kind: FireSkipped, Reason: ReasonMaxConcurrent, ScheduledAt: at, FiredAt: at})
	}
	last, ok, _ := l.LastFire(ctx, "a")
	if !ok || last.RunID != "a4" {
		t.Errorf("LastFire = %+v", last)
	}
	fs, _ := l.Fires(ctx, "a", 0)
	if len(fs) != 3 || fs[0].RunID != "a4" || fs[2].RunID != "a2" {
		t.Errorf("Fires(a) = %+v; want the newest 3, newest first", fs)
	}
	all, _ := l.Fires(ctx, "", 4)
	if len(all) != 4 || all[0].ScheduleID != "b" || all[1].RunID != "a4" {
		t.Errorf("Fires(all, 4) = %+v", all)
	}
	if f, ok, _ := l.FireByDelivery(ctx, "a", "d4"); !ok || f.RunID != "a4" {
		t.Errorf("FireByDelivery(d4) = %+v, %v", f, ok)
	}
	if _, ok, _ := l.FireByDelivery(ctx, "a", "d0"); ok {
		t.Error("FireByDelivery finds a fire that was dropped")
	}
	if _, ok, _ := l.FireByDelivery(ctx, "b", "d4"); ok {
		t.Error("FireByDelivery crosses schedules")
	}
	b, _ := json.Marshal(fs[0])
	want := `{"schedule_id":"a","kind":"fired","run_id":"a4","origin":"","scheduled_at":"2026-01-01T00:00:00Z","fired_at":"2026-01-01T00:00:00Z","delivery_id":"d4"}`
	if string(b) != want {
		t.Errorf("JSON %s", b)
	}
}

func TestDeliveryCache(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newDeliveryCache(2, time.Minute)
	c.put("a", "r1", now)
	c.put("b", "r2", now)
	if r, ok := c.get("a", now); !ok || r != "r1" { // a is now the most recent
		t.Errorf("get(a) = %q, %v", r, ok)
	}
	c.put("c", "r3", now) // evicts b, the least recently used
	if _, ok := c.get("b", now); ok {
		t.Error("b not evicted")
	}
	if _, ok := c.get("a", now.Add(time.Minute)); ok {
		t.Error("a outlived its TTL")
	}
	if c.len() != 1 {
		t.Errorf("len %d after expiry", c.len())
	}
	c.put("c", "r4", now)
	if r, _ := c.get("c", now); r != "r4" {
		t.Errorf("put over an existing id: %q", r)
	}
}
