package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

type runsPage struct {
	Runs       []ui.RunSummary `json:"runs"`
	NextCursor string          `json:"next_cursor"`
}

// Cursor paging walks every run once, newest first, whatever the page size; filters apply.
func TestRunsArePagedByCursor(t *testing.T) {
	b := newBench(t, ui.Options{})
	ctx := context.Background()
	var want []string // newest first
	for i := range 23 {
		wf, in := "echo", map[string]any{"value": fmt.Sprint(i)}
		if i%4 == 3 {
			wf, in = "failing", nil
		}
		info, err := b.e.Run(ctx, engine.StartRequest{Workflow: wf, Inputs: in})
		if err != nil {
			t.Fatal(err)
		}
		want = append([]string{info.ID}, want...)
	}
	for _, limit := range []int{1, 5, 10, 23, 50} {
		var got []string
		cursor, pages := "", 0
		for {
			var p runsPage
			b.getJSON(t, fmt.Sprintf("/api/runs?limit=%d&cursor=%s", limit, url.QueryEscape(cursor)), &p)
			pages++
			if len(p.Runs) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(p.Runs))
			}
			for _, r := range p.Runs {
				got = append(got, r.ID)
			}
			if p.NextCursor == "" {
				break
			}
			cursor = p.NextCursor
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("limit %d: %d runs in %d pages\n got %v\nwant %v", limit, len(got), pages, got, want)
		}
	}
	var p runsPage
	b.getJSON(t, "/api/runs?status=failed&workflow=failing&limit=3", &p)
	if len(p.Runs) != 3 || p.NextCursor == "" {
		t.Fatalf("failed runs page: %+v", p)
	}
	r := p.Runs[0]
	if r.Name != "failing" || r.Status != run.StatusFailed || !r.Terminal || r.Error == nil || !strings.Contains(r.Error.Message, "disk full") ||
		r.FinishedAt == nil || r.Progress.Total != 2 || r.ID != want[0] && r.ID != want[1] && r.ID != want[2] && r.ID != want[3] {
		t.Errorf("summary %+v", r)
	}
	var rest runsPage
	b.getJSON(t, "/api/runs?status=failed&limit=50&cursor="+p.NextCursor, &rest)
	if len(rest.Runs) != 2 || rest.NextCursor != "" {
		t.Errorf("the rest of the failed runs: %+v", rest)
	}
	// The raw shape: the keys the front-end reads.
	_, body, _ := b.do(t, "GET", "/api/runs?limit=1", nil)
	for _, k := range []string{`"id"`, `"name"`, `"status"`, `"terminal"`, `"progress":{"completed"`, `"created_at"`, `"updated_at"`, `"finished_at"`, `"parent_run_id"`, `"error"`, `"next_cursor"`} {
		if !strings.Contains(string(body), k) {
			t.Errorf("GET /api/runs has no %s: %s", k, body)
		}
	}
	for _, q := range []string{"status=bogus", "limit=0", "limit=501", "limit=x", "cursor=!!", "cursor=" + url.QueryEscape("bm90LWEtY3Vyc29y"), "since=yesterday"} {
		if code, body, _ := b.do(t, "GET", "/api/runs?"+q, nil); code != 400 || errorCode(body) != run.CodeInvalidInput && errorCode(body) != run.CodeInvalidRequest {
			t.Errorf("?%s: %d %s", q, code, body)
		}
	}
	// waiting_approval is the dashboard's word for waiting.
	id := b.submit(t, "gated", map[string]any{"shot": "s1"})
	b.waitStatus(t, id, run.StatusWaiting)
	b.getJSON(t, "/api/runs?status=waiting_approval", &p)
	if len(p.Runs) != 1 || p.Runs[0].ID != id || p.Runs[0].Approvals != 1 {
		t.Errorf("waiting_approval: %+v", p.Runs)
	}
}

// The run page's data: RunInfo plus the graph, the instances and the attempts; the approval is
// answered with a name that the event records.
func TestRunDetailAndApproval(t *testing.T) {
	b := newBench(t, ui.Options{})
	id := b.submit(t, "gated", map[string]any{"shot": "sh010"})
	b.waitStatus(t, id, run.StatusWaiting)
	var d struct {
		RunID     string `json:"run_id"`
		Name      string `json:"name"`
		Status    string `json:"status"`
		Approvals []struct {
			StepKey string `json:"step_key"`
			Prompt  string `json:"prompt"`
		} `json:"approvals"`
		Graph     ui.Graph      `json:"graph"`
		Instances []ui.Instance `json:"instances"`
		Attempts  []ui.Attempt  `json:"attempts"`
	}
	b.getJSON(t, "/api/runs/"+id, &d)
	if d.RunID != id || d.Name != "gated" || d.Status != "waiting" || len(d.Approvals) != 1 || d.Approvals[0].Prompt != "push sh010?" {
		t.Fatalf("run detail %+v", d)
	}
	layers := map[string]int{}
	for _, n := range d.Graph.Nodes {
		layers[n.ID] = n.Layer
	}
	if fmt.Sprint(layers) != "map[human_gate:1 prep:0 push:2]" || len(d.Graph.Edges) != 2 || d.Graph.Edges[0] != (ui.GraphEdge{From: "prep", To: "human_gate"}) {
		t.Errorf("graph %+v", d.Graph)
	}
	if len(d.Instances) != 2 || d.Instances[0].Key != "prep" || d.Instances[0].Status != run.StepCompleted || d.Instances[1].Status != run.StepWaitingApproval {
		t.Errorf("instances %+v", d.Instances)
	}
	if len(d.Attempts) == 0 || d.Attempts[0].StepKey != "prep" || d.Attempts[0].Attempt != 1 || d.Attempts[0].Status != "completed" || d.Attempts[0].FinishedAt == nil {
		t.Errorf("attempts %+v", d.Attempts)
	}
	// Refused: no name, no step, a key that is not open.
	b.post(t, "/api/runs/"+id+"/approve", map[string]any{"step": "human_gate", "approved": true}, 400)
	b.post(t, "/api/runs/"+id+"/approve", map[string]any{"by": "ann", "approved": true}, 400)
	b.post(t, "/api/runs/"+id+"/approve", map[string]any{"by": "ann", "step": "push", "approved": true}, 409)
	b.post(t, "/api/runs/"+id+"/approve", map[string]any{"by": "ann", "step": "human_gate", "approved": true, "bogus": 1}, 400)
	b.post(t, "/api/runs/nope/approve", map[string]any{"by": "ann", "step": "human_gate", "approved": true}, 404)
	b.post(t, "/api/runs/"+id+"/approve", map[string]any{"by": "Ann Producer", "step": "human_gate", "approved": true, "comment": "looks good"}, 200)
	b.waitStatus(t, id, run.StatusCompleted)
	evs := events(t, b.e, id, run.EventApproveResolved)
	if len(evs) != 1 || !strings.Contains(string(evs[0].Detail), `"by":"Ann Producer"`) || !strings.Contains(string(evs[0].Detail), "looks good") {
		t.Errorf("approve_resolved %v", evs)
	}
	// One step in full.
	var st map[string]any
	b.getJSON(t, "/api/runs/"+id+"/steps/push", &st)
	if st["status"] != "completed" || st["tool"] != "flow__echo" || fmt.Sprint(st["output"]) != "map[value:pushed]" || fmt.Sprint(st["declared_args"]) != "map[value:pushed]" ||
		fmt.Sprint(st["args"]) != "map[value:pushed]" || len(st["attempt_history"].([]any)) != 1 {
		t.Errorf("step %v", st)
	}
	if code, body, _ := b.do(t, "GET", "/api/runs/"+id+"/steps/nope", nil); code != 404 || errorCode(body) != "not_found" {
		t.Errorf("unknown step: %d %s", code, body)
	}
	if code, body, _ := b.do(t, "GET", "/api/runs/nope", nil); code != 404 || errorCode(body) != "not_found" {
		t.Errorf("unknown run: %d %s", code, body)
	}
	if code, _, _ := b.do(t, "GET", "/api/nothing", nil); code != 404 {
		t.Errorf("unknown route: %d", code)
	}
}

// A retried step has one attempt per try in the Gantt, the failed ones with their error.
func TestAttemptsOfARetriedStep(t *testing.T) {
	b := newBench(t, ui.Options{})
	info, err := b.e.Run(context.Background(), engine.StartRequest{Spec: mustSpec(t, `
name: flaky
steps:
  - id: flaky
    tool: flow__fail
    args: {times: 2, kind: transient, message: "license server busy"}
    retry: {max_attempts: 3, backoff: fixed, initial_delay_ms: 1, retry_on: [transient]}
`)})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, info)
	}
	var d struct {
		Attempts []ui.Attempt `json:"attempts"`
	}
	b.getJSON(t, "/api/runs/"+info.ID, &d)
	var got []string
	for _, a := range d.Attempts {
		s := fmt.Sprintf("%s#%d:%s", a.StepKey, a.Attempt, a.Status)
		if a.Error != nil {
			s += ":" + a.Error.Message
		}
		got = append(got, s)
	}
	if strings.Join(got, " ") != "flaky#1:failed:license server busy flaky#2:failed:license server busy flaky#3:completed" {
		t.Errorf("attempts %v", got)
	}
}

func TestCancelPauseUnpauseResumeRecordWhoDidIt(t *testing.T) {
	b := newBench(t, ui.Options{})
	id := b.submit(t, "slow", nil)
	b.waitStatus(t, id, run.StatusRunning)
	base := "/api/runs/" + id
	b.post(t, base+"/pause", map[string]any{"reason": "no name"}, 400)
	b.post(t, base+"/resume", map[string]any{"by": "ann"}, 409) // still running
	b.post(t, base+"/pause", map[string]any{"by": "wrangler", "reason": "farm maintenance"}, 200)
	b.waitStatus(t, id, run.StatusPaused)
	b.post(t, base+"/unpause", map[string]any{"by": "wrangler"}, 200)
	b.waitStatus(t, id, run.StatusRunning)
	for _, typ := range []string{run.EventRunPaused, run.EventRunUnpaused} {
		if evs := events(t, b.e, id, typ); len(evs) != 1 || !strings.Contains(string(evs[0].Detail), `"by":"wrangler"`) {
			t.Errorf("%s: %v", typ, evs)
		}
	}
	b.post(t, base+"/cancel", map[string]any{"by": "Sup Ervisor", "reason": "wrong shot"}, 200)
	info := b.waitStatus(t, id, run.StatusCancelled)
	if info.Error == nil || !strings.Contains(info.Error.Message, "Sup Ervisor") || !strings.Contains(info.Error.Message, "wrong shot") {
		t.Errorf("the cancelled run's error does not say who: %+v", info.Error)
	}
	res := b.post(t, base+"/resume", map[string]any{"by": "Ann", "force": []string{" wait ", ""}}, 200)
	if res["run_id"] != id {
		t.Errorf("resume answer %v", res)
	}
	b.waitStatus(t, id, run.StatusRunning)
	if evs := events(t, b.e, id, run.EventWorkflowResumed); len(evs) != 1 || string(evs[0].Detail) != `{"by":"Ann","forced":["wait"]}` {
		t.Errorf("workflow_resumed: %v", evs)
	}
	b.post(t, base+"/cancel", map[string]any{"by": "Ann"}, 200)
	b.waitStatus(t, id, run.StatusCancelled)
	b.post(t, "/api/runs/nope/cancel", map[string]any{"by": "Ann"}, 404)
	b.post(t, "/api/runs/nope/resume", map[string]any{"by": "Ann"}, 404)
	b.post(t, base+"/unpause", map[string]any{"by": "Ann"}, 409) // finished
	code, body, _ := b.do(t, "POST", base+"/cancel", nil)
	if code != 400 || errorCode(body) != run.CodeInvalidInput {
		t.Errorf("an empty body: %d %s", code, body)
	}
}

func TestWorkflowsAPI(t *testing.T) {
	b := newBench(t, ui.Options{})
	var list struct {
		Workflows []struct {
			Name, Description string
			Version, Steps    int
		} `json:"workflows"`
	}
	b.getJSON(t, "/api/workflows", &list)
	var names []string
	for _, w := range list.Workflows {
		names = append(names, w.Name)
	}
	if strings.Join(names, " ") != "echo failing gated slow" || list.Workflows[2].Description != "prep, a human gate, push" || list.Workflows[2].Steps != 3 {
		t.Errorf("workflows %+v", list.Workflows)
	}
	// A second version of gated.
	if err := b.e.Register(mustSpec(t, strings.Replace(gated, "value: pushed", "value: pushed2", 1))); err != nil {
		t.Fatal(err)
	}
	var w struct {
		Name     string                   `json:"name"`
		Versions []engine.WorkflowVersion `json:"versions"`
		Graph    ui.Graph                 `json:"graph"`
	}
	b.getJSON(t, "/api/workflows/gated", &w)
	if w.Name != "gated" || len(w.Versions) != 2 || !w.Versions[0].Current || w.Versions[0].Version != 2 || len(w.Graph.Nodes) != 3 {
		t.Errorf("workflow %+v", w)
	}
	if code, _, _ := b.do(t, "GET", "/api/workflows/nope", nil); code != 404 {
		t.Errorf("unknown workflow: %d", code)
	}
}

func TestSchedulesAPIEnableDisable(t *testing.T) {
	b := newBench(t, ui.Options{})
	sp := flowtype.ScheduleSpec{ID: "nightly", Workflow: "echo", Enabled: true, MaxConcurrent: 1, Inputs: map[string]any{"value": "x"},
		Trigger: flowtype.ScheduleTrigger{Kind: "interval", Every: "1h"}}
	if err := b.e.Schedule(sp); err != nil {
		t.Fatal(err)
	}
	if err := b.e.StartScheduler(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.e.StopScheduler(context.Background()) })
	type row struct {
		ID       string `json:"id"`
		Enabled  bool   `json:"enabled"`
		Workflow string `json:"workflow"`
		Trigger  string `json:"trigger"`
		NextFire string `json:"next_fire"`
		Toggled  *struct {
			By      string `json:"by"`
			Enabled bool   `json:"enabled"`
		} `json:"toggled"`
	}
	var list struct {
		Schedules []row `json:"schedules"`
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.getJSON(t, "/api/schedules", &list)
		if len(list.Schedules) == 1 && list.Schedules[0].NextFire != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(list.Schedules) != 1 || list.Schedules[0].ID != "nightly" || !list.Schedules[0].Enabled || list.Schedules[0].Trigger != "every 1h" || list.Schedules[0].NextFire == "" {
		t.Fatalf("schedules %+v", list.Schedules)
	}
	b.post(t, "/api/schedules/nightly/disable", map[string]any{}, 400) // no name
	b.post(t, "/api/schedules/nightly/disable", map[string]any{"by": "td"}, 200)
	list.Schedules = nil
	b.getJSON(t, "/api/schedules", &list)
	if s := list.Schedules[0]; s.Enabled || s.NextFire != "" || s.Toggled == nil || s.Toggled.By != "td" || s.Toggled.Enabled {
		t.Errorf("after disable: %+v", s)
	}
	b.post(t, "/api/schedules/nightly/enable", map[string]any{"by": "td"}, 200)
	list.Schedules = nil
	b.getJSON(t, "/api/schedules", &list)
	if s := list.Schedules[0]; !s.Enabled || s.Toggled == nil || !s.Toggled.Enabled {
		t.Errorf("after enable: %+v", s)
	}
	b.post(t, "/api/schedules/nope/enable", map[string]any{"by": "td"}, 404)
	var fires struct {
		Fires []engine.Fire `json:"fires"`
	}
	b.getJSON(t, "/api/schedules/nightly/fires?limit=10", &fires)
	if fires.Fires == nil {
		t.Error("fires is null, want a list")
	}
	if code, _, _ := b.do(t, "GET", "/api/schedules/nope/fires", nil); code != 404 {
		t.Errorf("fires of an unknown schedule: %d", code)
	}
	if code, _, _ := b.do(t, "GET", "/api/schedules/nightly/fires?limit=0", nil); code != 400 {
		t.Errorf("limit=0: %d", code)
	}
}

func mustSpec(t testing.TB, text string) *spec.Spec {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var _ = json.Marshal

// GET /api/runs searches (docs/reference/cli/inspecting.md "runs"): by input value, tool, step status, error kind and
// text, time; combined, paged; a bad search value is a 400 naming the valid ones.
func TestRunsSearch(t *testing.T) {
	b := newBench(t, ui.Options{})
	ctx := context.Background()
	var echo, failing []string // newest first
	for i := range 6 {
		wf, in := "echo", map[string]any{"value": fmt.Sprintf("v%d", i%2)}
		if i%3 == 2 {
			wf, in = "failing", nil
		}
		info, err := b.e.Run(ctx, engine.StartRequest{Workflow: wf, Inputs: in})
		if err != nil {
			t.Fatal(err)
		}
		if wf == "echo" {
			echo = append([]string{info.ID}, echo...)
		} else {
			failing = append([]string{info.ID}, failing...)
		}
	}
	ids := func(q string) string {
		t.Helper()
		var p runsPage
		b.getJSON(t, "/api/runs?"+q, &p)
		var got []string
		for _, r := range p.Runs {
			got = append(got, r.ID)
		}
		return strings.Join(got, " ")
	}
	for q, want := range map[string]string{
		"input=value%3Dv0":     echo[0] + " " + echo[3], // runs 4 and 0
		"error_text=DISK+FULL": strings.Join(failing, " "),
		"error_text=DISK+FULL&since=1h&until=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)): strings.Join(failing, " "),
		"error_text=%25": "",
		"step_status=failed,skipped&workflow=failing&limit=1": failing[0],
		"until=2h": "",
	} {
		if got := ids(q); got != want {
			t.Errorf("?%s: %q, want %q", q, got, want)
		}
	}
	for q, says := range map[string]string{
		"step_status=done":                  "use one of pending",
		"error_kind=timout":                 "use one of timeout",
		"until=2026-13-01":                  "RFC 3339",
		"input=value%3Dv0&input=value%3Dv1": "given twice",
		"input=value":                       "KEY=VALUE",
		"tool=" + strings.Repeat("x", 300):  "at most 256",
	} {
		code, body, _ := b.do(t, "GET", "/api/runs?"+q, nil)
		if code != 400 || !strings.Contains(string(body), says) {
			t.Errorf("?%.40s: %d %s; want 400 saying %q", q, code, body, says)
		}
	}
}
