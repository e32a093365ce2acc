package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Names of the built-in tools.
const (
	// Echo returns its args as its output: {"value": 3} → {"value": 3}. A "file_refs" arg
	// becomes the output's file_refs, so demos and tests can produce artefacts.
	Echo = "flow__echo"
	// Sleep waits {"ms": n} milliseconds on the engine clock and returns {"slept_ms": n}. It
	// honours cancellation unless {"ignore_cancel": true}, which makes it a tool that ignores
	// its context (the router abandons it when the step ends).
	Sleep = "flow__sleep"
	// Fail fails {"times": n} times with {"kind": k} (default "error") and {"message": m},
	// counting per run, step instance and {"key": s}, then succeeds with
	// {"failures": n, "attempt": a}. Without "times" (or with a negative number) it always fails.
	Fail = "flow__fail"
)

func builtins(c clock.Clock) []*route {
	f := &failer{counts: map[string]int{}}
	return []*route{
		{info: ToolInfo{Name: Echo, Builtin: true, Description: "Returns its args as its output.",
			Schema: json.RawMessage(`{"type":"object"}`)}, fn: echo},
		{info: ToolInfo{Name: Sleep, Builtin: true, Description: "Sleeps args.ms milliseconds; args.ignore_cancel makes it ignore cancellation.",
			Schema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"number","minimum":0},"ignore_cancel":{"type":"boolean"}},"required":["ms"]}`)},
			fn: func(ctx context.Context, call Call) (Result, error) { return sleep(ctx, c, call) }, blocking: true},
		{info: ToolInfo{Name: Fail, Builtin: true, Description: "Fails args.times times with args.kind, per run, step and args.key, then succeeds.",
			Schema: json.RawMessage(`{"type":"object","properties":{"times":{"type":"integer"},"kind":{"type":"string"},"message":{"type":"string"},"key":{"type":"string"},"trace":{"type":"string"}}}`)},
			fn: f.call},
	}
}

func echo(_ context.Context, call Call) (Result, error) {
	if call.Args == nil {
		return Result{Output: map[string]any{}}, nil
	}
	return Result{Output: call.Args}, nil
}

func sleep(ctx context.Context, c clock.Clock, call Call) (Result, error) {
	ms, ok := number(call.Args["ms"])
	if !ok || ms < 0 || ms > float64(math.MaxInt64/int64(time.Millisecond)) {
		return Failure(run.KindInvalidInput, fmt.Sprintf("%s: args.ms must be a number of milliseconds ≥ 0; got %v", Sleep, call.Args["ms"])), nil
	}
	d := time.Duration(ms * float64(time.Millisecond))
	t := c.NewTimer(d)
	if ignore, _ := call.Args["ignore_cancel"].(bool); ignore {
		<-t.C()
	} else {
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return Result{}, ctx.Err()
		}
	}
	return Result{Output: map[string]any{"slept_ms": ms}}, nil
}

type failer struct {
	mu     sync.Mutex
	counts map[string]int
}

func (f *failer) call(_ context.Context, call Call) (Result, error) {
	times := -1.0
	if v, present := call.Args["times"]; present {
		n, ok := number(v)
		if !ok || n != math.Trunc(n) {
			return Failure(run.KindInvalidInput, fmt.Sprintf("%s: args.times must be a whole number; got %v", Fail, v)), nil
		}
		times = n
	}
	kind, _ := call.Args["kind"].(string)
	if kind == "" {
		kind = run.KindError
	}
	key, _ := call.Args["key"].(string)
	id := call.RunID + "\x00" + call.StepKey + "\x00" + key
	f.mu.Lock()
	n := f.counts[id]
	fail := times < 0 || float64(n) < times
	if fail {
		f.counts[id] = n + 1
	} else {
		delete(f.counts, id)
	}
	f.mu.Unlock()
	if !fail {
		return Result{Output: map[string]any{"failures": float64(n), "attempt": float64(call.Attempt)}}, nil
	}
	msg, _ := call.Args["message"].(string)
	if msg == "" {
		if times < 0 {
			msg = fmt.Sprintf("%s: failure %d (always fails)", Fail, n+1)
		} else {
			msg = fmt.Sprintf("%s: failure %d of %d", Fail, n+1, int64(times))
		}
	}
	trace, _ := call.Args["trace"].(string)
	return Result{Error: &ToolError{Kind: kind, Message: msg, Trace: trace}}, nil
}

// number reads a JSON number held as float64, json.Number or a Go integer.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, !math.IsNaN(n) && !math.IsInf(n, 0)
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}
