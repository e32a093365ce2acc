package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/mcpserver"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

// engineEntry is what an engine handle names: the engine and the servers dccflow_serve_start
// started for it. mu orders serve_start, serve_stop, serve_status and engine_close: close marks
// the entry closed and stops its servers under mu, and serve_start starts servers under mu only
// while the entry is open, so no server outlives the engine's handle.
type engineEntry struct {
	e *engine.Engine

	mu       sync.Mutex
	closed   bool // engine_close took the entry; serve_start answers stale_handle
	webhooks *engine.WebhookServer
	mcpHTTP  *mcpserver.HTTPServer
	mcpStdio *stdioDoor
	metrics  *engine.MetricsServer
	ui       *ui.Server
}

// stopServersLocked stops every server of the entry, waiting up to 5 s for each HTTP server's
// requests to end. The caller holds mu.
func (ent *engineEntry) stopServersLocked() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ent.webhooks != nil {
		_ = ent.webhooks.Close(ctx)
		ent.webhooks = nil
	}
	if ent.mcpHTTP != nil {
		_ = ent.mcpHTTP.Close(ctx)
		ent.mcpHTTP = nil
	}
	if ent.ui != nil {
		_ = ent.ui.Close(ctx)
		ent.ui = nil
	}
	if ent.mcpStdio != nil {
		ent.mcpStdio.stop()
		ent.mcpStdio = nil
	}
	if ent.metrics != nil {
		_ = ent.metrics.Close(ctx)
		ent.metrics = nil
	}
}

// handleTable maps the integer handles given to C callers to Go objects. Handles start at 1, are
// never reused within a process, and a closed or unknown handle is an error ("stale_handle"), not
// a crash. Go pointers never cross the boundary.
type handleTable[T any] struct {
	mu   sync.RWMutex
	next uint64
	objs map[uint64]T
}

func newHandleTable[T any]() *handleTable[T] {
	return &handleTable[T]{objs: make(map[uint64]T)}
}

// add stores obj and returns its new handle.
func (t *handleTable[T]) add(obj T) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	t.objs[t.next] = obj
	return t.next
}

// get returns the object of handle h, or a stale_handle error.
func (t *handleTable[T]) get(h uint64) (T, error) {
	t.mu.RLock()
	obj, ok := t.objs[h]
	t.mu.RUnlock()
	if !ok {
		var zero T
		return zero, staleHandle(h)
	}
	return obj, nil
}

// remove forgets handle h and returns its object; ok is false when h was unknown or already
// removed, so closing twice is harmless.
func (t *handleTable[T]) remove(h uint64) (obj T, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	obj, ok = t.objs[h]
	delete(t.objs, h)
	return obj, ok
}

func staleHandle(h uint64) error {
	if h == 0 {
		return &run.Error{Code: run.CodeStaleHandle, Message: "no engine handle was given (handle 0); open an engine first"}
	}
	return &run.Error{Code: run.CodeStaleHandle, Message: fmt.Sprintf("engine handle %d is closed or was never opened", h)}
}
