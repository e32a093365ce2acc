package main

import (
	"context"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
)

// doors are the servers the C ABI started for an engine handle, stopped when it closes.
type doors struct {
	mu       sync.Mutex
	webhooks *engine.WebhookServer
}

var engineDoors sync.Map // handle → *doors

func doorsOf(h uint64) *doors {
	d, _ := engineDoors.LoadOrStore(h, &doors{})
	return d.(*doors)
}

// stopDoors stops every server of handle h (before its engine closes).
func stopDoors(h uint64) {
	v, ok := engineDoors.LoadAndDelete(h)
	if !ok {
		return
	}
	d := v.(*doors)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.webhooks != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = d.webhooks.Close(ctx)
		cancel()
		d.webhooks = nil
	}
}

var opScheduleAdd = withEngine(func(e *engine.Engine, req *engine.ScheduleSpec) (any, error) {
	if err := required("id", req.ID); err != nil {
		return nil, err
	}
	if err := e.Schedule(*req); err != nil {
		return nil, err
	}
	next, _ := e.NextFire(req.ID)
	return map[string]any{"id": req.ID, "next_fire": timeOrNil(next)}, nil
})

type idRequest struct {
	ID string `json:"id"`
}

var opScheduleRemove = withEngine(func(e *engine.Engine, req *idRequest) (any, error) {
	if err := required("id", req.ID); err != nil {
		return nil, err
	}
	return struct{}{}, e.Unschedule(req.ID)
})

type scheduleJSON struct {
	engine.ScheduleSpec
	NextFire      any          `json:"next_fire"`
	SecretMissing bool         `json:"secret_missing,omitempty"`
	LastFire      *engine.Fire `json:"last_fire,omitempty"`
}

var opSchedulesList = withEngine(func(e *engine.Engine, _ *struct{}) (any, error) {
	out := []scheduleJSON{}
	for _, info := range e.Schedules() {
		sj := scheduleJSON{ScheduleSpec: info.Spec, NextFire: timeOrNil(info.NextFire), SecretMissing: info.SecretMissing}
		if fires, err := e.ScheduleFires(context.Background(), info.Spec.ID, 1); err == nil && len(fires) > 0 {
			sj.LastFire = &fires[0]
		}
		out = append(out, sj)
	}
	return map[string]any{"schedules": out}, nil
})

type serveRequest struct {
	Webhooks     *string `json:"webhooks"`
	SchedulesDir string  `json:"schedules_dir"`
	Scheduler    bool    `json:"scheduler"`
}

// opServeStart loads schedules, starts the scheduler and the webhook server as asked:
// {"schedules_dir"?, "scheduler"?: true, "webhooks"?: "127.0.0.1:8787"} →
// {"schedules": n, "webhooks_addr"?: "127.0.0.1:8787"}.
func opServeStart(h uint64, in []byte) (any, error) {
	e, err := engines.get(h)
	if err != nil {
		return nil, err
	}
	var req serveRequest
	if err := decode(in, &req); err != nil {
		return nil, err
	}
	res := map[string]any{}
	if req.SchedulesDir != "" {
		specs, err := e.LoadSchedules(req.SchedulesDir)
		if err != nil {
			return nil, err
		}
		res["schedules"] = len(specs)
	}
	if req.Scheduler || req.SchedulesDir != "" {
		if err := e.StartScheduler(context.Background()); err != nil {
			return nil, err
		}
	}
	if req.Webhooks != nil {
		d := doorsOf(h)
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.webhooks == nil {
			ws, err := e.ServeWebhooks(*req.Webhooks)
			if err != nil {
				return nil, err
			}
			d.webhooks = ws
		}
		res["webhooks_addr"] = d.webhooks.Addr()
	}
	return res, nil
}

// opServeStop stops the servers and the scheduler of an engine (the engine stays open).
func opServeStop(h uint64, _ []byte) (any, error) {
	e, err := engines.get(h)
	if err != nil {
		return nil, err
	}
	stopDoors(h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return struct{}{}, e.StopScheduler(ctx)
}

func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}
