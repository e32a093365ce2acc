package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// A 10 MB argument is recorded as a bounded preview marked truncated; the run does not fail.
func TestRedteamAttemptArgs10MB(t *testing.T) {
	ctx := context.Background()
	e := openAttemptEngine(t, true)
	s := mustSpec(t, `name: big
inputs: {blob: {type: string}}
steps:
  - {id: push, tool: flow__fail, args: {times: 0, blob: "{{inputs.blob}}"}}
`)
	blob := strings.Repeat("é", 5<<20) // 10 MiB of UTF-8
	info, err := e.Run(ctx, engine.StartRequest{Spec: s, Inputs: map[string]any{"blob": blob}})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run with a 10 MB argument: %v %+v", err, info)
	}
	st := stepOf(t, info, "push")
	if len(st.AttemptHistory) != 1 {
		t.Fatalf("attempts = %+v; want 1", st.AttemptHistory)
	}
	a := st.AttemptHistory[0].Args
	var rec struct {
		Truncated bool   `json:"_truncated"`
		Bytes     int    `json:"bytes"`
		Preview   string `json:"preview"`
	}
	if err := json.Unmarshal(a, &rec); err != nil || !rec.Truncated || rec.Bytes < 10<<20 || len(a) > 4<<10 ||
		!utf8.ValidString(rec.Preview) || !strings.HasPrefix(rec.Preview, `{"blob":"éé`) {
		t.Errorf("the record of a 10 MB argument = %.200s… (%d bytes); want {_truncated, bytes ≥ 10 MiB, a preview of whole characters} under 4 KiB", a, len(a))
	}
	if string(st.Args) != string(a) {
		t.Errorf("the step's args differ from its attempt's")
	}
}

// A string of invalid UTF-8 (and a NUL) in an argument is recorded as valid JSON, the bad bytes
// as U+FFFD, and read back from the database.
func TestRedteamAttemptArgsInvalidUTF8(t *testing.T) {
	ctx := context.Background()
	e := openAttemptEngine(t, true)
	s := mustSpec(t, `name: binary
inputs: {raw: {type: string}}
steps:
  - {id: push, tool: flow__fail, args: {times: 0, raw: "{{inputs.raw}}"}}
`)
	info, err := e.Run(ctx, engine.StartRequest{Spec: s, Inputs: map[string]any{"raw": "ok\xff\xfe\x00\x1b[2Jend"}})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run with a binary argument: %v %+v", err, info)
	}
	a := stepOf(t, info, "push").AttemptHistory[0].Args
	var args map[string]any
	if !json.Valid(a) || !utf8.Valid(a) || json.Unmarshal(a, &args) != nil {
		t.Fatalf("args record %q is not valid UTF-8 JSON", a)
	}
	if got := args["raw"]; got != "ok\ufffd\ufffd\x00\x1b[2Jend" {
		t.Errorf("raw recorded as %q; want the invalid bytes as U+FFFD, the rest kept (escaped in JSON)", got)
	}
}

// A step retried 10,000 times (the spec's most attempts) keeps its first 10 and last 100 attempt
// rows and counts the others; the run is not slowed past a few seconds by its record.
func TestRedteamAttemptsRetryLoop(t *testing.T) {
	ctx := context.Background()
	e := openAttemptEngine(t, true)
	s := mustSpec(t, `name: loop
steps:
  - id: push
    tool: flow__fail
    args: {times: 100000, kind: transient}
    retry: {max_attempts: 10000, initial_delay_ms: 0, max_delay_ms: 0}
`)
	start := time.Now()
	info, err := e.Run(ctx, engine.StartRequest{Spec: s})
	if err != nil || info.Status != run.StatusFailed {
		t.Fatalf("run: %v %+v", err, info)
	}
	took := time.Since(start)
	st := stepOf(t, info, "push")
	kept := store.MaxAttemptsFirst + store.MaxAttemptsLast
	if len(st.AttemptHistory) != kept || st.AttemptsDropped != 10000-kept ||
		st.AttemptHistory[9].Attempt != 10 || st.AttemptHistory[10].Attempt != 10000-store.MaxAttemptsLast+1 ||
		st.AttemptHistory[kept-1].Attempt != 10000 || st.AttemptHistory[kept-1].Status != run.StepFailed {
		t.Fatalf("%d attempts kept (dropped %d): first %d, 11th %d, last %+v; want the first 10 and the last 100 of 10000",
			len(st.AttemptHistory), st.AttemptsDropped, st.AttemptHistory[0].Attempt, st.AttemptHistory[10].Attempt, st.AttemptHistory[kept-1])
	}
	t.Logf("10,000 attempts in %v", took)
}
