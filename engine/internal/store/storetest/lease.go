package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Shared is a database that several engines share, as ExerciseLeaser and ExerciseCallQueue
// need it (the PostgreSQL store; memcluster in memory).
type Shared[S any] struct {
	// Open returns a new store on the database — one engine's, not attached — closed when the
	// test ends.
	Open func(t *testing.T) S
	// Advance moves the database's clock forward by d: every lease, heartbeat, claim, report
	// and finished call it keeps becomes d older. The suites never sleep: expiry is Advance.
	Advance func(t *testing.T, d time.Duration)
}

// LeaserStore is a store with the Leaser feature.
type LeaserStore interface {
	store.Store
	store.Leaser
}

// suiteLease is the lease of the engines the suites attach: real time passing during a test
// (milliseconds, on PostgreSQL's clock) is nothing beside it.
const suiteLease = time.Minute

// attachAs opens a store of db attached as engine id with lease suiteLease.
func attachAs[S interface {
	store.Leaser
}](t *testing.T, db Shared[S], id string, tools ...string) S {
	t.Helper()
	s := db.Open(t)
	if err := s.Attach(context.Background(), store.EngineInfo{ID: id, Host: "host-" + id, PID: 7, Tools: tools, Lease: suiteLease}); err != nil {
		t.Fatalf("Attach(%s): %v", id, err)
	}
	return s
}

// ExerciseLeaser runs the suite of store.Leaser: newDB returns a new, empty shared database for
// each call. It pins the engines' registry (Attach, Heartbeat, Closing, Detach, Engines), the
// owner and lease of runs and the fence of writes (store.ErrLeaseLost), expiry (Expired), the
// takeover of an expired run (ClaimRun: once among claimers at once, interrupting the run and
// its children), Acquire and the hand-over of Detach.
func ExerciseLeaser(t *testing.T, newDB func(t *testing.T) Shared[LeaserStore]) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, db Shared[LeaserStore])
	}{
		{"EnginesRegistry", testEngines},
		{"OwnerAndFence", testLeaseFence},
		{"HeartbeatAndExpiry", testLeaseExpiry},
		{"ClaimRunTakesOver", testClaimRun},
		{"AcquireAndRelease", testAcquire},
		{"FenceAfterTakeover", testFenceAfterTakeover},
		{"DetachHandsOver", testDetach},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newDB(t))
		})
	}
}

func engineByID(t *testing.T, s store.Leaser) map[string]store.EngineInfo {
	t.Helper()
	es, err := s.Engines(context.Background())
	if err != nil {
		t.Fatalf("Engines: %v", err)
	}
	m := map[string]store.EngineInfo{}
	var ids []string
	for _, e := range es {
		m[e.ID] = e
		ids = append(ids, e.ID)
	}
	if !slices.IsSorted(ids) {
		t.Errorf("Engines listed %v; want them by id", ids)
	}
	return m
}

// testEngines: the methods of an engine need Attach; Engines lists the attached engines with
// what they registered, live while their heartbeat is younger than their lease; a heartbeat
// rewrites the tools, lanes and remotes; Closing is kept by heartbeats; Detach deletes the row;
// the rows of engines silent for ten leases (at least a minute) go when another engine attaches.
func testEngines(t *testing.T, db Shared[LeaserStore]) {
	ctx := context.Background()
	s := db.Open(t)
	if _, err := s.Heartbeat(ctx, store.EngineInfo{ID: "A"}, nil); err == nil {
		t.Error("Heartbeat before Attach succeeded; want an error")
	}
	if _, _, err := s.Acquire(ctx, "r"); err == nil {
		t.Error("Acquire before Attach succeeded; want an error")
	}
	if _, err := s.ClaimRun(ctx, "r", t0, store.Interruption{}); err == nil {
		t.Error("ClaimRun before Attach succeeded; want an error")
	}
	if err := s.Closing(ctx); err == nil {
		t.Error("Closing before Attach succeeded; want an error")
	}
	if err := s.Detach(ctx); err == nil {
		t.Error("Detach before Attach succeeded; want an error")
	}
	for _, bad := range []store.EngineInfo{{Lease: time.Minute}, {ID: "A"}, {ID: "A", Lease: -time.Second}} {
		if err := s.Attach(ctx, bad); err == nil {
			t.Errorf("Attach(%+v) succeeded; want an error (an id and a lease > 0)", bad)
		}
	}
	if es := engineByID(t, s); len(es) != 0 {
		t.Fatalf("Engines after refused Attaches = %+v; want none", es)
	}

	a := attachAs(t, db, "A", "export")
	if _, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A", Tools: []string{"export"}, Lanes: []string{"maya"}, Remotes: []string{"farm"}}, nil); err != nil {
		t.Fatal(err)
	}
	b := db.Open(t)
	if err := b.Attach(ctx, store.EngineInfo{ID: "B", Host: "h2", PID: 9, Tools: []string{"render"}, Lanes: []string{"nuke"},
		Remotes: []string{"pool"}, Lease: 10 * suiteLease}); err != nil {
		t.Fatal(err)
	}
	es := engineByID(t, s)
	gotB := es["B"]
	if len(es) != 2 || gotB.Host != "h2" || gotB.PID != 9 || gotB.Lease != 10*suiteLease || !gotB.Live || gotB.Closing ||
		!reflect.DeepEqual(gotB.Tools, []string{"render"}) || !reflect.DeepEqual(gotB.Lanes, []string{"nuke"}) ||
		!reflect.DeepEqual(gotB.Remotes, []string{"pool"}) || gotB.StartedAt.IsZero() || gotB.HeartbeatAt.Before(gotB.StartedAt) {
		t.Fatalf("Engines = %+v; want A and B, B as it attached, live", es)
	}
	gotA := es["A"]
	if gotA.Host != "host-A" || gotA.PID != 7 || gotA.Lease != suiteLease || !reflect.DeepEqual(gotA.Tools, []string{"export"}) ||
		!reflect.DeepEqual(gotA.Lanes, []string{"maya"}) || !reflect.DeepEqual(gotA.Remotes, []string{"farm"}) {
		t.Fatalf("A = %+v; want its host, pid and lease from Attach, its tools, lanes and remotes from the heartbeat", gotA)
	}
	// A heartbeat rewrites the lists (none is an empty list, not nil).
	if _, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A", Tools: []string{"export", "render"}}, nil); err != nil {
		t.Fatal(err)
	}
	gotA = engineByID(t, s)["A"]
	if !reflect.DeepEqual(gotA.Tools, []string{"export", "render"}) || gotA.Lanes == nil || len(gotA.Lanes) != 0 || gotA.Remotes == nil || len(gotA.Remotes) != 0 {
		t.Fatalf("A after a heartbeat with tools only = %+v; want the new tools and empty lanes and remotes", gotA)
	}

	// A silent for more than its lease is not live; B (a lease ten times longer) is; a beat
	// makes A live again.
	db.Advance(t, suiteLease+time.Second)
	if es := engineByID(t, s); es["A"].Live || !es["B"].Live {
		t.Fatalf("after A's lease: A live %v, B live %v; want false, true", es["A"].Live, es["B"].Live)
	}
	if _, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, nil); err != nil {
		t.Fatal(err)
	}
	if !engineByID(t, s)["A"].Live {
		t.Fatal("A is not live after its heartbeat")
	}

	// Closing is kept by heartbeats; only A's.
	if err := a.Closing(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, nil); err != nil {
		t.Fatal(err)
	}
	if es := engineByID(t, s); !es["A"].Closing || es["B"].Closing {
		t.Fatalf("after A's Closing and a beat: A closing %v, B closing %v; want true, false", es["A"].Closing, es["B"].Closing)
	}
	if err := a.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	if es := engineByID(t, s); len(es) != 1 || es["B"].ID != "B" {
		t.Fatalf("Engines after A detached = %+v; want B", es)
	}
	if _, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, nil); err == nil {
		t.Error("Heartbeat after Detach succeeded; want an error (not attached)")
	}

	// C (lease a minute) is silent for 11 minutes: the next Attach deletes its row (ten leases),
	// not B's (lease 10 minutes: silent for less than ten of them, though not live).
	c := attachAs(t, db, "C")
	db.Advance(t, 11*time.Minute)
	attachAs(t, db, "D")
	if es := engineByID(t, s); len(es) != 2 || es["B"].ID == "" || es["D"].ID == "" || es["B"].Live {
		t.Fatalf("Engines after C was silent for ten leases = %+v; want B (not live) and D", es)
	}
	// C's next beat registers it again, with the host and pid of the beat.
	if _, err := c.Heartbeat(ctx, store.EngineInfo{ID: "C", Host: "h3", PID: 3, Tools: []string{"t"}}, nil); err != nil {
		t.Fatal(err)
	}
	if gotC := engineByID(t, s)["C"]; gotC.Host != "h3" || gotC.PID != 3 || gotC.Lease != suiteLease || !gotC.Live ||
		!reflect.DeepEqual(gotC.Tools, []string{"t"}) {
		t.Fatalf("C after a beat once its row was deleted = %+v; want it registered again, live", gotC)
	}
	// An engine attached again under its id (a restart that kept it) keeps its StartedAt and
	// its Closing mark; the rest is the new Attach's.
	if err := b.Closing(ctx); err != nil {
		t.Fatal(err)
	}
	db.Advance(t, time.Minute)
	b2 := db.Open(t)
	if err := b2.Attach(ctx, store.EngineInfo{ID: "B", Host: "h4", PID: 4, Lease: suiteLease}); err != nil {
		t.Fatal(err)
	}
	after := engineByID(t, s)["B"]
	if after.Host != "h4" || after.PID != 4 || after.Lease != suiteLease || len(after.Tools) != 0 || !after.Closing || !after.Live ||
		after.HeartbeatAt.Sub(after.StartedAt) < time.Minute {
		t.Fatalf("B attached again = %+v; want the new host, pid and lease, its StartedAt (a minute and more ago) and Closing kept", after)
	}
}

// leaseRun is a run of newRun created at t0 plus sec seconds.
func leaseRun(id string, sec int, status run.Status) store.Run {
	r := newRun(id, t0.Add(time.Duration(sec)*time.Second))
	r.Status = status
	if status.Terminal() {
		r.FinishedAt = r.CreatedAt
	}
	return r
}

func leaseStep(runID, key string, status run.StepStatus) store.Step {
	return store.Step{RunID: runID, Key: key, StepID: key, Kind: "tool", Status: status, Attempt: 1,
		StartedAt: t0, UpdatedAt: t0}
}

func holder(t *testing.T, s store.Leaser, id string) string {
	t.Helper()
	h, err := s.Holder(context.Background(), id)
	if err != nil {
		t.Fatalf("Holder(%s): %v", id, err)
	}
	return h
}

func leased(t *testing.T, s store.Leaser, id string) bool {
	t.Helper()
	ok, err := s.Leased(context.Background(), id)
	if err != nil {
		t.Fatalf("Leased(%s): %v", id, err)
	}
	return ok
}

func expiredIDs(t *testing.T, s store.Leaser, limit int) []string {
	t.Helper()
	rs, err := s.Expired(context.Background(), limit)
	if err != nil {
		t.Fatalf("Expired: %v", err)
	}
	ids := []string{}
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids
}

// testLeaseFence: a run belongs to the engine that created it while its lease lasts. Another
// engine sees it as the holder, and its writes to the run — an update, steps, workflow-scoped
// idempotency entries, events, attempts, file records, cache entries — fail whole with ErrLeaseLost; its Acquire and ClaimRun
// fail; the owner writes on.
func testLeaseFence(t *testing.T, db Shared[LeaserStore]) {
	ctx := context.Background()
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	child := leaseRun("rc", 0, run.StatusRunning)
	child.ParentRunID, child.ParentStepKey = "r", "sub"
	write(t, a, &store.Batch{CreateRuns: []store.Run{leaseRun("r", 0, run.StatusRunning), child},
		Steps: []store.Step{leaseStep("r", "done", run.StepCompleted), leaseStep("r", "busy", run.StepRunning)}})
	if h := holder(t, b, "r"); h != "A" {
		t.Fatalf("Holder(r) seen by B = %q; want A", h)
	}
	if h := holder(t, a, "r"); h != "" {
		t.Fatalf("Holder(r) seen by A itself = %q; want \"\"", h)
	}
	if _, err := b.Holder(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Holder of an unknown run: %v; want ErrNotFound", err)
	}
	if !leased(t, b, "r") || !leased(t, a, "rc") {
		t.Fatal("Leased(r), Leased(rc) = false; want true: A holds them")
	}
	if _, err := b.Leased(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Leased of an unknown run: %v; want ErrNotFound", err)
	}
	upd := store.RunUpdate{ID: "r", Status: run.StatusFailed, UpdatedAt: t0, FinishedAt: t0}
	for name, batch := range map[string]*store.Batch{
		"a run update":         {RunUpdates: []store.RunUpdate{upd}},
		"a step":               {Steps: []store.Step{leaseStep("r", "busy", run.StepFailed)}},
		"an event":             {Events: []run.Event{{RunID: "r", Time: t0, Type: run.EventStepEnter, StepKey: "x"}}},
		"an idempotency entry": {Idempotency: []store.IdempotencyEntry{{Scope: "workflow", RunID: "r", Key: "k", Output: json.RawMessage(`1`), CreatedAt: t0}}},
		"an attempt":           {Attempts: []store.Attempt{{RunID: "r", StepKey: "busy", Attempt: 2, Tool: "t", Status: run.StepRunning, StartedAt: t0}}},
		"a file record":        {Files: []store.FileRecord{{RunID: "r", StepKey: "busy", Attempt: 1, Role: store.FileWrite, Path: "/out/x", State: store.FileMissing}}},
		"a cache entry":        {CacheEntries: []store.CacheEntry{{Key: "k", RunID: "r", StepKey: "busy", Attempt: 1, Output: json.RawMessage(`1`), CreatedAt: t0}}},
		"a child's update":     {RunUpdates: []store.RunUpdate{{ID: "rc", Status: run.StatusCompleted, UpdatedAt: t0, FinishedAt: t0}}},
		"a new run and a step of r": {CreateRuns: []store.Run{leaseRun("other", 1, run.StatusRunning)},
			Steps: []store.Step{leaseStep("r", "new", run.StepRunning)}},
	} {
		if err := b.Write(ctx, batch); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("B writing %s of A's run: %v; want ErrLeaseLost", name, err)
		}
	}
	if _, err := b.GetRun(ctx, "other"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the run created in a fenced batch: %v; want it not created (ErrNotFound)", err)
	}
	if rec, _ := b.GetRun(ctx, "r"); rec.Status != run.StatusRunning {
		t.Errorf("r is %s after the fenced writes; want running", rec.Status)
	}
	if steps, _ := b.ListSteps(ctx, "r"); len(steps) != 2 || steps[1].Status != run.StepRunning {
		t.Errorf("r's steps after the fenced writes = %+v; want done and busy (running) unchanged", steps)
	}
	if evs, _ := b.ListEvents(ctx, store.EventFilter{RunID: "r"}); len(evs) != 0 {
		t.Errorf("r's events after the fenced writes = %+v; want none", evs)
	}
	if _, ok, _ := b.GetIdempotency(ctx, "workflow", "r", "k", t0); ok {
		t.Error("a fenced idempotency entry was written")
	}
	if as, ok := any(b).(store.Assets); ok {
		if fs, _ := as.Files(ctx, store.FileFilter{RunID: "r"}); len(fs) != 0 {
			t.Errorf("fenced file records were written: %+v", fs)
		}
		if es, _ := as.ListCache(ctx, store.CacheFilter{RunID: "r"}); len(es) != 0 {
			t.Errorf("fenced cache entries were written: %+v", es)
		}
	}
	// A global idempotency entry belongs to no run: no fence.
	write(t, b, &store.Batch{Idempotency: []store.IdempotencyEntry{{Scope: "global", Key: "g", Output: json.RawMessage(`1`), CreatedAt: t0}}})
	if ok, h, err := b.Acquire(ctx, "r"); ok || h != "A" || err != nil {
		t.Fatalf("B's Acquire of A's live run = %v, %q, %v; want false, A", ok, h, err)
	}
	if ok, err := b.ClaimRun(ctx, "r", t0, store.Interruption{}); ok || err != nil {
		t.Fatalf("B's ClaimRun of A's live run = %v, %v; want false", ok, err)
	}
	write(t, a, &store.Batch{Steps: []store.Step{leaseStep("r", "busy", run.StepCompleted)},
		Events: []run.Event{{RunID: "r", Time: t0, Type: run.EventStepExit, StepKey: "busy"}}})
	if ok, h, err := a.Acquire(ctx, "r"); !ok || h != "" || err != nil {
		t.Fatalf("A's Acquire of its own run = %v, %q, %v; want true", ok, h, err)
	}
}

// testLeaseExpiry: a heartbeat renews the leases of the runs it names that its engine owns and
// that have not finished, and returns them; a lease not renewed for its length expires; Expired
// lists the top-level unfinished runs no live lease holds, oldest first, a paused one only with
// a step in flight; a child run is leased through its parent; a late heartbeat takes back an
// expired run nobody claimed.
func testLeaseExpiry(t *testing.T, db Shared[LeaserStore]) {
	ctx := context.Background()
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	child := leaseRun("rc", 5, run.StatusRunning)
	child.ParentRunID, child.ParentStepKey = "r1", "sub"
	write(t, a, &store.Batch{CreateRuns: []store.Run{leaseRun("r2", 1, run.StatusWaiting), leaseRun("r1", 0, run.StatusRunning),
		leaseRun("p", 2, run.StatusPaused), leaseRun("pf", 3, run.StatusPaused), leaseRun("d", 4, run.StatusCompleted), child,
		leaseRun("r0", 1, run.StatusPending)},
		Steps: []store.Step{leaseStep("p", "s", run.StepCompleted), leaseStep("pf", "s", run.StepWaitingApproval)}})
	if ids := expiredIDs(t, b, 0); len(ids) != 0 {
		t.Fatalf("Expired while A's leases are live = %v; want none", ids)
	}
	db.Advance(t, 40*time.Second)
	owned, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, []string{"r1", "d", "nope", "r2", "r1"})
	slices.Sort(owned)
	if err != nil || !slices.Equal(slices.Compact(owned), []string{"r1", "r2"}) {
		t.Fatalf("Heartbeat(r1, d, nope, r2) = %v, %v; want r1 and r2 (d finished, nope unknown)", owned, err)
	}
	if owned, err := b.Heartbeat(ctx, store.EngineInfo{ID: "B"}, []string{"r0"}); err != nil || len(owned) != 0 {
		t.Fatalf("B's Heartbeat of A's run = %v, %v; want none", owned, err)
	}
	db.Advance(t, 40*time.Second) // 80 s: the leases renewed at 40 s live on, the others expired
	if ids := expiredIDs(t, b, 0); !slices.Equal(ids, []string{"r0", "pf"}) {
		t.Fatalf("Expired = %v; want r0 and pf (r1, r2 renewed; p paused with no step in flight; rc a child run)", ids)
	}
	if h := holder(t, b, "r0"); h != "" {
		t.Fatalf("Holder of an expired run = %q; want \"\"", h)
	}
	if !leased(t, b, "rc") || leased(t, b, "r0") {
		t.Fatal("Leased(rc) false or Leased(r0) true; want the child leased through its parent r1, r0 not leased")
	}
	db.Advance(t, 21*time.Second) // 101 s: every lease expired
	if ids := expiredIDs(t, b, 0); !slices.Equal(ids, []string{"r1", "r0", "r2", "pf"}) {
		t.Fatalf("Expired = %v; want r1, r0, r2, pf (by creation, then id)", ids)
	}
	if ids := expiredIDs(t, b, 2); !slices.Equal(ids, []string{"r1", "r0"}) {
		t.Fatalf("Expired(limit 2) = %v; want r1, r0", ids)
	}
	rs, err := b.Expired(ctx, 1)
	want := leaseRun("r1", 0, run.StatusRunning)
	if err != nil || len(rs) != 1 || rs[0].Name != want.Name || rs[0].Status != want.Status || !rs[0].CreatedAt.Equal(want.CreatedAt) ||
		!jsonEqual(rs[0].SpecJSON, want.SpecJSON) {
		t.Fatalf("Expired(limit 1) = %+v, %v; want r1 with its name, status, spec and creation time", rs, err)
	}
	if leased(t, b, "rc") {
		t.Fatal("Leased(rc) after its parent's lease expired = true")
	}
	// Nobody claimed r1: A's next beat takes it back.
	if owned, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, []string{"r1"}); err != nil || !slices.Equal(owned, []string{"r1"}) {
		t.Fatalf("A's late Heartbeat(r1) = %v, %v; want r1 (nobody claimed it)", owned, err)
	}
	if h := holder(t, b, "r1"); h != "A" {
		t.Fatalf("Holder(r1) after the late beat = %q; want A", h)
	}
	if ids := expiredIDs(t, b, 0); !slices.Equal(ids, []string{"r0", "r2", "pf"}) {
		t.Fatalf("Expired after the late beat = %v; want r0, r2, pf", ids)
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// testClaimRun: of engines claiming an expired run at once, one takes it; in one write it becomes
// the owner with a new lease and interrupts the run and its unfinished child runs (steps in flight
// interrupted, the run interrupted with the interruption's error and an interrupted event with its
// progress as committed); a paused run stays paused. The engine that lost it can no longer write
// it, renew it or acquire it.
func testClaimRun(t *testing.T, db Shared[LeaserStore]) {
	ctx := context.Background()
	a := attachAs(t, db, "A")
	claimers := []LeaserStore{attachAs(t, db, "B"), attachAs(t, db, "C"), attachAs(t, db, "D")}
	child, done := leaseRun("rc", 1, run.StatusRunning), leaseRun("rd", 1, run.StatusCompleted)
	child.ParentRunID, child.ParentStepKey = "r", "sub[0]"
	done.ParentRunID, done.ParentStepKey = "r", "sub[1]"
	write(t, a, &store.Batch{CreateRuns: []store.Run{leaseRun("r", 0, run.StatusRunning), child, done,
		leaseRun("pz", 2, run.StatusPaused), leaseRun("fin", 3, run.StatusCompleted)},
		Steps: []store.Step{leaseStep("r", "done", run.StepCompleted), leaseStep("r", "busy", run.StepRunning),
			leaseStep("r", "retry", run.StepRetrying), leaseStep("r", "gate", run.StepWaitingApproval),
			leaseStep("r", "wait", run.StepPending), leaseStep("r", "skip", run.StepSkipped),
			leaseStep("r", "licence", run.StepWaitingResources),
			leaseStep("rc", "leaf", run.StepRunning), leaseStep("pz", "s", run.StepRunning)},
		Events: []run.Event{{RunID: "r", Time: t0, Type: run.EventStepEnter, StepKey: "busy", Progress: run.Progress{Completed: 2, Total: 10}}}})
	now := t0.Add(time.Hour)
	in := store.Interruption{Error: &store.RunError{Kind: "interrupted", Message: "engine A stopped renewing its lease"},
		Detail: json.RawMessage(`{"taken_over_from":"A"}`)}
	if ok, err := claimers[0].ClaimRun(ctx, "r", now, in); ok || err != nil {
		t.Fatalf("ClaimRun of a live run = %v, %v; want false", ok, err)
	}
	db.Advance(t, suiteLease+time.Second)

	wins := make(chan string, 2*len(claimers))
	var wg sync.WaitGroup
	for i, c := range claimers {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := c.ClaimRun(ctx, "r", now, in)
				if err != nil {
					t.Error(err)
				}
				if ok {
					wins <- string(rune('B' + i))
				}
			}()
		}
	}
	wg.Wait()
	close(wins)
	var winners []string
	for w := range wins {
		winners = append(winners, w)
	}
	if len(winners) != 1 {
		t.Fatalf("%d of 6 concurrent claims of one run succeeded (%v); want 1", len(winners), winners)
	}
	winner := claimers[winners[0][0]-'B']
	if h := holder(t, a, "r"); h != winners[0] {
		t.Fatalf("Holder(r) after the claim = %q; want the winner %s", h, winners[0])
	}

	rec, err := a.GetRun(ctx, "r")
	want := run.Progress{Completed: 7, Total: 10} // done, skip and the 5 interrupted; the event's total
	if err != nil || rec.Status != run.StatusInterrupted || !reflect.DeepEqual(rec.Error, in.Error) ||
		!rec.FinishedAt.Equal(now) || !rec.UpdatedAt.Equal(now) || rec.Progress != want {
		t.Fatalf("claimed run = %+v (error %+v), %v; want interrupted at %v with the interruption's error and progress %+v", rec, rec.Error, err, now, want)
	}
	steps, _ := a.ListSteps(ctx, "r")
	wantSteps := map[string]run.StepStatus{"done": run.StepCompleted, "busy": run.StepInterrupted, "retry": run.StepInterrupted,
		"gate": run.StepInterrupted, "wait": run.StepInterrupted, "skip": run.StepSkipped, "licence": run.StepInterrupted}
	for _, st := range steps {
		if st.Status != wantSteps[st.Key] {
			t.Errorf("step %s is %s after the claim; want %s", st.Key, st.Status, wantSteps[st.Key])
		}
		if st.Status == run.StepInterrupted && (!st.UpdatedAt.Equal(now) || st.Attempt != 1 || !st.StartedAt.Equal(t0)) {
			t.Errorf("interrupted step %s = %+v; want updated at %v, the rest of its row kept", st.Key, st, now)
		}
	}
	evs, _ := a.ListEvents(ctx, store.EventFilter{RunID: "r"})
	if n := len(evs); n != 2 || evs[1].Type != run.EventInterrupted || evs[1].Status != string(run.StatusInterrupted) ||
		!evs[1].Time.Equal(now) || evs[1].Progress != want || !jsonEqual(evs[1].Detail, in.Detail) {
		t.Fatalf("r's events after the claim = %+v; want an interrupted event with the progress and detail last", evs)
	}
	// The unfinished child goes with it (interrupted, leased through its parent); the finished
	// one stays.
	if rc, _ := a.GetRun(ctx, "rc"); rc.Status != run.StatusInterrupted {
		t.Errorf("child rc is %s after its parent's claim; want interrupted", rc.Status)
	}
	if ls, _ := a.ListSteps(ctx, "rc"); len(ls) != 1 || ls[0].Status != run.StepInterrupted {
		t.Errorf("child rc's steps = %+v; want leaf interrupted", ls)
	}
	if evs, _ := a.ListEvents(ctx, store.EventFilter{RunID: "rc"}); len(evs) != 1 || evs[0].Type != run.EventInterrupted {
		t.Errorf("child rc's events = %+v; want one interrupted event", evs)
	}
	if rd, _ := a.GetRun(ctx, "rd"); rd.Status != run.StatusCompleted {
		t.Errorf("finished child rd is %s; want completed", rd.Status)
	}
	if !leased(t, a, "r") || !leased(t, a, "rc") {
		t.Error("Leased(r) or Leased(rc) = false after the claim; want true (the claimer resumes them)")
	}
	// A lost it.
	if err := a.Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusFailed, UpdatedAt: now, FinishedAt: now}}}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("A writing the run it lost: %v; want ErrLeaseLost", err)
	}
	if owned, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, []string{"r"}); err != nil || len(owned) != 0 {
		t.Fatalf("A's Heartbeat of the run it lost = %v, %v; want none", owned, err)
	}
	if ok, h, err := a.Acquire(ctx, "r"); ok || h != winners[0] || err != nil {
		t.Fatalf("A's Acquire of the run it lost = %v, %q, %v; want false, %s", ok, h, err, winners[0])
	}
	// Claims that take nothing: a run claimed (live, interrupted), finished, unknown.
	for _, id := range []string{"r", "fin", "nope"} {
		if ok, err := winner.ClaimRun(ctx, id, now, in); ok || err != nil {
			t.Errorf("ClaimRun(%s) = %v, %v; want false, nil", id, ok, err)
		}
	}
	// The claimer resumes r: its update takes the lease.
	write(t, winner, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusRunning, Progress: want, UpdatedAt: now}}})
	if h := holder(t, a, "r"); h != winners[0] {
		t.Fatalf("Holder(r) after the resume = %q; want %s", h, winners[0])
	}
	// A paused run is claimed with its steps in flight interrupted, and stays paused, without an event.
	if ok, err := winner.ClaimRun(ctx, "pz", now, in); !ok || err != nil {
		t.Fatalf("ClaimRun(pz) = %v, %v; want true", ok, err)
	}
	if pz, _ := a.GetRun(ctx, "pz"); pz.Status != run.StatusPaused {
		t.Errorf("claimed paused run is %s; want paused", pz.Status)
	}
	if ls, _ := a.ListSteps(ctx, "pz"); len(ls) != 1 || ls[0].Status != run.StepInterrupted {
		t.Errorf("claimed paused run's steps = %+v; want s interrupted", ls)
	}
	if evs, _ := a.ListEvents(ctx, store.EventFilter{RunID: "pz"}); len(evs) != 0 {
		t.Errorf("claimed paused run's events = %+v; want none", evs)
	}
	if h := holder(t, a, "pz"); h != winners[0] {
		t.Errorf("Holder(pz) = %q; want %s", h, winners[0])
	}
}

// testAcquire: a terminal update releases the run's lease (its owner stays); any engine then
// acquires it (a resume), and its update takes the lease; an engine acquires its own run again,
// and a run whose lease expired; an unknown run is ErrNotFound.
func testAcquire(t *testing.T, db Shared[LeaserStore]) {
	ctx := context.Background()
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	write(t, a, &store.Batch{CreateRuns: []store.Run{leaseRun("r", 0, run.StatusRunning)}})
	write(t, a, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusFailed, UpdatedAt: t0, FinishedAt: t0}}})
	if h := holder(t, b, "r"); h != "" || leased(t, b, "r") {
		t.Fatalf("a finished run: Holder %q, Leased true; want no lease", h)
	}
	if ids := expiredIDs(t, b, 0); len(ids) != 0 {
		t.Fatalf("Expired = %v; a finished run is never a candidate", ids)
	}
	if ok, h, err := b.Acquire(ctx, "r"); !ok || h != "" || err != nil {
		t.Fatalf("B's Acquire of a finished run = %v, %q, %v; want true", ok, h, err)
	}
	if h := holder(t, a, "r"); h != "B" {
		t.Fatalf("Holder(r) after B's Acquire = %q; want B", h)
	}
	write(t, b, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusRunning, UpdatedAt: t0}}})
	if err := a.Write(ctx, &store.Batch{Steps: []store.Step{leaseStep("r", "s", run.StepRunning)}}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("A writing the run B resumed: %v; want ErrLeaseLost", err)
	}
	if ok, h, err := a.Acquire(ctx, "r"); ok || h != "B" || err != nil {
		t.Fatalf("A's Acquire of B's run = %v, %q, %v; want false, B", ok, h, err)
	}
	if ok, _, err := b.Acquire(ctx, "r"); !ok || err != nil {
		t.Fatalf("B's Acquire of its own run = %v, %v; want true", ok, err)
	}
	if _, _, err := b.Acquire(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Acquire of an unknown run: %v; want ErrNotFound", err)
	}
	db.Advance(t, suiteLease+time.Second)
	if ok, h, err := a.Acquire(ctx, "r"); !ok || h != "" || err != nil {
		t.Fatalf("A's Acquire of B's expired run = %v, %q, %v; want true", ok, h, err)
	}
	write(t, a, &store.Batch{Steps: []store.Step{leaseStep("r", "s", run.StepRunning)}})
}

// testFenceAfterTakeover: an engine whose run another engine took over (ClaimRun, once its own
// lease expired: it was stopped, or cut off) writes nothing of that run again — not while the
// other engine runs it, not once the other engine finished it (its lease released), not once the
// other engine's lease expired too — until it acquires the run again (Acquire: a resume). Its
// run that nobody claimed stays its own. (An engine woken from a SIGSTOP past its lease, whose
// run another engine had taken over and completed meanwhile, ran that run again: the fence
// stopped only a live lease of another engine.)
func testFenceAfterTakeover(t *testing.T, db Shared[LeaserStore]) {
	ctx := context.Background()
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	write(t, a, &store.Batch{CreateRuns: []store.Run{leaseRun("r", 0, run.StatusRunning), leaseRun("mine", 1, run.StatusRunning)}})
	db.Advance(t, suiteLease+time.Second) // A stopped: its leases expire
	if ok, err := b.ClaimRun(ctx, "r", t0, store.Interruption{}); !ok || err != nil {
		t.Fatalf("B's ClaimRun of A's expired run = %v, %v; want true", ok, err)
	}
	write(t, b, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusRunning, UpdatedAt: t0}}})
	// A wakes: what its executor would write next.
	stale := func(when string) {
		t.Helper()
		for name, batch := range map[string]*store.Batch{
			"a run update": {RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusRunning, UpdatedAt: t0}}},
			"a step":       {Steps: []store.Step{leaseStep("r", "a", run.StepRunning)}},
			"an attempt":   {Attempts: []store.Attempt{{RunID: "r", StepKey: "a", Attempt: 1, Tool: "t", Status: run.StepRunning, StartedAt: t0}}},
			"an event":     {Events: []run.Event{{RunID: "r", Time: t0, Type: run.EventStepEnter, StepKey: "a"}}},
		} {
			if err := a.Write(ctx, batch); !errors.Is(err, store.ErrLeaseLost) {
				t.Errorf("%s: A writing %s of the run B took over: %v; want ErrLeaseLost", when, name, err)
			}
		}
	}
	stale("while B runs it")
	write(t, b, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusCompleted, UpdatedAt: t0, FinishedAt: t0}}})
	stale("once B completed it")
	db.Advance(t, suiteLease+time.Second)
	stale("once B's lease expired too")
	if rec, err := b.GetRun(ctx, "r"); err != nil || rec.Status != run.StatusCompleted {
		t.Fatalf("r after A's fenced writes: %s, %v; want completed", rec.Status, err)
	}
	if steps, _ := b.ListSteps(ctx, "r"); len(steps) != 0 {
		t.Fatalf("r's steps after A's fenced writes = %+v; want none", steps)
	}
	// The run nobody claimed is still A's; a resume makes r A's again.
	write(t, a, &store.Batch{Steps: []store.Step{leaseStep("mine", "a", run.StepRunning)}})
	if ok, h, err := a.Acquire(ctx, "r"); !ok || h != "" || err != nil {
		t.Fatalf("A's Acquire of the run B finished = %v, %q, %v; want true", ok, h, err)
	}
	write(t, a, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusRunning, UpdatedAt: t0}},
		Steps: []store.Step{leaseStep("r", "a", run.StepRunning)}})
}

// testDetach: Detach releases the engine's leases at once (its runs are expired and claimable
// without waiting for a lease), deletes its row, and the store writes no owner afterwards.
func testDetach(t *testing.T, db Shared[LeaserStore]) {
	ctx := context.Background()
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	write(t, a, &store.Batch{CreateRuns: []store.Run{leaseRun("r1", 0, run.StatusRunning), leaseRun("r2", 1, run.StatusWaiting),
		leaseRun("f", 2, run.StatusCompleted)}})
	write(t, b, &store.Batch{CreateRuns: []store.Run{leaseRun("rb", 3, run.StatusRunning)}})
	if err := a.Closing(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	if h := holder(t, b, "r1"); h != "" {
		t.Fatalf("Holder(r1) after A detached = %q; want \"\"", h)
	}
	if ids := expiredIDs(t, b, 0); !slices.Equal(ids, []string{"r1", "r2"}) {
		t.Fatalf("Expired after A detached = %v; want r1, r2 at once (not B's rb, not the finished f)", ids)
	}
	if ok, err := b.ClaimRun(ctx, "r1", t0, store.Interruption{}); !ok || err != nil {
		t.Fatalf("ClaimRun of a detached engine's run = %v, %v; want true", ok, err)
	}
	if es := engineByID(t, b); len(es) != 1 || es["B"].ID != "B" {
		t.Fatalf("Engines after A detached = %+v; want B only", es)
	}
	if err := a.Detach(ctx); err == nil {
		t.Error("a second Detach succeeded; want an error (not attached)")
	}
	// Detached, A writes no owner: its new run is nobody's.
	write(t, a, &store.Batch{CreateRuns: []store.Run{leaseRun("x", 4, run.StatusRunning)}})
	if h := holder(t, b, "x"); h != "" || leased(t, b, "x") {
		t.Fatalf("a run written after Detach: Holder %q, leased; want nobody's", h)
	}
	if ids := expiredIDs(t, b, 0); !slices.Equal(ids, []string{"r2", "x"}) {
		t.Fatalf("Expired = %v; want r2 and x", ids)
	}
}
