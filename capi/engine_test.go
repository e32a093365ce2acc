package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func openEngine(t *testing.T) uint64 {
	t.Helper()
	h := uint64(mustOp(t, 0, opEngineOpen, `{"config": {}}`)["handle"].(float64))
	t.Cleanup(func() { dispatch(h, nil, opEngineClose) })
	return h
}

func TestEngineExportsRunAHostTool(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	mustOp(t, h, opToolRegister, `{"name": "double", "lane": "main"}`)
	sub := mustOp(t, h, opRunSubmit, `{"spec": "steps: [{id: d, tool: double, args: {x: \"{{inputs.x}}\"}}]", "inputs": {"x": 21}}`)
	runID := sub["run_id"].(string)
	next := fmt.Sprintf(`{"lanes": ["main", "worker"], "max": 4, "timeout_ms": 5000, "run_id": %q, "events_after": 0}`, runID)
	res := mustOp(t, h, opCallsNext, next)
	calls := res["calls"].([]any)
	if len(calls) != 1 {
		t.Fatalf("calls %v", res)
	}
	c := calls[0].(map[string]any)
	if c["tool"] != "double" || c["args"].(map[string]any)["x"] != float64(21) || c["step_key"] != "d" {
		t.Fatalf("call %v", c)
	}
	if m := mustOp(t, h, opCallCancelled, fmt.Sprintf(`{"call_id": %v}`, c["call_id"])); m["cancelled"] != false {
		t.Fatalf("cancelled %v", m)
	}
	res = mustOp(t, h, opCallsComplete, fmt.Sprintf(`{"call_id": %v, "output": {"y": 42}, "next": %s}`, c["call_id"], next))
	if res["accepted"] != true || len(res["calls"].([]any)) != 0 || res["run"].(map[string]any)["terminal"] != true {
		t.Fatalf("complete %v", res)
	}
	if evs, _ := res["events"].([]any); len(evs) == 0 {
		t.Fatalf("no events piggybacked: %v", res)
	}
	st := mustOp(t, h, opRunWait, fmt.Sprintf(`{"run_id": %q, "timeout_ms": 1000}`, runID))
	if st["status"] != "completed" || st["outputs"].(map[string]any)["d"].(map[string]any)["y"] != float64(42) {
		t.Fatalf("status %v", st)
	}
	// A late answer is not accepted but is not an error either.
	late := mustOp(t, h, opCallsComplete, fmt.Sprintf(`{"call_id": %v, "output": 1}`, c["call_id"]))
	if late["accepted"] != false {
		t.Fatalf("late %v", late)
	}
	evs := mustOp(t, h, opEventsNext, `{"after_seq": 0, "timeout_ms": 0}`)
	if n := len(evs["events"].([]any)); n < 3 || evs["last_seq"].(float64) < float64(n) {
		t.Fatalf("events %v", evs)
	}
	runs := mustOp(t, h, opRunsList, `{"status": ["completed"]}`)
	if len(runs["runs"].([]any)) != 1 {
		t.Fatalf("runs %v", runs)
	}
	if p := mustOp(t, h, opRunsPrune, `{"older_than_secs": 3600}`); p["pruned"] != float64(0) {
		t.Fatalf("pruning runs older than an hour: %v", p)
	}
	if p := mustOp(t, h, opRunsPrune, `{"finished_before": "2999-01-01T00:00:00Z", "statuses": ["failed"]}`); p["pruned"] != float64(0) {
		t.Fatalf("pruning failed runs: %v", p)
	}
	// "older_than_secs": 0 prunes the runs that finished before now: wait until the wall clock
	// has moved past the finish (on Windows it moves in ticks of up to 15.6 ms).
	for finished := time.Now().Round(0); !time.Now().Round(0).After(finished); { // Round(0): the wall clock
		time.Sleep(time.Millisecond)
	}
	if p := mustOp(t, h, opRunsPrune, `{"older_than_secs": 0, "statuses": ["completed"]}`); p["pruned"] != float64(1) {
		t.Fatalf("pruning the completed run: %v", p)
	}
	if runs := mustOp(t, h, opRunsList, `{}`); len(runs["runs"].([]any)) != 0 {
		t.Fatalf("runs after the prune: %v", runs)
	}
}

// A call a puller took and did not answer goes back to the queue when the puller hands it back
// or closes, and is then pulled again (by any puller) and answered once.
func TestPulledCallsAreHandedBack(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	mustOp(t, h, opToolRegister, `{"name": "t", "lane": "main"}`)
	runID := mustOp(t, h, opRunSubmit, `{"spec": "steps: [{id: a, tool: t}]"}`)["run_id"].(string)
	p1 := mustOp(t, h, opPullerOpen, `{}`)["puller"].(float64)
	p2 := mustOp(t, h, opPullerOpen, `{}`)["puller"].(float64)
	pull := func(p float64) []any {
		return mustOp(t, h, opCallsNext, fmt.Sprintf(`{"puller": %v, "max": 4, "timeout_ms": 2000}`, p))["calls"].([]any)
	}
	calls := pull(p1)
	if len(calls) != 1 {
		t.Fatalf("calls %v", calls)
	}
	id := calls[0].(map[string]any)["call_id"]
	if r := mustOp(t, h, opCallsRelease, fmt.Sprintf(`{"puller": %v, "call_ids": [%v]}`, p2, id)); r["released"] != float64(0) {
		t.Fatalf("p2 handed back p1's call: %v", r)
	}
	if r := mustOp(t, h, opCallsRelease, fmt.Sprintf(`{"puller": %v, "call_ids": [%v]}`, p1, id)); r["released"] != float64(1) {
		t.Fatalf("release %v", r)
	}
	if calls = pull(p2); len(calls) != 1 || calls[0].(map[string]any)["call_id"] != id {
		t.Fatalf("after release %v", calls)
	}
	if r := mustOp(t, h, opPullerClose, fmt.Sprintf(`{"puller": %v}`, p2)); r["released"] != float64(1) {
		t.Fatalf("close %v", r)
	}
	if calls = pull(p1); len(calls) != 1 || calls[0].(map[string]any)["call_id"] != id {
		t.Fatalf("after close %v", calls)
	}
	mustOp(t, h, opCallsComplete, fmt.Sprintf(`{"call_id": %v, "output": 7}`, id))
	st := mustOp(t, h, opRunWait, fmt.Sprintf(`{"run_id": %q, "timeout_ms": 5000}`, runID))
	if st["status"] != "completed" {
		t.Fatalf("status %v", st)
	}
	if r := mustOp(t, h, opPullerClose, fmt.Sprintf(`{"puller": %v}`, p1)); r["released"] != float64(0) {
		t.Fatalf("an answered call was handed back: %v", r)
	}
	for _, c := range []struct {
		fn   op
		in   string
		code string
	}{
		{opCallsNext, fmt.Sprintf(`{"puller": %v}`, p2), "not_found"},
		{opCallsRelease, `{"puller": 12345, "call_ids": []}`, "not_found"},
		{opPullerClose, `{}`, "invalid_request"},
	} {
		out, rc := dispatch(h, []byte(c.in), c.fn)
		if rc == rcOK || !strings.Contains(string(out), `"code":"`+c.code+`"`) {
			t.Fatalf("%s: rc %d %s", c.in, rc, out)
		}
	}
}

func TestEngineExportErrors(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	cases := []struct {
		name string
		h    uint64
		fn   op
		in   string
		code string
	}{
		{"stale handle", 987654, opRunStatus, `{"run_id": "x"}`, "stale_handle"},
		{"handle zero", 0, opRunSubmit, `{"spec": "steps: []"}`, "stale_handle"},
		{"unknown run", h, opRunStatus, `{"run_id": "nope"}`, "not_found"},
		{"missing run id", h, opRunCancel, `{}`, "invalid_request"},
		{"cancel with a wait", h, opRunCancel, `{"run_id": "x", "timeout_ms": 5}`, "invalid_request"},
		{"a host tool that says it is built in", h, opToolRegister, `{"name": "t", "builtin": true}`, "invalid_request"},
		{"bad spec", h, opRunSubmit, `{"spec": "steps: [{id: a, tol: t}]"}`, "validation_failed"},
		{"unknown tool", h, opRunSubmit, `{"spec": "steps: [{id: a, tool: nope}]"}`, "unknown_tool"},
		{"bad lane", h, opCallsNext, `{"lanes": ["gpu"]}`, "invalid_request"},
		{"unknown call", h, opCallsComplete, `{"call_id": 99999, "output": 1}`, "not_found"},
		{"approve without approved", h, opRunApprove, `{"run_id": "x", "step": "s"}`, "invalid_request"},
		{"bad config", 0, opEngineOpen, `{"config": {"env_allow": ["["]}}`, "invalid_request"},
		{"unknown config field", 0, opEngineOpen, `{"config": {"dbb": ""}}`, "invalid_request"},
		{"prune without an age", h, opRunsPrune, `{}`, "invalid_request"},
		{"prune with two ages", h, opRunsPrune, `{"older_than_secs": 1, "finished_before": "2026-01-01T00:00:00Z"}`, "invalid_request"},
		{"prune a negative age", h, opRunsPrune, `{"older_than_secs": -1}`, "invalid_request"},
		{"prune running runs", h, opRunsPrune, `{"older_than_secs": 0, "statuses": ["running"]}`, "invalid_request"},
	}
	for _, tc := range cases {
		out, rc := dispatch(tc.h, []byte(tc.in), tc.fn)
		if rc == rcOK || !strings.Contains(string(out), `"code":"`+tc.code+`"`) {
			t.Errorf("%s: rc %d %s", tc.name, rc, out)
		}
	}
	// Closing twice is harmless; the handle is stale afterwards.
	h2 := uint64(mustOp(t, 0, opEngineOpen, `{}`)["handle"].(float64))
	if m := mustOp(t, h2, opEngineClose, `{}`); m["closed"] != true {
		t.Fatal(m)
	}
	if m := mustOp(t, h2, opEngineClose, `{}`); m["closed"] != false {
		t.Fatal(m)
	}
	if out, rc := dispatch(h2, []byte(`{"lanes":["main"]}`), opCallsNext); rc == rcOK || !strings.Contains(string(out), "stale_handle") {
		t.Fatalf("after close: %s", out)
	}
}

// serve_status reports the servers of an engine; it waits only for an MCP stdio stream to end,
// so without one it answers at once whatever timeout_ms says. (The stdio stream's end is tested
// end to end: tests/py/test_cli_serve_stdio.py.)
func TestServeStatus(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	if st := mustOp(t, h, opServeStatus, `{"timeout_ms": 60000}`); len(st) != 0 {
		t.Fatalf("status of an engine serving nothing: %v", st)
	}
	addr := mustOp(t, h, opServeStart, `{"webhooks": "127.0.0.1:0"}`)["webhooks_addr"]
	st := mustOp(t, h, opServeStatus, `{"timeout_ms": 60000}`)
	if st["webhooks_addr"] != addr || st["mcp_stdio"] != nil {
		t.Fatalf("status with webhooks on %v: %v", addr, st)
	}
	mustOp(t, h, opServeStop, `{}`)
	if st := mustOp(t, h, opServeStatus, `{}`); len(st) != 0 {
		t.Fatalf("status after serve_stop: %v", st)
	}
	if out, rc := dispatch(987654, []byte(`{}`), opServeStatus); rc == rcOK || !strings.Contains(string(out), "stale_handle") {
		t.Fatalf("status of a stale handle: %s", out)
	}
}

// TestRunDry: dccflow_run_dry answers from fixtures (a large integer stays exact), applies
// approvals, queues no host call and records no run.
func TestRunDry(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	mustOp(t, h, opToolRegister, `{"name": "export_fbx", "lane": "main"}`)
	out, rc := dispatch(h, []byte(`{"spec": "steps:\n  - {id: find, tool: sg__find, args: {code: \"{{inputs.code}}\"}}\n  - {id: export, tool: export_fbx, args: {id: \"{{find.id}}\"}}\n  - {id: gate, kind: approve, prompt: fine}\n",
		"inputs": {"code": "hero"}, "fixtures": {"sg__find": {"id": 9007199254740993}}, "approvals": {"gate": false}}`), opRunDry)
	if rc != rcOK {
		t.Fatalf("rc %d: %s", rc, out)
	}
	s := string(out)
	for _, want := range []string{`"args":{"id":9007199254740993}`, `"status":"failed"`, `"kind":"denied"`, `"unknown_tools":["sg__find"]`,
		`"approved":false`, `"output_from":"tool","fixture":"sg__find"`} {
		if !strings.Contains(s, want) {
			t.Errorf("the answer lacks %s: %s", want, s)
		}
	}
	if runs := mustOp(t, h, opRunsList, `{}`); len(runs["runs"].([]any)) != 0 {
		t.Errorf("a dry run left a run: %v", runs)
	}
	next := mustOp(t, h, opCallsNext, `{"lanes": ["main"], "max": 4, "timeout_ms": 0}`)
	if calls, _ := next["calls"].([]any); len(calls) != 0 {
		t.Errorf("a dry run queued calls: %v", next)
	}
}

// TestCallsCompleteMany answers several calls pulled in one crossing with one crossing, which
// also pulls the next ones; a malformed answer takes none of the batch, an unknown call id takes
// the others and fails the crossing naming it.
func TestCallsCompleteMany(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	mustOp(t, h, opToolRegister, `{"name": "t", "lane": "worker"}`)
	runID := mustOp(t, h, opRunSubmit, `{"spec": "steps: [{id: each, kind: foreach, items: [1, 2, 3], concurrency: 3, steps: [{id: f, tool: t}]}, {id: d, tool: t}]"}`)["run_id"].(string)
	p := mustOp(t, h, opPullerOpen, `{}`)["puller"].(float64)
	next := fmt.Sprintf(`{"puller": %v, "lanes": ["worker"], "max": 8, "timeout_ms": 2000}`, p)
	var calls []any
	deadline := time.Now().Add(5 * time.Second)
	for len(calls) < 3 && time.Now().Before(deadline) {
		calls = append(calls, mustOp(t, h, opCallsNext, next)["calls"].([]any)...)
	}
	if len(calls) != 3 {
		t.Fatalf("calls %v", calls)
	}
	id := func(i int) any { return calls[i].(map[string]any)["call_id"] }
	// Each call is answered with its item's number (each[0] → 1): the three items' calls are
	// queued by three goroutines, in any order.
	val := func(i int) int {
		var item int
		if _, err := fmt.Sscanf(calls[i].(map[string]any)["step_key"].(string), "each[%d].f", &item); err != nil {
			t.Fatalf("call %d: %v", i, calls[i])
		}
		return item + 1
	}
	// A malformed answer: none is taken.
	bad := fmt.Sprintf(`{"answers": [{"call_id": %v, "output": %d}, {"call_id": %v, "files": [{"path": ""}]}]}`, id(0), val(0), id(1))
	if out, rc := dispatch(h, []byte(bad), opCallsCompleteMany); rc == rcOK || !strings.Contains(string(out), `answers[1]`) || !strings.Contains(string(out), `"code":"invalid_request"`) {
		t.Fatalf("malformed batch: rc %d %s", rc, out)
	}
	// An unknown id: the others are taken, the crossing fails naming it.
	mixed := fmt.Sprintf(`{"answers": [{"call_id": %v, "output": %d}, {"call_id": 99999, "output": 1}], "next": %s}`, id(0), val(0), next)
	if out, rc := dispatch(h, []byte(mixed), opCallsCompleteMany); rc == rcOK || !strings.Contains(string(out), `answers[1]: no tool call with id 99999`) || !strings.Contains(string(out), `"code":"not_found"`) {
		t.Fatalf("unknown id: rc %d %s", rc, out)
	}
	res := mustOp(t, h, opCallsCompleteMany, fmt.Sprintf(`{"answers": [{"call_id": %v, "output": %d}, {"call_id": %v, "output": %d}, {"call_id": %v, "output": %d}], "next": %s}`,
		id(0), val(0), id(1), val(1), id(2), val(2), next))
	if acc, _ := res["accepted"].([]any); len(acc) != 3 || acc[0] != false || acc[1] != true || acc[2] != true {
		t.Fatalf("accepted %v (the first was answered already)", res["accepted"])
	}
	got := res["calls"].([]any)
	for len(got) == 0 && time.Now().Before(deadline) {
		got = mustOp(t, h, opCallsNext, next)["calls"].([]any)
	}
	if len(got) != 1 || got[0].(map[string]any)["step_key"] != "d" {
		t.Fatalf("next calls %v", got)
	}
	if r := mustOp(t, h, opCallsCompleteMany, fmt.Sprintf(`{"answers": [{"call_id": %v, "output": 4}]}`, got[0].(map[string]any)["call_id"])); fmt.Sprint(r) != "map[accepted:[true]]" {
		t.Fatalf("without next: %v", r)
	}
	mustOp(t, h, opRunWait, fmt.Sprintf(`{"run_id": %q, "timeout_ms": 5000}`, runID))
	st := mustOp(t, h, opRunStatus, fmt.Sprintf(`{"run_id": %q}`, runID))
	if st["status"] != "completed" {
		t.Fatalf("status %v", st)
	}
	if out := st["outputs"].(map[string]any); fmt.Sprint(out["each"]) != "[map[f:1] map[f:2] map[f:3]]" || out["d"] != float64(4) {
		t.Fatalf("outputs %v", out)
	}
}
