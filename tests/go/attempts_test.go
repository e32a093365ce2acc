package gotest

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// attemptsSpec retries its step twice before it succeeds.
const attemptsSpec = `
name: flaky
inputs: {shot: {type: string, default: sh010}}
steps:
  - id: push
    tool: flow__fail
    args: {times: 2, kind: transient, shot: "{{inputs.shot}}", password: hunter2}
    retry: {max_attempts: 3, initial_delay_ms: 1}
`

// exerciseAttempts runs a flaky step, forces it again with a resume, and prunes the run, on the
// engine's database at db: every attempt is recorded across the resume, the resume is in the
// run's history, and the prune deletes the records with the run.
func exerciseAttempts(t *testing.T, db string) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{DB: db, StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	s, err := spec.ParseString(attemptsSpec)
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.Run(ctx, engine.StartRequest{Spec: s})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %v %+v", err, info)
	}
	if _, err := e.Resume(ctx, info.ID, engine.ResumeOptions{ForceSteps: []string{"push"}, By: "td"}); err != nil {
		t.Fatal(err)
	}
	if info, err = e.Wait(ctx, info.ID, 20*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("resumed: %v %+v", err, info)
	}
	st := info.Steps[0]
	if len(st.AttemptHistory) != 6 { // flow__fail fails the first 2 attempts of each execution
		t.Fatalf("attempts = %+v; want 3, then the forced execution's 3", st.AttemptHistory)
	}
	for i, a := range st.AttemptHistory {
		if a.Attempt != i+1 || string(a.Args) != `{"kind":"transient","password":"[redacted]","shot":"sh010","times":2}` {
			t.Errorf("attempt %d = %+v (args %s)", i, a, a.Args)
		}
	}
	if st.AttemptHistory[0].Error == nil || st.AttemptHistory[0].Error.Kind != run.KindTransient || st.AttemptHistory[2].Status != run.StepCompleted ||
		st.AttemptHistory[3].Status != run.StepFailed || st.AttemptHistory[5].Status != run.StepCompleted {
		t.Errorf("attempts = %+v; want the first failed transient, the last completed", st.AttemptHistory)
	}
	if len(info.Resumes) != 1 || info.Resumes[0].By != "td" || len(info.Resumes[0].Forced) != 1 {
		t.Errorf("resumes = %+v", info.Resumes)
	}
	if res, err := e.PruneRuns(ctx, engine.PruneOptions{FinishedBefore: time.Now().Add(time.Hour)}); err != nil || res.Pruned != 1 {
		t.Fatalf("prune: %+v, %v", res, err)
	}
}

// Attempt records on a SQLite file; the pruned run leaves no attempt row behind.
func TestAttemptsSQLite(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "flow.db")
	exerciseAttempts(t, db)
	conn, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n int
	if err := conn.QueryRow(`SELECT count(*) FROM step_attempts`).Scan(&n); err != nil || n != 0 {
		t.Errorf("attempt rows after the prune = %d, %v; want 0", n, err)
	}
}

// Attempt records on PostgreSQL.
func TestAttemptsPostgres(t *testing.T) {
	t.Parallel()
	exerciseAttempts(t, pgtest.DB(t))
}
