package storetest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// testSearch: the search fields of store.RunFilter — input value, tool, step status, error kind,
// worker, error text (a substring ignoring ASCII case, LIKE's metacharacters literal) — alone,
// combined, with the time range and cursor paging, newest first; and the search index goes with
// a pruned run.
func testSearch(t *testing.T, s AttemptStore) {
	ctx := context.Background()
	mk := func(id string, at time.Duration, inputs string) store.Run {
		r := newRun(id, t0.Add(at))
		r.Inputs = json.RawMessage(inputs)
		return r
	}
	done := func(r store.Run) store.Run { r.Status, r.FinishedAt = run.StatusCompleted, r.CreatedAt; return r }
	long := strings.Repeat("x", store.MaxSearchText+1)
	write(t, s, &store.Batch{CreateRuns: []store.Run{
		done(mk("r1", 0, `{"shot":"sh010","frame":7,"hd":true,"scale":1.5}`)),
		mk("r2", time.Minute, `{"shot":"sh020","frame":"7","nested":{"shot":"sh010"}}`),
		mk("r3", 2*time.Minute, `{"shot":"sh010","long":"`+long+`"}`),
		mk("r4", 3*time.Minute, `{"shot":"50%_off\\"}`),
		mk("r5", 4*time.Minute, `[1,2]`),
	}})
	step := func(runID, key string, st run.StepStatus, kind, msg string) store.Step {
		return store.Step{RunID: runID, Key: key, StepID: key, Kind: "tool", Status: st, Attempt: 1,
			ErrorKind: kind, ErrorMessage: msg, UpdatedAt: t0, Insert: true}
	}
	att := func(runID, key string, n int, tool string, st run.StepStatus, worker, kind, msg string) store.Attempt {
		return store.Attempt{RunID: runID, StepKey: key, Attempt: n, Tool: tool, Status: st, Worker: worker,
			ErrorKind: kind, ErrorMessage: msg, StartedAt: t0}
	}
	write(t, s, &store.Batch{
		Steps: []store.Step{
			step("r1", "render", run.StepCompleted, "", ""),
			step("r1", "publish", run.StepSkipped, "", "upstream render was skipped: 100% DONE_x"),
			step("r2", "render", run.StepFailed, run.KindWorkerLost, "worker render/4242 lost: exit status 139"),
			step("r3", "render", run.StepCompleted, "", ""),
			step("r4", "comp", run.StepRunning, "", ""),
		},
		Attempts: []store.Attempt{
			att("r1", "render", 1, "maya.render", run.StepCompleted, "", "", ""),
			att("r2", "render", 1, "maya.render", run.StepFailed, "render/4242", run.KindTimeout, "Timed out after 30s"),
			att("r2", "render", 2, "maya.render", run.StepFailed, "render/4243", run.KindWorkerLost, "worker render/4242 lost: exit status 139"),
			att("r3", "render", 1, "nuke.comp", run.StepFailed, "renderfarm/1", run.KindTransient, `disk C:\tmp full`),
			att("r3", "render", 2, "nuke.comp", run.StepCompleted, "ENGINE-A/render/7", "", ""),
			att("r4", "comp", 1, "nuke.comp", run.StepRunning, "", "", ""),
		},
	})
	ids := func(f store.RunFilter) string {
		t.Helper()
		runs, err := s.ListRuns(ctx, f)
		if err != nil {
			t.Fatalf("ListRuns(%+v): %v", f, err)
		}
		var out []string
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return strings.Join(out, " ")
	}
	in := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		f    store.RunFilter
		want string
	}{
		{store.RunFilter{Inputs: in("shot", "sh010")}, "r3 r1"}, // not r2's nested shot
		{store.RunFilter{Inputs: in("shot", "SH010")}, ""},      // input values are exact
		{store.RunFilter{Inputs: in("frame", "7")}, "r2 r1"},    // the integer 7 and the string "7"
		{store.RunFilter{Inputs: in("hd", "true")}, "r1"},
		{store.RunFilter{Inputs: in("scale", "1.5")}, ""}, // reals are not indexed
		{store.RunFilter{Inputs: in("nested", `{"shot":"sh010"}`)}, ""},
		{store.RunFilter{Inputs: in("long", long)}, ""}, // longer than MaxSearchText: not indexed
		{store.RunFilter{Inputs: in("shot", "sh010", "frame", "7")}, "r1"},
		{store.RunFilter{Inputs: in("shot", `50%_off\`)}, "r4"},
		{store.RunFilter{Inputs: in("shot", `%`)}, ""},
		{store.RunFilter{Inputs: in("0", "1")}, ""}, // an array of inputs has no members
		{store.RunFilter{Tool: "maya.render"}, "r2 r1"},
		{store.RunFilter{Tool: "nuke.comp"}, "r4 r3"},
		{store.RunFilter{Tool: "maya.%"}, ""},
		{store.RunFilter{StepStatuses: []run.StepStatus{run.StepFailed}}, "r2"},
		{store.RunFilter{StepStatuses: []run.StepStatus{run.StepSkipped, run.StepRunning}}, "r4 r1"},
		{store.RunFilter{StepStatuses: []run.StepStatus{run.StepCompleted}}, "r3 r1"},
		{store.RunFilter{StepStatuses: []run.StepStatus{run.StepCompleted, run.StepFailed}}, "r3 r2 r1"},
		{store.RunFilter{ErrorKind: run.KindTimeout}, "r2"},    // an earlier attempt's error
		{store.RunFilter{ErrorKind: run.KindTransient}, "r3"},  // a step that then completed
		{store.RunFilter{ErrorKind: run.KindWorkerLost}, "r2"}, // the step's and an attempt's: listed once
		{store.RunFilter{ErrorKind: run.KindFatal}, ""},
		{store.RunFilter{Worker: "render/4242"}, "r2"},
		{store.RunFilter{Worker: "render"}, "r2"}, // the pool: not renderfarm, not ENGINE-A/render
		{store.RunFilter{Worker: "ENGINE-A"}, "r3"},
		{store.RunFilter{Worker: "render/424"}, ""},
		{store.RunFilter{Worker: "%"}, ""},
		{store.RunFilter{ErrorText: "exit status 139"}, "r2"},
		{store.RunFilter{ErrorText: "TIMED OUT"}, "r2"},
		{store.RunFilter{ErrorText: "100%"}, "r1"}, // a skipped step's reason
		{store.RunFilter{ErrorText: "%"}, "r1"},
		{store.RunFilter{ErrorText: "_"}, "r1"},
		{store.RunFilter{ErrorText: "e_x"}, "r1"},
		{store.RunFilter{ErrorText: "d%x"}, ""},
		{store.RunFilter{ErrorText: `C:\tmp`}, "r3"},
		{store.RunFilter{ErrorText: `\`}, "r3"},
		{store.RunFilter{ErrorText: `'; DROP TABLE workflows; --`}, ""},
		{store.RunFilter{ErrorText: strings.Repeat("a", 10000)}, ""},
		{store.RunFilter{Tool: "maya.render", ErrorKind: run.KindTimeout, Worker: "render"}, "r2"},
		{store.RunFilter{Tool: "maya.render", ErrorText: "disk"}, ""},
		{store.RunFilter{Inputs: in("shot", "sh010"), Tool: "nuke.comp"}, "r3"},
		{store.RunFilter{Inputs: in("shot", "sh010"), Since: t0.Add(time.Minute)}, "r3"},
		{store.RunFilter{Inputs: in("shot", "sh010"), Until: t0.Add(time.Minute)}, "r1"},
		{store.RunFilter{Tool: "maya.render", Limit: 1}, "r2"},
		{store.RunFilter{Tool: "maya.render", Limit: 1, After: &store.RunPosition{CreatedAt: t0.Add(time.Minute), ID: "r2"}}, "r1"},
	} {
		if got := ids(c.f); got != c.want {
			t.Errorf("ListRuns(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
	// A run's own error (cancelled before a step ran, interrupted): found by kind and text, and
	// as it is now — an error replaced or cleared by a later update is not found any more.
	setErr := func(e *store.RunError) { // r5 ends with e
		t.Helper()
		write(t, s, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r5", Status: run.StatusCancelled, Error: e,
			UpdatedAt: t0.Add(5 * time.Minute), FinishedAt: t0.Add(5 * time.Minute)}}})
	}
	setErr(&store.RunError{Kind: run.KindCancelled, Message: "cancelled: Wrong Camera 100%"})
	for _, c := range []struct {
		f    store.RunFilter
		want string
	}{
		{store.RunFilter{ErrorKind: run.KindCancelled}, "r5"},
		{store.RunFilter{ErrorText: "wrong camera"}, "r5"},
		{store.RunFilter{ErrorText: "100%"}, "r5 r1"},
		{store.RunFilter{ErrorKind: run.KindCancelled, ErrorText: "camera"}, "r5"},
		{store.RunFilter{ErrorKind: run.KindCancelled, Tool: "maya.render"}, ""},
	} {
		if got := ids(c.f); got != c.want {
			t.Errorf("run's own error: ListRuns(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
	setErr(&store.RunError{Kind: "interrupted", Message: "the engine stopped"})
	if got := ids(store.RunFilter{ErrorKind: run.KindCancelled}); got != "" {
		t.Errorf("a replaced run error is still found: %q", got)
	}
	if got := ids(store.RunFilter{ErrorKind: "interrupted", ErrorText: "ENGINE"}); got != "r5" {
		t.Errorf("the new run error: %q, want r5", got)
	}
	// Resumed: running again, its error cleared (and r5 not finished, for the prune below).
	write(t, s, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r5", Status: run.StatusRunning, UpdatedAt: t0.Add(6 * time.Minute)}}})
	if got := ids(store.RunFilter{ErrorKind: "interrupted"}); got != "" {
		t.Errorf("a cleared run error is still found: %q", got)
	}
	p, ok := s.(store.Pruner)
	if !ok {
		return
	}
	if n, err := p.Prune(ctx, t0.Add(time.Hour), nil); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1 (r1)", n, err)
	}
	if got := ids(store.RunFilter{Inputs: in("shot", "sh010")}); got != "r3" {
		t.Errorf("after pruning r1, shot=sh010 lists %q, want r3", got)
	}
}
