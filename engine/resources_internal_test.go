package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/resgate"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memcluster"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Two engines on one shared database (memcluster, a stub clock) declare houdini with a limit of
// 1: while a step of engine A holds it, a step of engine B waits — its place in B's queue is
// first, the store refuses it, it says so and asks again on the clock — and it runs once A's
// step has given the unit back. No PostgreSQL, no sleeps on the engines' clock.
func TestResourceLimitHoldsAcrossEngines(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewStub(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC))
	db := memcluster.NewMem(clk)
	cfg := Config{LeaseSecs: 30, StallAfterSecs: -1, Resources: map[string]ResourceConfig{"houdini": {Limit: 1}}}
	open := func() *Engine {
		e, err := Open(ctx, cfg, WithStore(db.Open()), WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeOnStub(ctx, e, clk) })
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "cook", Lane: flowtype.LaneWorker}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := open(), open()
	s, err := spec.ParseString("name: sim\nsteps: [{id: cook, tool: cook, resources: {houdini: 1}}]")
	if err != nil {
		t.Fatal(err)
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	inUse := func(e *Engine) (int, int) {
		info, err := e.Resources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r := info.Resources[0]
		return r.InUse, len(r.Queue)
	}
	pull := func(e *Engine) []flowtype.PendingCall {
		cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 5, Timeout: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	ra, err := a.Submit(ctx, StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	var ca []flowtype.PendingCall
	until("A's call", func() bool { ca = pull(a); return len(ca) == 1 })
	rb, err := b.Submit(ctx, StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	// B's step holds B's local turn and polls the store, which A's unit fills.
	until("B's step to be refused by the store", func() bool {
		info, err := b.Status(ctx, rb)
		if err != nil {
			t.Fatal(err)
		}
		p := info.Steps
		return len(p) == 1 && p[0].Progress != nil && p[0].Progress.Message == "waiting for houdini ×1: first in this engine's queue; other engines hold the units"
	})
	// It is waiting_resources, first in B's queue while another engine holds the units; B's
	// metrics count it as waiting, holding nothing.
	if info, err := b.Status(ctx, rb); err != nil || info.Steps[0].Status != run.StepWaitingResources || info.Steps[0].Waiting == nil ||
		!info.Steps[0].Waiting.OtherEngines || info.Steps[0].Waiting.Place != 1 || info.Steps[0].Waiting.Of != 1 {
		t.Fatalf("B's waiting step: %+v, %v", info, err)
	}
	if g := b.resGate.Gauges(); len(g) != 1 || g[0].InUse != 0 || g[0].Waiting != 1 {
		t.Fatalf("B's gauges %+v; want none in use, one waiting", g)
	}
	for range 5 {
		clk.Advance(resgate.SlotPollMax)
		if cs := pull(b); len(cs) != 0 {
			t.Fatalf("B got a call while A holds the only unit: %+v", cs)
		}
		if n, _ := inUse(b); n != 1 {
			t.Fatalf("in use %d across the engines, want 1 (A's)", n)
		}
	}
	if err := a.Host().Complete(ca[0].ID, flowtype.ToolResult{Output: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Wait(ctx, ra, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var cb []flowtype.PendingCall
	until("B's call once A gave the unit back", func() bool {
		clk.Advance(resgate.SlotPollMax)
		cb = pull(b)
		return len(cb) == 1
	})
	if g := b.resGate.Gauges(); len(g) != 1 || g[0].InUse != 1 || g[0].Waiting != 0 {
		t.Fatalf("B's gauges once its step holds the unit: %+v", g)
	}
	if err := b.Host().Complete(cb[0].ID, flowtype.ToolResult{Output: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Wait(ctx, rb, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	until("every unit given back", func() bool { n, q := inUse(a); return n == 0 && q == 0 })
}

// A holder whose engine stops past its lease (SIGSTOP, a network cut: here its database handle
// fails, so it beats no more) frees its units for the other engines when its lease ends: engine
// B's waiting step (or A's run, which B takes over) gets the one unit; A, back, cannot give it
// back twice, and the units held never pass the limit.
func TestStoppedHolderFreesItsUnitsAfterItsLease(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewStub(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC))
	db := memcluster.NewMem(clk)
	cfg := Config{LeaseSecs: 30, StallAfterSecs: -1, Resources: map[string]ResourceConfig{"houdini": {Limit: 1}}}
	handles := map[*Engine]*memcluster.Store{}
	open := func() *Engine {
		h := db.Open()
		e, err := Open(ctx, cfg, WithStore(h), WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeOnStub(ctx, e, clk) })
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "cook", Lane: flowtype.LaneWorker}); err != nil {
			t.Fatal(err)
		}
		handles[e] = h
		return e
	}
	a, b := open(), open()
	s, err := spec.ParseString("name: sim\nsteps: [{id: cook, tool: cook, resources: {houdini: 1}}]")
	if err != nil {
		t.Fatal(err)
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	inUse := func() int {
		info, err := b.Resources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.Resources[0].InUse
	}
	pull := func(e *Engine) []flowtype.PendingCall {
		cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 5, Timeout: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	if _, err := a.Submit(ctx, StartRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	var ca []flowtype.PendingCall
	until("A's call", func() bool { ca = pull(a); return len(ca) == 1 })
	if _, err := b.Submit(ctx, StartRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(resgate.SlotPollMax)
	if cs := pull(b); len(cs) != 0 || inUse() != 1 {
		t.Fatalf("B got %d calls with A holding the only unit (in use %d)", len(cs), inUse())
	}
	handles[a].Fail(errors.New("engine A is stopped"))
	var cb []flowtype.PendingCall
	until("a call on B once A's lease ended", func() bool {
		clk.Advance(resgate.SlotPollMax)
		if n := inUse(); n > 1 {
			t.Fatalf("%d units in use of a limit of 1", n)
		}
		cb = pull(b)
		return len(cb) == 1
	})
	if clk.Now().Sub(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)) < 30*time.Second {
		t.Fatalf("B got the unit after %v, before A's lease (30 s) ended", clk.Now().Sub(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)))
	}
	// A wakes: its call ends, and its release finds its slot gone.
	handles[a].Fail(nil)
	_ = a.Host().Complete(ca[0].ID, flowtype.ToolResult{Output: 1})
	if n := inUse(); n != 1 {
		t.Fatalf("in use %d after A woke; want B's 1", n)
	}
	if err := b.Host().Complete(cb[0].ID, flowtype.ToolResult{Output: 1}); err != nil {
		t.Fatal(err)
	}
}

// Engines of one database that declare different limits for a name: each takes units only
// while the total is below its own limit, and Resources warns, naming the limits and the one
// that wins (the largest bounds the total).
func TestDifferentLimitsAcrossEnginesWarn(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewStub(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC))
	db := memcluster.NewMem(clk)
	open := func(limit int) *Engine {
		cfg := Config{LeaseSecs: 30, StallAfterSecs: -1, Resources: map[string]ResourceConfig{"houdini": {Limit: limit}}}
		e, err := Open(ctx, cfg, WithStore(db.Open()), WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeOnStub(ctx, e, clk) })
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "cook", Lane: flowtype.LaneWorker}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := open(1), open(2)
	s, err := spec.ParseString("name: sim\nsteps: [{id: cook, tool: cook, resources: {houdini: 1}}]")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Submit(ctx, StartRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	var cs []flowtype.PendingCall
	for deadline := time.Now().Add(10 * time.Second); len(cs) == 0; {
		if cs, err = a.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 1, Timeout: 10 * time.Millisecond}); err != nil || time.Now().After(deadline) {
			t.Fatalf("A's call: %v", err)
		}
	}
	info, err := b.Resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := info.Resources[0]
	if r.InUse != 1 || r.Holders[0].Limit != 1 || !strings.HasPrefix(r.Warning, "engines declare different limits for houdini: 2 here, 1 on ") ||
		!strings.Contains(r.Warning, "so the total never passes 2") {
		t.Fatalf("B's view: %+v", r)
	}
	info, _ = a.Resources(ctx)
	if w := info.Resources[0].Warning; w != "" {
		t.Fatalf("A, whose limit every holder was taken under, warns: %s", w)
	}
	if err := a.Host().Complete(cs[0].ID, flowtype.ToolResult{Output: 1}); err != nil {
		t.Fatal(err)
	}
}

// closeOnStub closes e, whose clock is clk, moving clk on while Close waits: a hand-over waits
// on the engine's clock for host calls whose outcome is still being written (up to the close
// grace), and a stub clock left still would keep that wait, and the test, from ending.
func closeOnStub(ctx context.Context, e *Engine, clk *clock.Stub) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Close(ctx)
	}()
	for {
		select {
		case <-done:
			return
		case <-time.After(time.Millisecond):
			clk.Advance(100 * time.Millisecond)
		}
	}
}

// An engine that does not declare a name takes no units of it (`dcc-flow resources` without
// --resource, beside the engine that runs): holders taken under one limit are no disagreement
// of its; holders taken under two limits still are, and the message names only theirs.
func TestLimitsWarningOfAnEngineThatDoesNotDeclareTheName(t *testing.T) {
	held := func(limits ...int) []store.Slot {
		var out []store.Slot
		for i, l := range limits {
			out = append(out, store.Slot{Resource: "gpu", Amount: 1, Limit: l, Engine: fmt.Sprintf("e%d", i)})
		}
		return out
	}
	if w := limitsWarning("gpu", 0, held(2, 2)); w != "" {
		t.Fatalf("one limit among the holders, none here: %q", w)
	}
	if w := limitsWarning("gpu", 2, held(2, 2)); w != "" {
		t.Fatalf("all agree: %q", w)
	}
	w := limitsWarning("gpu", 0, held(2, 3))
	if !strings.HasPrefix(w, "engines declare different limits for gpu: 2 on e0; 3 on e1; ") || !strings.Contains(w, "never passes 3") {
		t.Fatalf("two limits among the holders: %q", w)
	}
	w = limitsWarning("gpu", 1, held(2))
	if !strings.HasPrefix(w, "engines declare different limits for gpu: 1 here, 2 on e0; ") || !strings.Contains(w, "never passes 2") {
		t.Fatalf("this engine's 1 against a holder's 2: %q", w)
	}
}
