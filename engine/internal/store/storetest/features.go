package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// PrunerStore is a store with the Pruner feature.
type PrunerStore interface {
	store.Store
	store.Pruner
}

// ExercisePruner runs the suite of store.Pruner. newStore must return a new, empty store for
// each call; the suite closes it.
func ExercisePruner(t *testing.T, newStore func(t *testing.T) PrunerStore) {
	t.Helper()
	t.Run("Prune", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		testPrune(t, s)
	})
	t.Run("PruneCandidatesAndRuns", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		testPruneCandidates(t, s)
	})
}

// testPruneCandidates lists what a prune would delete, earliest finish first and bounded by a
// limit, deletes only the listed runs that still qualify, and reports progress.
func testPruneCandidates(t *testing.T, s PrunerStore) {
	ctx := context.Background()
	var runs []store.Run
	for i := range 7 {
		r := newRun(fmt.Sprintf("r%d", i), t0)
		// r0..r5 finished at t0+6m, t0+5m, …, t0+1m (r5 first); r6 runs.
		if i < 6 {
			r.Status, r.FinishedAt = run.StatusCompleted, t0.Add(time.Duration(6-i)*time.Minute)
		}
		if i == 2 {
			r.Status = run.StatusFailed
		}
		runs = append(runs, r)
	}
	write(t, s, &store.Batch{CreateRuns: runs})
	cutoff := t0.Add(time.Hour)
	ids := func(rs []store.Run) []string {
		out := []string{}
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	all, err := s.PruneCandidates(ctx, cutoff, nil, 0)
	if err != nil || !slices.Equal(ids(all), []string{"r5", "r4", "r3", "r2", "r1", "r0"}) {
		t.Fatalf("PruneCandidates = %v, %v; want the 6 finished runs, earliest finish first", ids(all), err)
	}
	if all[3].Status != run.StatusFailed || all[3].Name != "wf" || !all[3].FinishedAt.Equal(t0.Add(4*time.Minute)) {
		t.Errorf("candidate r2 = %+v; want its status, name and finish time", all[3])
	}
	if got, _ := s.PruneCandidates(ctx, cutoff, nil, 2); !slices.Equal(ids(got), []string{"r5", "r4"}) {
		t.Errorf("PruneCandidates(limit 2) = %v; want the 2 earliest", ids(got))
	}
	if got, _ := s.PruneCandidates(ctx, cutoff, []run.Status{run.StatusFailed}, 0); !slices.Equal(ids(got), []string{"r2"}) {
		t.Errorf("PruneCandidates(failed) = %v; want r2", ids(got))
	}
	if got, _ := s.PruneCandidates(ctx, t0.Add(3*time.Minute), nil, 0); !slices.Equal(ids(got), []string{"r5", "r4"}) {
		t.Errorf("PruneCandidates(before t0+3m) = %v; want r5, r4", ids(got))
	}
	if got, _ := s.PruneCandidates(ctx, cutoff, []run.Status{run.StatusRunning}, 0); len(got) != 0 {
		t.Errorf("PruneCandidates(running) = %v; a run that has not finished is never a candidate", ids(got))
	}
	// r6 is running and r3 is resumed after being listed: neither goes; nope is unknown.
	write(t, s, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r3", Status: run.StatusRunning, UpdatedAt: t0.Add(time.Hour)}}})
	var reported []int
	n, err := s.PruneRuns(ctx, []string{"r5", "r4", "r3", "r6", "nope"}, cutoff, nil, func(d int) { reported = append(reported, d) })
	if err != nil || n != 2 {
		t.Fatalf("PruneRuns = %d, %v; want 2 (r5, r4: r3 was resumed, r6 runs, nope is unknown)", n, err)
	}
	if len(reported) == 0 || reported[len(reported)-1] != 2 {
		t.Errorf("progress reported %v; want it to end at 2", reported)
	}
	left, _ := s.ListRuns(ctx, store.RunFilter{})
	if got := ids(left); len(got) != 5 || slices.Contains(got, "r5") || slices.Contains(got, "r4") {
		t.Errorf("runs left = %v; want r0, r1, r2, r3, r6", got)
	}
	if n, err := s.PruneRuns(ctx, []string{"r2"}, cutoff, []run.Status{run.StatusCompleted}, nil); err != nil || n != 0 {
		t.Errorf("PruneRuns(r2, completed only) = %d, %v; want 0: r2 failed", n, err)
	}
}

// ExerciseController runs the suite of store.Controller. newStore must return a new, empty
// store for each call (the suite does not close it: close it in t.Cleanup). It files requests
// in one store and answers them through the same store; a store shared between processes
// should also be tested across two handles of one database (see the SQLite store's tests).
func ExerciseController(t *testing.T, newStore func(t *testing.T) store.Controller) {
	t.Helper()
	t.Run("ControlRequestsRoundTrip", func(t *testing.T) {
		t.Parallel()
		testControl(t, newStore(t))
	})
}

func testControl(t *testing.T, c store.Controller) {
	ctx := context.Background()
	if p, err := c.PendingControl(ctx); err != nil || len(p) != 0 {
		t.Fatalf("PendingControl of an empty store = %+v, %v", p, err)
	}
	if _, err := c.RequestControl(ctx, store.ControlRequest{RunID: "r1", Action: "delete", CreatedAt: t0}); err == nil {
		t.Fatal(`RequestControl accepted action "delete"; only approve, cancel, pause and unpause are actions`)
	}
	approve := store.ControlRequest{RunID: "r1", Action: "approve", StepKey: "gate", Approved: true, Reason: "looks good", By: "ana", CreatedAt: t0}
	cancel := store.ControlRequest{RunID: "r2", Action: "cancel", Reason: "wrong shot", CreatedAt: t0.Add(time.Second)}
	id1, err := c.RequestControl(ctx, approve)
	if err != nil || id1 <= 0 {
		t.Fatalf("RequestControl(approve) = %d, %v", id1, err)
	}
	id2, err := c.RequestControl(ctx, cancel)
	if err != nil || id2 <= 0 || id2 == id1 {
		t.Fatalf("RequestControl(cancel) = %d, %v (first id %d)", id2, err, id1)
	}
	pending, err := c.PendingControl(ctx)
	if err != nil || len(pending) != 2 {
		t.Fatalf("PendingControl = %+v, %v; want the 2 requests (and not the refused one)", pending, err)
	}
	approve.ID, cancel.ID = id1, id2
	for i, want := range []store.ControlRequest{approve, cancel} { // oldest first
		got := pending[i]
		if !got.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("pending[%d].CreatedAt = %v; want %v", i, got.CreatedAt, want.CreatedAt)
		}
		got.CreatedAt = want.CreatedAt
		if !reflect.DeepEqual(got, want) {
			t.Errorf("pending[%d] = %+v; want %+v", i, got, want)
		}
	}
	if a, err := c.ControlAnswer(ctx, id1); err != nil || a.Handled {
		t.Fatalf("ControlAnswer of a pending request = %+v, %v; want not handled", a, err)
	}
	if err := c.AnswerControl(ctx, id1, t0.Add(2*time.Second), "", ""); err != nil {
		t.Fatal(err)
	}
	if err := c.AnswerControl(ctx, id2, t0.Add(2*time.Second), run.CodeNotFound, "no run with id r2"); err != nil {
		t.Fatal(err)
	}
	if a, err := c.ControlAnswer(ctx, id1); err != nil || a != (store.ControlAnswer{Handled: true}) {
		t.Errorf("answer to the approval = %+v, %v; want handled without error", a, err)
	}
	if a, err := c.ControlAnswer(ctx, id2); err != nil || a != (store.ControlAnswer{Handled: true, ErrorCode: run.CodeNotFound, Error: "no run with id r2"}) {
		t.Errorf("answer to the cancel = %+v, %v; want handled with not_found", a, err)
	}
	if p, err := c.PendingControl(ctx); err != nil || len(p) != 0 {
		t.Errorf("PendingControl after answering both = %+v, %v", p, err)
	}
	// pause and unpause carry their reason and who asked.
	for i, action := range []string{"pause", "unpause"} {
		req := store.ControlRequest{RunID: "r3", Action: action, Reason: "render farm full", By: "ana", CreatedAt: t0.Add(time.Duration(3+i) * time.Second)}
		id, err := c.RequestControl(ctx, req)
		if err != nil || id <= 0 {
			t.Fatalf("RequestControl(%s) = %d, %v", action, id, err)
		}
		pending, err := c.PendingControl(ctx)
		if err != nil || len(pending) != 1 {
			t.Fatalf("PendingControl after a %s request = %+v, %v", action, pending, err)
		}
		req.ID = id
		got := pending[0]
		got.CreatedAt = req.CreatedAt
		if !reflect.DeepEqual(got, req) {
			t.Errorf("pending %s = %+v; want %+v", action, got, req)
		}
		if err := c.AnswerControl(ctx, id, t0.Add(10*time.Second), "", ""); err != nil {
			t.Fatal(err)
		}
	}
}

// ExerciseFireLog runs the suite of store.FireLog (and of store.DeliveryFinder and
// store.ReplayFinder when the log has them). newLog must return a new, empty log for each call, keeping at least 10 fires per
// schedule (the suite does not close it: close it in t.Cleanup).
func ExerciseFireLog(t *testing.T, newLog func(t *testing.T) store.FireLog) {
	t.Helper()
	t.Run("FiresRoundTrip", func(t *testing.T) {
		t.Parallel()
		testFireLog(t, newLog(t))
	})
}

func testFireLog(t *testing.T, l store.FireLog) {
	ctx := context.Background()
	if _, ok, err := l.LastFire(ctx, "nightly"); ok || err != nil {
		t.Fatalf("LastFire of an empty log = %v, %v", ok, err)
	}
	if fs, err := l.Fires(ctx, "", 0); err != nil || len(fs) != 0 {
		t.Fatalf("Fires of an empty log = %+v, %v", fs, err)
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	fires := []store.Fire{
		{ScheduleID: "nightly", Kind: store.FireFired, RunID: "r1", Origin: "schedule", ScheduledAt: at(0), FiredAt: at(1)},
		{ScheduleID: "hook", Kind: store.FireFired, RunID: "r2", Origin: "webhook", ScheduledAt: at(2), FiredAt: at(2), DeliveryID: "d1"},
		{ScheduleID: "nightly", Kind: store.FireSkipped, Reason: "max_concurrent", Message: "1 runs active; max_concurrent is 1",
			Origin: "schedule", ScheduledAt: at(3), FiredAt: at(3)},
		{ScheduleID: "hook", Kind: store.FireFailed, Reason: "start_failed", Message: "boom", Origin: "webhook",
			ScheduledAt: at(4), FiredAt: at(4), DeliveryID: "d2"},
		{ScheduleID: "nightly", Kind: store.FireFired, Reason: "catchup", RunID: "r3", Origin: "schedule", ScheduledAt: at(5), FiredAt: at(6)},
	}
	for _, f := range fires {
		if err := l.RecordFire(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	same := func(what string, got, want []store.Fire) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: %d fires %+v; want %d", what, len(got), got, len(want))
			return
		}
		for i := range got {
			g, w := got[i], want[i]
			if !g.ScheduledAt.Equal(w.ScheduledAt) || !g.FiredAt.Equal(w.FiredAt) {
				t.Errorf("%s[%d] times %v %v; want %v %v", what, i, g.ScheduledAt, g.FiredAt, w.ScheduledAt, w.FiredAt)
			}
			g.ScheduledAt, g.FiredAt = w.ScheduledAt, w.FiredAt
			if g != w {
				t.Errorf("%s[%d] = %+v; want %+v", what, i, g, w)
			}
		}
	}
	same("Fires(all)", mustFires(t, l, "", 0), []store.Fire{fires[4], fires[3], fires[2], fires[1], fires[0]})
	same("Fires(nightly)", mustFires(t, l, "nightly", 0), []store.Fire{fires[4], fires[2], fires[0]})
	same("Fires(nightly, 2)", mustFires(t, l, "nightly", 2), []store.Fire{fires[4], fires[2]})
	same("Fires(all, 1)", mustFires(t, l, "", 1), []store.Fire{fires[4]})
	same("Fires(unknown)", mustFires(t, l, "nope", 0), nil)
	last, ok, err := l.LastFire(ctx, "hook")
	if err != nil || !ok {
		t.Fatalf("LastFire(hook) = %v, %v", ok, err)
	}
	same("LastFire(hook)", []store.Fire{last}, []store.Fire{fires[3]})

	if rf, ok := l.(store.ReplayFinder); ok {
		testReplayFinder(t, l, rf)
	}
	df, ok := l.(store.DeliveryFinder)
	if !ok {
		return
	}
	if f, ok, err := df.FireByDelivery(ctx, "hook", "d1"); err != nil || !ok {
		t.Errorf("FireByDelivery(d1) = %v, %v", ok, err)
	} else {
		same("FireByDelivery(d1)", []store.Fire{f}, []store.Fire{fires[1]})
	}
	if _, ok, err := df.FireByDelivery(ctx, "hook", "d2"); ok || err != nil {
		t.Errorf("FireByDelivery(d2) = %v, %v; a failed fire started no run, so it is not a delivery to dedup", ok, err)
	}
	if _, ok, err := df.FireByDelivery(ctx, "nightly", "d1"); ok || err != nil {
		t.Errorf("FireByDelivery of another schedule's delivery = %v, %v", ok, err)
	}
}

// testReplayFinder checks FireByReplay on fires of the schedule "signed" (which l lacks).
func testReplayFinder(t *testing.T, l store.FireLog, rf store.ReplayFinder) {
	t.Helper()
	ctx := context.Background()
	k1, k2 := "1700000000."+strings.Repeat("ab", 32), "1700000001."+strings.Repeat("cd", 32)
	for _, f := range []store.Fire{
		{ScheduleID: "signed", Kind: store.FireFired, RunID: "r1", Origin: "webhook", ScheduledAt: t0, FiredAt: t0, ReplayKey: k1},
		{ScheduleID: "signed", Kind: store.FireFailed, Reason: "start_failed", Origin: "webhook", ScheduledAt: t0, FiredAt: t0, ReplayKey: k2},
		{ScheduleID: "signed", Kind: store.FireFired, RunID: "r2", Origin: "webhook", ScheduledAt: t0, FiredAt: t0, DeliveryID: "d9"},
	} {
		if err := l.RecordFire(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if f, ok, err := rf.FireByReplay(ctx, "signed", k1); err != nil || !ok || f.RunID != "r1" || f.Kind != store.FireFired {
		t.Errorf("FireByReplay(k1) = %+v, %v, %v; want the fire of run r1", f, ok, err)
	}
	if f, ok, err := rf.FireByReplay(ctx, "signed", k2); ok || err != nil {
		t.Errorf("FireByReplay(k2) = %+v, %v, %v; a failed fire started no run, so its signature is not a replay", f, ok, err)
	}
	if f, ok, err := rf.FireByReplay(ctx, "signed", ""); ok || err != nil {
		t.Errorf(`FireByReplay("") = %+v, %v, %v; a fire without a key is no replay`, f, ok, err)
	}
	if f, ok, err := rf.FireByReplay(ctx, "hook", k1); ok || err != nil {
		t.Errorf("FireByReplay of another schedule's key = %+v, %v, %v", f, ok, err)
	}
}

func mustFires(t *testing.T, l store.FireLog, id string, limit int) []store.Fire {
	t.Helper()
	fs, err := l.Fires(context.Background(), id, limit)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// ExerciseSlotClaimer checks a store.SlotClaimer: newClaimers returns n claimers on one shared
// history (n stores on one database). Of claims of one slot, concurrent or not, exactly one
// succeeds; other slots and other schedules are claimed apart.
func ExerciseSlotClaimer(t *testing.T, newClaimers func(t *testing.T, n int) []store.SlotClaimer) {
	t.Run("SlotClaimedOnce", func(t *testing.T) {
		ctx := context.Background()
		cs := newClaimers(t, 3)
		slot := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		won := make(chan bool, len(cs)*4)
		var wg sync.WaitGroup
		for _, c := range cs {
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := c.ClaimSlot(ctx, "nightly", slot)
					if err != nil {
						t.Error(err)
					}
					won <- ok
				}()
			}
		}
		wg.Wait()
		close(won)
		n := 0
		for ok := range won {
			if ok {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d of 12 claims of one slot succeeded; want 1", n)
		}
		for _, k := range []struct {
			id   string
			slot time.Time
		}{{"nightly", slot.Add(time.Second)}, {"hourly", slot}} {
			if ok, err := cs[1].ClaimSlot(ctx, k.id, k.slot); !ok || err != nil {
				t.Fatalf("claim of %s at %s: %v %v; want the first claim to succeed", k.id, k.slot, ok, err)
			}
		}
		if ok, err := cs[2].ClaimSlot(ctx, "hourly", slot); ok || err != nil {
			t.Fatalf("second claim of hourly: %v %v; want false", ok, err)
		}
	})
}

// AdmitterStore is a store with the ScheduleAdmitter feature.
type AdmitterStore interface {
	store.Store
	store.ScheduleAdmitter
}

// ExerciseScheduleAdmitter checks a store.ScheduleAdmitter: newStores returns n stores on one
// shared database. The lock of a schedule excludes the other stores (and only for that
// schedule) until it is released; the count sees the unfinished top-level runs whose trigger
// names the schedule, whichever store wrote them, and no others.
func ExerciseScheduleAdmitter(t *testing.T, newStores func(t *testing.T, n int) []AdmitterStore) {
	t.Run("LockExcludesOtherStores", func(t *testing.T) {
		ctx := context.Background()
		ss := newStores(t, 2)
		unlockA, err := ss[0].LockSchedule(ctx, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan func(), 1)
		go func() {
			unlock, err := ss[1].LockSchedule(ctx, "nightly")
			if err != nil {
				t.Error(err)
				unlock = func() {}
			}
			got <- unlock
		}()
		other, err := ss[1].LockSchedule(ctx, "hourly") // another schedule: not held up
		if err != nil {
			t.Fatal(err)
		}
		other()
		select {
		case unlock := <-got:
			unlock()
			t.Fatal("the second store took the lock of nightly while the first held it")
		case <-time.After(300 * time.Millisecond):
		}
		released := time.Now()
		unlockA()
		select {
		case unlock := <-got:
			t.Logf("the waiting store took the lock %s after its release", time.Since(released))
			unlock()
		case <-time.After(10 * time.Second):
			t.Fatal("the second store did not take the lock within 10 s of its release")
		}
		again, err := ss[0].LockSchedule(ctx, "nightly") // released again: free
		if err != nil {
			t.Fatal(err)
		}
		again()
	})
	t.Run("ActiveCountsEveryStoresRuns", func(t *testing.T) {
		ctx := context.Background()
		ss := newStores(t, 2)
		now := time.Now()
		mk := func(id, origin, scheduleID string, status run.Status, parent string) store.Run {
			r := store.Run{ID: id, Name: "w", SpecJSON: []byte(`{}`), Status: status, Origin: origin,
				CreatedAt: now, UpdatedAt: now, ParentRunID: parent}
			if scheduleID != "" {
				r.Trigger = []byte(fmt.Sprintf(`{"kind":"webhook","payload":{"s":"\u0000 schedule_id"},"schedule_id":%q}`, scheduleID))
			}
			return r
		}
		write := func(s store.Store, runs ...store.Run) {
			t.Helper()
			if err := s.Write(ctx, &store.Batch{CreateRuns: runs}); err != nil {
				t.Fatal(err)
			}
		}
		write(ss[0], mk("a1", "webhook", "nightly", run.StatusRunning, ""),
			mk("a2", "schedule", "nightly", run.StatusPaused, ""),
			mk("a3", "webhook", "nightly", run.StatusCompleted, ""),
			mk("a4", "webhook", "hourly", run.StatusRunning, ""),
			mk("a5", "local", "", run.StatusRunning, ""))
		write(ss[1], mk("b1", "schedule", "nightly", run.StatusPending, ""),
			mk("b2", "webhook", "nightly", run.StatusFailed, ""))
		write(ss[1], mk("b3", "schedule", "nightly", run.StatusRunning, "a1")) // a child run
		decoy := mk("a6", "webhook", "hourly", run.StatusRunning, "")          // nightly's bytes in its payload only
		decoy.Trigger = []byte(`{"kind":"webhook","payload":{"schedule_id":"nightly"},"schedule_id":"hourly"}`)
		write(ss[0], decoy)
		count := func(s store.ScheduleAdmitter, id string, want int) {
			t.Helper()
			n, err := s.ActiveScheduleRuns(ctx, id)
			if err != nil || n != want {
				t.Fatalf("ActiveScheduleRuns(%s) = %d, %v; want %d", id, n, err, want)
			}
		}
		count(ss[0], "nightly", 3) // a1, a2, b1
		count(ss[1], "nightly", 3)
		count(ss[1], "hourly", 2)
		count(ss[0], "unknown", 0)
		if err := ss[1].Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "b1", Status: run.StatusCompleted, UpdatedAt: now, FinishedAt: now}}}); err != nil {
			t.Fatal(err)
		}
		count(ss[0], "nightly", 2)
	})
}

// ExerciseRefusedFiresBound checks a store's FireLog keeps every fired fire of a schedule but
// at most MaxRefusedFires + RefusedFiresSlack refused ones, the newest (issue #33: a flood of
// refused webhooks grew the database without bound). newLog must return a new, empty log.
func ExerciseRefusedFiresBound(t *testing.T, newLog func(t *testing.T) store.FireLog) {
	t.Helper()
	t.Run("RedteamRefusedFiresBounded", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		l := newLog(t)
		record := func(f store.Fire) {
			t.Helper()
			if err := l.RecordFire(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			record(store.Fire{ScheduleID: "hook", Kind: store.FireFired, RunID: fmt.Sprintf("r%d", i), Origin: "webhook",
				ScheduledAt: t0, FiredAt: t0, DeliveryID: fmt.Sprintf("d%d", i)})
		}
		record(store.Fire{ScheduleID: "other", Kind: store.FireSkipped, Reason: "max_concurrent", ScheduledAt: t0, FiredAt: t0})
		flood := 2*store.MaxRefusedFires + 50
		for i := range flood {
			record(store.Fire{ScheduleID: "hook", Kind: store.FireSkipped, Reason: "max_concurrent",
				Message: fmt.Sprintf("refused %d", i), Origin: "webhook", ScheduledAt: t0, FiredAt: t0})
		}
		fires := mustFires(t, l, "hook", 0)
		refused, fired := 0, 0
		for _, f := range fires {
			if f.Kind == store.FireFired {
				fired++
			} else {
				refused++
			}
		}
		if fired != 3 {
			t.Errorf("%d fired fires kept; want all 3 (they are what redelivery checks find)", fired)
		}
		if refused < store.MaxRefusedFires || refused > store.MaxRefusedFires+store.RefusedFiresSlack {
			t.Errorf("%d refused fires kept of %d; want %d to %d", refused, flood, store.MaxRefusedFires,
				store.MaxRefusedFires+store.RefusedFiresSlack)
		}
		if want := fmt.Sprintf("refused %d", flood-1); fires[0].Message != want {
			t.Errorf("newest fire %q; want %q", fires[0].Message, want)
		}
		if got := mustFires(t, l, "other", 0); len(got) != 1 {
			t.Errorf("another schedule's fires: %d; want 1", len(got))
		}
	})
	// Refused fires of two schedules interleaved so that every RefusedFiresSlack-th refused
	// fire the store records is the other schedule's: each schedule is still bounded (the
	// store counted refused fires across schedules and trimmed only the schedule of the fire
	// that hit the count, so "hook" grew without bound).
	t.Run("RedteamRefusedFiresBoundedInterleaved", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		l := newLog(t)
		// Rounds of RefusedFiresSlack-1 "hook" fires and one "decoy" fire, from a fresh store.
		rounds := (store.MaxRefusedFires+store.RefusedFiresSlack)/(store.RefusedFiresSlack-1) + 5
		for range rounds {
			for j := range store.RefusedFiresSlack {
				id := "hook"
				if j == store.RefusedFiresSlack-1 {
					id = "decoy"
				}
				if err := l.RecordFire(ctx, store.Fire{ScheduleID: id, Kind: store.FireFailed, Reason: "start_failed",
					Origin: "webhook", ScheduledAt: t0, FiredAt: t0}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := len(mustFires(t, l, "hook", 0)); got > store.MaxRefusedFires+store.RefusedFiresSlack {
			t.Errorf("%d refused fires of one schedule kept; want at most %d", got, store.MaxRefusedFires+store.RefusedFiresSlack)
		}
	})
}

// FireStore is a store that keeps the fire history: a run's fire can be written with the run
// (store.Batch.Fires).
type FireStore interface {
	store.Store
	store.FireLog
	store.DeliveryFinder
}

// ExerciseBatchFires checks store.Batch.Fires: a fire written with the run it started, in the
// same transaction (one write: no process killed between two leaves a run without its fire).
func ExerciseBatchFires(t *testing.T, newStore func(t *testing.T) FireStore) {
	t.Helper()
	t.Run("FireWrittenWithItsRun", func(t *testing.T) {
		t.Parallel()
		testBatchFires(t, newStore(t))
	})
}

func testBatchFires(t *testing.T, s FireStore) {
	ctx := context.Background()
	fire := func(runID, delivery string) store.Fire {
		return store.Fire{ScheduleID: "hook", Kind: store.FireFired, RunID: runID, Origin: "webhook",
			ScheduledAt: t0, FiredAt: t0, DeliveryID: delivery}
	}
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}, Fires: []store.Fire{fire("r1", "d1")}})
	got, found, err := s.FireByDelivery(ctx, "hook", "d1")
	if err != nil || !found || got.RunID != "r1" || got.Kind != store.FireFired || got.Origin != "webhook" {
		t.Fatalf("FireByDelivery(d1) after the run's write = %+v, %v, %v; want the fire of r1", got, found, err)
	}
	if fs := mustFires(t, s, "hook", 0); len(fs) != 1 {
		t.Fatalf("the history holds %+v; want the one fire", fs)
	}
	if rf, ok := s.(store.ReplayFinder); ok { // a signed webhook's fire keeps its replay key
		signed := fire("r9", "")
		signed.ReplayKey = "sig-1"
		write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r9", t0)}, Fires: []store.Fire{signed}})
		if got, found, err := rf.FireByReplay(ctx, "hook", "sig-1"); err != nil || !found || got.RunID != "r9" {
			t.Fatalf("FireByReplay after the run's write = %+v, %v, %v; want the fire of r9", got, found, err)
		}
	}

	// A batch that fails writes none of it, its fire included: the run id exists already.
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}, Fires: []store.Fire{fire("r1", "d2")}}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("creating run r1 again: %v; want ErrExists", err)
	}
	if got, found, err := s.FireByDelivery(ctx, "hook", "d2"); found || err != nil {
		t.Fatalf("the fire of a batch that failed was written: %+v, %v", got, err)
	}

	// Only fired fires go in a batch (a refused one is recorded alone, where the history keeps
	// the newest few): the batch fails, its run is not created.
	bad := fire("r2", "d3")
	bad.Kind, bad.RunID, bad.Reason = store.FireFailed, "", "start_failed"
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r2", t0)}, Fires: []store.Fire{bad}}); err == nil {
		t.Fatal("a batch with a failed fire was taken")
	}
	if _, err := s.GetRun(ctx, "r2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the run of a refused batch: %v; want ErrNotFound", err)
	}
}
