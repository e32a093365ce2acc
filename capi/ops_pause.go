package main

import (
	"context"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
)

// pauseRequest is the request of dccflow_run_pause and dccflow_run_unpause.
type pauseRequest struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
	By     string `json:"by"`
}

// opRunPause pauses a run: no step starts until it is unpaused (docs/reference/state-machine.md, "Pause").
var opRunPause = withEngine(func(e *engine.Engine, req *pauseRequest) (any, error) {
	if err := required("run_id", req.RunID); err != nil {
		return nil, err
	}
	return struct{}{}, e.Pause(context.Background(), req.RunID, req.Reason, req.By)
})

// opRunUnpause lets a paused run go on (resuming it when no engine runs it).
var opRunUnpause = withEngine(func(e *engine.Engine, req *pauseRequest) (any, error) {
	if err := required("run_id", req.RunID); err != nil {
		return nil, err
	}
	return struct{}{}, e.Unpause(context.Background(), req.RunID, req.Reason, req.By)
})

// pausedPoll is how long calls_next waits, at most, when the run it asks for is paused and no
// engine runs it: the run changes only by an unpause or a cancel.
const pausedPoll = 100 * time.Millisecond
