//go:build unix

package gotest

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// An engine suspended (SIGSTOP: a GC pause, a laptop lid) for longer than its lease loses its
// run to another engine, which resumes it. When it wakes (SIGCONT) it does not orchestrate the
// run any more: it calls no tool of it after the takeover and does not overwrite the record; the
// run completes once, on the new owner.
func TestClusterSuspendedEngineLosesItsRun(t *testing.T) {
	// Not parallel: three engine processes each, on a 1 s lease, want the machine to themselves.
	db := pgtest.DB(t)
	calls := filepath.Join(t.TempDir(), "calls")
	nodes := startCluster(t, db, calls, 3, false)
	a := nodes[0]
	id := strings.TrimPrefix(a.do("submit seq", "run "), "run ")
	v := viewer(t, db)
	ctx := context.Background()
	for {
		steps, err := v.Steps(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) >= 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Taken over once its lease expires: interrupted, then resumed by another engine.
	deadline := time.Now().Add(15 * time.Second)
	var takenAt time.Time
	for takenAt.IsZero() {
		if time.Now().After(deadline) {
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatal("never taken over")
		}
		evs, _ := v.EventsSince(0, 0)
		for _, ev := range evs {
			if ev.RunID == id && ev.Type == run.EventInterrupted {
				takenAt = ev.Time
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, v, id, run.StatusCompleted, 20*time.Second)
	time.Sleep(1500 * time.Millisecond) // the woken engine's beats: it must not write the run again
	if info, err := v.Status(ctx, id); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("after the old engine woke: %+v %v", info, err)
	}
	count := map[string]int{}
	for _, c := range readCalls(t, calls) {
		count[c.key]++
		if c.engine == a.id && c.at.After(takenAt) {
			t.Errorf("the suspended engine called %s after the takeover", c.key)
		}
	}
	for _, k := range []string{"s1", "s2", "s3", "s4", "s5", "s6"} {
		if count[k] == 0 || count[k] > 2 {
			t.Errorf("step %s called %d times", k, count[k])
		}
	}
	a.do("status "+id, "status completed") // it reads the new owner's record
	for _, nd := range nodes {
		nd.do("quit", "closed")
	}
}

// SIGSTOP of the orchestrator while its call runs on another engine through the tool-call
// queue, past its lease: the engine that takes the run over adopts the call in flight; the old
// one, woken (SIGCONT), gives the run up without cancelling that call — a cancel would fail the
// new owner's step (the run ended failed with "the queued call was cancelled" before) — so the
// tool is called once and the run completes.
func TestClusterSuspendedOrchestratorLeavesItsCallToTheNewOwner(t *testing.T) {
	// Not parallel: three engine processes each, on a 1 s lease, want the machine to themselves.
	db, calls, nodes, id := submitMidCall(t)
	a := nodes[0]
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	v := viewer(t, db)
	deadline := time.Now().Add(15 * time.Second)
	takenBy := ""
	for takenBy == "" {
		if time.Now().After(deadline) {
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatal("never taken over")
		}
		takenBy = takenOverBy(t, v, id)
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	info := waitFor(t, v, id, run.StatusCompleted, 20*time.Second)
	if got := readCalls(t, calls); len(got) != 1 {
		t.Fatalf("the tool was called %d times: %+v; want once", len(got), got)
	}
	if rows := queueRows(t, db); strings.Join(rows, ",") != "work 1 done " {
		t.Fatalf("queue rows: %q; want the one call, done", rows)
	}
	if takenBy == a.id {
		t.Fatalf("taken over by the suspended engine %s", a.id)
	}
	t.Logf("taken over by %s; the woken engine left the call to it; run %s", takenBy, info.Status)
	for _, nd := range nodes {
		nd.do("quit", "closed")
	}
}
