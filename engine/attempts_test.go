package engine_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// openAttemptEngine opens an engine on a new SQLite file, or in memory when db is false.
func openAttemptEngine(t *testing.T, db bool) *engine.Engine {
	t.Helper()
	cfg := engine.Config{StallAfterSecs: -1}
	if db {
		cfg.DB = filepath.Join(t.TempDir(), "flow.db")
	}
	e, err := engine.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func stepOf(t *testing.T, info *engine.RunInfo, key string) engine.StepInfo {
	t.Helper()
	for _, st := range info.Steps {
		if st.Key == key {
			return st
		}
	}
	t.Fatalf("run %s has no step %s: %+v", info.ID, key, info.Steps)
	return engine.StepInfo{}
}

// Every attempt of a retried step is recorded with its rendered args (a secret redacted), its
// error, its times and the engine's host and pid (an in-process built-in tool); the step's Args
// are the latest attempt's. On both the memory store and SQLite.
func TestAttemptsRecordEveryAttempt(t *testing.T) {
	for _, db := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "sqlite"}[db], func(t *testing.T) {
			ctx := context.Background()
			e := openAttemptEngine(t, db)
			s := mustSpec(t, `name: flaky
inputs: {shot: {type: string, default: sh010}}
steps:
  - id: push
    tool: flow__fail
    args: {times: 2, kind: transient, shot: "{{inputs.shot}}", auth: {api_token: hunter2}}
    retry: {max_attempts: 3, initial_delay_ms: 1}
`)
			info, err := e.Run(ctx, engine.StartRequest{Spec: s})
			if err != nil || info.Status != run.StatusCompleted {
				t.Fatalf("run: %v %+v", err, info)
			}
			st := stepOf(t, info, "push")
			if len(st.AttemptHistory) != 3 {
				t.Fatalf("attempt history = %+v; want 3 attempts", st.AttemptHistory)
			}
			host, _ := os.Hostname()
			for i, a := range st.AttemptHistory {
				want := run.StepFailed
				if i == 2 {
					want = run.StepCompleted
				}
				if a.Attempt != i+1 || a.Status != want || a.Tool != "flow__fail" || a.StartedAt.IsZero() ||
					a.FinishedAt.Before(a.StartedAt) || a.Host != host || a.PID != os.Getpid() {
					t.Errorf("attempt %d = %+v; want #%d %s with times, host %s and pid %d", i, a, i+1, want, host, os.Getpid())
				}
				if (i < 2) != (a.Error != nil) || (a.Error != nil && a.Error.Kind != run.KindTransient) {
					t.Errorf("attempt %d error = %+v; want transient for the first two only", i, a.Error)
				}
				var args map[string]any
				if err := json.Unmarshal(a.Args, &args); err != nil || args["shot"] != "sh010" ||
					args["auth"].(map[string]any)["api_token"] != "[redacted]" {
					t.Errorf("attempt %d args = %s; want the rendered shot and the token redacted", i, a.Args)
				}
			}
			if string(st.Args) != string(st.AttemptHistory[2].Args) || strings.Contains(string(st.Args), "hunter2") {
				t.Errorf("step args = %s; want the last attempt's, redacted", st.Args)
			}
			// Steps (every instance) carries them too.
			steps, err := e.Steps(ctx, info.ID)
			if err != nil || len(steps) != 1 || len(steps[0].AttemptHistory) != 3 {
				t.Fatalf("Steps = %+v, %v; want the step with its 3 attempts", steps, err)
			}
		})
	}
}

// A resumed run keeps the attempts of the execution before the resume and numbers its own after
// them; the resume (who, which steps forced) is in the run's history.
func TestAttemptsKeptAcrossResume(t *testing.T) {
	ctx := context.Background()
	e := openAttemptEngine(t, true)
	s := mustSpec(t, `name: twice
steps:
  - {id: a, tool: flow__echo, args: {value: 1}}
  - {id: b, tool: flow__fail, args: {times: 1, kind: fatal}}
`)
	info, err := e.Run(ctx, engine.StartRequest{Spec: s})
	if err != nil || info.Status != run.StatusFailed {
		t.Fatalf("run: %v %+v", err, info)
	}
	// flow__fail counts its failures per step instance; forcing a re-runs it, b fails again.
	if _, err := e.Resume(ctx, info.ID, engine.ResumeOptions{ForceSteps: []string{"a"}, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	info, err = e.Wait(ctx, info.ID, 10*time.Second)
	if err != nil || !info.Terminal {
		t.Fatalf("wait: %v %+v", err, info)
	}
	b := stepOf(t, info, "b")
	if len(b.AttemptHistory) != 2 || b.AttemptHistory[0].Attempt != 1 || b.AttemptHistory[1].Attempt != 2 ||
		b.AttemptHistory[0].Error == nil || b.AttemptHistory[0].Error.Kind != run.KindFatal {
		t.Fatalf("attempts of b after a resume = %+v; want the first execution's failure, then attempt 2", b.AttemptHistory)
	}
	if a := stepOf(t, info, "a"); len(a.AttemptHistory) != 2 {
		t.Errorf("attempts of the forced step a = %+v; want 2 (one per execution)", a.AttemptHistory)
	}
	if len(info.Resumes) != 1 || info.Resumes[0].By != "alice" || len(info.Resumes[0].Forced) != 1 || info.Resumes[0].Forced[0] != "a" ||
		info.Resumes[0].At.Before(b.AttemptHistory[0].StartedAt) {
		t.Errorf("resumes = %+v; want one, by alice, forcing a, after the first attempt", info.Resumes)
	}
}

// A run whose only step is forced again (its earlier execution then leaves no completed step to
// reuse) numbers the new attempt after the recorded ones instead of overwriting the first.
func TestAttemptsOfAForcedOnlyStep(t *testing.T) {
	ctx := context.Background()
	e := openAttemptEngine(t, true)
	info, err := e.Run(ctx, engine.StartRequest{Spec: mustSpec(t, "name: one\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %v %+v", err, info)
	}
	for range 2 {
		if _, err := e.Resume(ctx, info.ID, engine.ResumeOptions{ForceSteps: []string{"a"}}); err != nil {
			t.Fatal(err)
		}
		if info, err = e.Wait(ctx, info.ID, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
			t.Fatalf("wait: %v %+v", err, info)
		}
	}
	got := stepOf(t, info, "a").AttemptHistory
	if len(got) != 3 || got[0].Attempt != 1 || got[2].Attempt != 3 || len(info.Resumes) != 2 {
		t.Errorf("attempts after two forced resumes = %+v, resumes %+v; want 3 attempts and 2 resumes", got, info.Resumes)
	}
}

// An attempt in flight when its run is cancelled reads as cancelled, ended with its step, and
// is running while it runs.
func TestAttemptInFlightWhenCancelled(t *testing.T) {
	ctx := context.Background()
	e := openAttemptEngine(t, true)
	id, err := e.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, "name: long\nsteps: [{id: nap, tool: flow__sleep, args: {ms: 60000}}]")})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := e.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if h := info.Steps; len(h) == 1 && len(h[0].AttemptHistory) == 1 {
			if a := h[0].AttemptHistory[0]; a.Status != run.StepRunning || !a.FinishedAt.IsZero() {
				t.Fatalf("the attempt in flight = %+v; want running, no end", a)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running attempt recorded: %+v", info.Steps)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := e.Cancel(ctx, id, "enough"); err != nil {
		t.Fatal(err)
	}
	info, err := e.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCancelled {
		t.Fatalf("wait: %v %+v", err, info)
	}
	a := stepOf(t, info, "nap").AttemptHistory
	if len(a) != 1 || a[0].Status != run.StepCancelled || a[0].FinishedAt.IsZero() {
		t.Errorf("the cancelled attempt = %+v; want cancelled with an end", a)
	}
}

// A forced resume rewrites the forced step's row, on the memory store too (it once inserted a
// second row with the same key, since the forced instance is not among those reused).
func TestForcedResumeKeepsOneRowPerStep(t *testing.T) {
	for _, db := range []bool{false, true} {
		ctx := context.Background()
		e := openAttemptEngine(t, db)
		info, err := e.Run(ctx, engine.StartRequest{Spec: mustSpec(t, "name: one\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")})
		if err != nil || info.Status != run.StatusCompleted {
			t.Fatalf("run: %v %+v", err, info)
		}
		if _, err := e.Resume(ctx, info.ID, engine.ResumeOptions{ForceSteps: []string{"a"}}); err != nil {
			t.Fatal(err)
		}
		if info, err = e.Wait(ctx, info.ID, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
			t.Fatalf("wait: %v %+v", err, info)
		}
		steps, err := e.Steps(ctx, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, st := range steps {
			keys = append(keys, st.Key)
		}
		if strings.Join(keys, " ") != "a" {
			t.Errorf("db %v: step rows after a forced resume = %v; want one per instance", db, keys)
		}
	}
}

// A host tool's attempt starts when a host thread takes its call, not when its step started
// (a call that waited in its lane behind a busy main thread).
func TestAttemptOfAHostCallStartsWhenPulled(t *testing.T) {
	ctx := context.Background()
	e := openAttemptEngine(t, false)
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "export", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	id, err := e.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, "name: h\nsteps: [{id: a, tool: export, args: {scene: x.ma}}]")})
	if err != nil {
		t.Fatal(err)
	}
	var started time.Time
	for deadline := time.Now().Add(10 * time.Second); started.IsZero(); time.Sleep(2 * time.Millisecond) {
		info, err := e.Status(ctx, id)
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("the step never ran: %v %+v", err, info)
		}
		if len(info.Steps) == 1 && info.Steps[0].Status == run.StepRunning {
			started = info.Steps[0].StartedAt
		}
	}
	cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 1, Timeout: 5 * time.Second})
	if err != nil || len(cs) != 1 {
		t.Fatalf("pull: %v %v", cs, err)
	}
	if err := e.Host().Complete(cs[0].ID, flowtype.ToolResult{Output: map[string]any{"ok": true}}); err != nil {
		t.Fatal(err)
	}
	info, err := e.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("wait: %v %+v", err, info)
	}
	a := stepOf(t, info, "a").AttemptHistory
	if len(a) != 1 || !a[0].StartedAt.After(started) || a[0].FinishedAt.Before(a[0].StartedAt) {
		t.Errorf("attempt = %+v; want it started after its step (%v), when pulled", a, started)
	}
}
