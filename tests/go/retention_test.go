package gotest

import (
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

const echoSpec = "name: ok\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]"

// PruneRuns lists before it deletes (a dry run deletes nothing), deletes the earliest
// finished first within a limit, reports progress, and never touches a run still going.
func TestPruneRunsDryRunLimitAndProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	var ids []string
	for range 4 {
		ids = append(ids, b.run(echoSpec, nil).ID)
		b.clk.Advance(time.Minute)
	}
	gated := b.submit("name: gated\nsteps: [{id: gate, kind: approve, prompt: ship}]", nil)
	b.waitFor("the gate to open", func() bool { return b.status(gated).Status == run.StatusWaiting })
	cutoff := b.clk.Now().Add(time.Hour)

	dry, err := b.eng.PruneRuns(b.ctx, engine.PruneOptions{FinishedBefore: cutoff, DryRun: true})
	if err != nil || !dry.DryRun || dry.Pruned != 4 || len(dry.Runs) != 4 {
		t.Fatalf("dry run = %+v, %v; want the 4 finished runs", dry, err)
	}
	for i, r := range dry.Runs {
		if r.ID != ids[i] || r.Status != run.StatusCompleted || r.Name != "ok" || r.FinishedAt.IsZero() {
			t.Errorf("dry run lists %+v at %d; want run %s, earliest finished first", r, i, ids[i])
		}
	}
	if runs, _ := b.eng.Runs(b.ctx, engine.RunFilter{}); len(runs) != 5 {
		t.Fatalf("a dry run deleted runs: %d left", len(runs))
	}
	var seen [][2]int
	res, err := b.eng.PruneRuns(b.ctx, engine.PruneOptions{FinishedBefore: cutoff, Limit: 2,
		Progress: func(done, total int) { seen = append(seen, [2]int{done, total}) }})
	if err != nil || res.Pruned != 2 || res.DryRun || res.Runs != nil {
		t.Fatalf("PruneRuns(limit 2) = %+v, %v", res, err)
	}
	if len(seen) == 0 || seen[len(seen)-1] != [2]int{2, 2} {
		t.Errorf("progress %v; want it to end at 2 of 2", seen)
	}
	for i, id := range ids {
		_, err := b.eng.Status(b.ctx, id)
		if gone := codeOf(err) == run.CodeNotFound; gone != (i < 2) {
			t.Errorf("run %d (%s): status error %v; want the 2 earliest finished gone, the others kept", i, id, err)
		}
	}
	if _, err := b.eng.PruneRuns(b.ctx, engine.PruneOptions{FinishedBefore: cutoff, Limit: -1}); codeOf(err) != run.CodeInvalidRequest {
		t.Errorf("a negative limit: %v; want invalid_request", err)
	}
	if _, err := b.eng.PruneRuns(b.ctx, engine.PruneOptions{FinishedBefore: cutoff, Statuses: []run.Status{run.StatusWaiting}}); codeOf(err) != run.CodeInvalidRequest {
		t.Errorf("pruning waiting runs: %v; want invalid_request", err)
	}
	if n, err := b.eng.Prune(b.ctx, cutoff.Add(1000*time.Hour)); err != nil || n != 2 {
		t.Fatalf("Prune of the rest = %d, %v; want 2 (the waiting run stays)", n, err)
	}
	if info := b.status(gated); info.Status != run.StatusWaiting {
		t.Errorf("the waiting run after the prunes: %+v", info)
	}
}

// The retention loop prunes on the engine clock: a pass at start and then every Every, runs
// that finished more than KeepFor ago go, runs waiting for an approval stay, and expired
// idempotency entries are purged on each pass (also with KeepFor 0: runs kept forever).
func TestRetentionPrunesOnTheEngineClock(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	countingTool(t, b)
	b.run(idemSpec("global", 60, "auto"), nil) // a global entry that expires in 60 s
	var old []string
	for range 3 {
		old = append(old, b.run(echoSpec, nil).ID)
	}
	gated := b.submit("name: gated\nsteps: [{id: gate, kind: approve, prompt: ship}]", nil)
	b.waitFor("the gate to open", func() bool { return b.status(gated).Status == run.StatusWaiting })
	passed := b.eng.RetentionPassed()
	waitPass := func(what string) engine.RetentionInfo {
		t.Helper()
		select {
		case <-passed:
		case <-b.ctx.Done():
			t.Fatalf("no retention pass %s", what)
		}
		info, on := b.eng.Retention()
		if !on {
			t.Fatalf("Retention() says no retention runs")
		}
		return info
	}
	if _, on := b.eng.Retention(); on {
		t.Fatal("Retention() before StartRetention says one runs")
	}
	if err := b.eng.StartRetention(engine.RetentionPolicy{KeepFor: 24 * time.Hour, Every: time.Hour}); err != nil {
		t.Fatal(err)
	}
	info := waitPass("at start")
	if info.Pruned != 0 || info.Purged != 0 || info.KeepSecs != 86400 || info.EverySecs != 3600 || info.Error != "" ||
		!info.LastPass.Equal(t0) || !info.NextPass.Equal(t0.Add(time.Hour)) {
		t.Fatalf("first pass = %+v; want nothing deleted yet, next pass in an hour", info)
	}
	b.waitTimers(1)
	b.clk.Advance(time.Hour)
	if info := waitPass("after an hour"); info.Pruned != 0 || info.Purged != 1 {
		t.Fatalf("pass after an hour = %+v; want the expired idempotency entry purged, no run pruned", info)
	}
	recent := b.run(echoSpec, nil).ID // finished at t0+1h
	b.waitTimers(1)
	b.clk.Advance(24 * time.Hour)
	info = waitPass("after a day")
	if info.Pruned != 4 || info.PrunedTotal != 4 || info.PurgedTotal != 1 {
		t.Fatalf("pass after a day = %+v; want the 4 runs that ended a day ago pruned (idem, 3 echo)", info)
	}
	for _, id := range append(old, recent) {
		_, err := b.eng.Status(b.ctx, id)
		if gone := codeOf(err) == run.CodeNotFound; gone != (id != recent) {
			t.Errorf("run %s: %v (recent %s); want the runs of t0 gone and the one of t0+1h kept", id, err, recent)
		}
	}
	if b.status(gated).Status != run.StatusWaiting {
		t.Error("the retention pruned a run waiting for an approval")
	}
	// KeepFor 0 keeps runs forever; the loop still purges.
	if err := b.eng.StartRetention(engine.RetentionPolicy{}); err != nil {
		t.Fatal(err)
	}
	if info := waitPass("with runs kept forever"); info.Pruned != 0 || info.KeepSecs != 0 || info.EverySecs != 3600 {
		t.Fatalf("pass keeping runs forever = %+v", info)
	}
	if err := b.eng.StartRetention(engine.RetentionPolicy{KeepFor: -time.Hour}); codeOf(err) != run.CodeInvalidRequest {
		t.Errorf("a negative retention: %v", err)
	}
	b.eng.StopRetention()
	if _, on := b.eng.Retention(); on {
		t.Error("Retention() after StopRetention says one runs")
	}
}

func TestParseRetention(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for in, want := range map[string]time.Duration{"30d": 30 * day, "2w": 14 * day, "12h": 12 * time.Hour, "90m": 90 * time.Minute,
		"36h30m": 36*time.Hour + 30*time.Minute, "1.5d": 36 * time.Hour, "forever": 0, "0": 0, "off": 0, " 7D ": 7 * day} {
		if got, err := engine.ParseRetention(in); err != nil || got != want {
			t.Errorf("ParseRetention(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "30", "-1d", "thirty days", "d", "5y", "-5h"} {
		_, err := engine.ParseRetention(in)
		if re := asRunError(err); re == nil || re.Code != run.CodeInvalidRequest || !strings.Contains(re.Message, "30d") ||
			!strings.Contains(re.Message, "forever") {
			t.Errorf("ParseRetention(%q) = %v; want invalid_request naming the forms", in, err)
		}
	}
}

// Starting the retention from many goroutines at once leaves one loop, which Close stops; an
// engine that is closed refuses to start one.
func TestRetentionStartsConcurrentlyAndStopsWithClose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := make(chan error)
	for i := range 8 {
		go func() { done <- b.eng.StartRetention(engine.RetentionPolicy{KeepFor: time.Duration(i+1) * time.Hour}) }()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if _, on := b.eng.Retention(); !on {
		t.Fatal("no retention after 8 starts")
	}
	if err := b.eng.Close(b.ctx); err != nil {
		t.Fatal(err)
	}
	if _, on := b.eng.Retention(); on {
		t.Error("the retention runs after Close")
	}
	if err := b.eng.StartRetention(engine.RetentionPolicy{KeepFor: time.Hour}); codeOf(err) != run.CodeClosed {
		t.Errorf("StartRetention on a closed engine: %v; want code closed", err)
	}
}
