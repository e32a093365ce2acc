package gotest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// The files of a call that goes through the tool-call queue (docs/operations/cluster.md, "The
// tool-call queue"; docs/guide/assets.md): two engines on one PostgreSQL database, the tool
// hosted by the second only.

// A step whose tool only another engine hosts records the files its call reported and the
// environment it ran in, as a local call's: the orchestrator hashes the declared reads and the
// write the tool reported (through the queue) and records them with the attempt, with the env
// the tool's side reported. A second run is served from the cache on the orchestrator, and once
// the written file is deleted the cache misses with "output missing" — the entry has the write.
func TestQueueCallRecordsItsFilesAndIsCached(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "assets", "chair.usda"), "#usda 1.0\ndef \"chair\" {}\n")
	writeFile(t, filepath.Join(dir, "assets", "table.usda"), "#usda 1.0\ndef \"table\" {}\n")
	ctx := context.Background()
	orch := openQueueEngine(t, db, "", nil, nil)
	env := `{"dcc":"usd","version":"25.11","host":"farm01"}`
	var calls atomic.Int32
	worker := openQueueEngine(t, db, "usd__assemble", func(args map[string]any) flowtype.ToolResult {
		calls.Add(1)
		var text strings.Builder
		for _, l := range args["layers"].([]any) {
			data, err := os.ReadFile(l.(string))
			if err != nil {
				return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "error", Message: err.Error()}}
			}
			text.Write(data)
		}
		out := args["out"].(string)
		if err := os.WriteFile(out, []byte(text.String()), 0o644); err != nil {
			return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "error", Message: err.Error()}}
		}
		return flowtype.ToolResult{Output: map[string]any{"usd": out}, Files: []flowtype.FileUse{{Path: out, Role: flowtype.FileWrite}},
			Env: json.RawMessage(env)}
	}, nil)
	s := mustSpec(t, assembleSpec(dir, "true"))
	runOnce := func(what string) (*engine.RunInfo, engine.StepInfo) {
		t.Helper()
		var id string
		var err error
		// The orchestrator reads the engines table for a tool it does not host when it is asked;
		// the worker's row is written when it registers the tool.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if id, err = orch.Submit(ctx, engine.StartRequest{Spec: s}); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("%s: submit: %v", what, err)
		}
		info, err := orch.Wait(ctx, id, 20*time.Second)
		if err != nil || info.Status != run.StatusCompleted {
			t.Fatalf("%s: run %+v %v", what, info, err)
		}
		steps, err := orch.Steps(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range steps {
			if st.Key == "assemble" {
				return info, st
			}
		}
		t.Fatalf("%s: no step assemble in %+v", what, steps)
		return nil, engine.StepInfo{}
	}

	first, st := runOnce("first run")
	if calls.Load() != 1 || st.Worker != worker.EngineID() || len(st.AttemptHistory) != 1 {
		t.Fatalf("first run: %d calls, worker %q (want %q), attempts %+v", calls.Load(), st.Worker, worker.EngineID(), st.AttemptHistory)
	}
	att := st.AttemptHistory[0]
	got := map[string]engine.FileInfo{}
	for _, f := range att.Files {
		got[f.Role+" "+filepath.Base(f.Path)] = f
	}
	for _, want := range []string{"read chair.usda", "read table.usda", "write sh010.usda"} {
		f, ok := got[want]
		if !ok || f.State != "ok" || !strings.HasPrefix(f.Hash, "blake3:") || len(f.Hash) != len("blake3:")+64 || f.Size == 0 {
			t.Fatalf("%s: %+v (files %+v)", want, f, att.Files)
		}
	}
	if len(att.Files) != 3 {
		t.Fatalf("files %+v; want the 2 declared reads and the reported write", att.Files)
	}
	if !jsonEqualText(string(att.Env), env) {
		t.Fatalf("attempt env %s; want the one the worker's tool reported, %s", att.Env, env)
	}

	second, st := runOnce("second run")
	if calls.Load() != 1 || !st.Cached || st.Attempts != 0 || jsonOf(t, second.Outputs["assemble"]) != jsonOf(t, first.Outputs["assemble"]) {
		t.Fatalf("unchanged inputs: %d calls, step %+v; want the cached output, no call", calls.Load(), st)
	}

	// The entry holds the write that came through the queue: without it, a deleted output would
	// still be a hit.
	out := filepath.Join(dir, "sh010.usda")
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	third, st := runOnce("deleted output")
	if calls.Load() != 2 || st.Cached {
		t.Fatalf("deleted output: %d calls, step %+v; want the tool called again", calls.Load(), st)
	}
	var enter string
	for _, e := range orchEvents(t, orch, third.ID) {
		if e.Type == run.EventStepEnter && e.StepKey == "assemble" {
			enter = string(e.Detail)
		}
	}
	mustContain(t, "the miss", enter, "output missing: "+out)
}

// orchEvents returns every event of run id that e has written so far.
func orchEvents(t *testing.T, e *engine.Engine, id string) []run.Event {
	t.Helper()
	var out []run.Event
	q := engine.EventQuery{RunID: id, Max: 10000}
	for {
		evs, err := e.PollEvents(context.Background(), q, 0)
		if err != nil {
			t.Fatalf("PollEvents: %v", err)
		}
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
		q.FromSeq = evs[len(evs)-1].Seq + 1
	}
}

// jsonEqualText reports whether two JSON texts are the same value.
func jsonEqualText(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && jsonOfValue(x) == jsonOfValue(y)
}

func jsonOfValue(v any) string {
	b, _ := json.Marshal(v) // map keys sorted
	return string(b)
}
