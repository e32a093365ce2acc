package gotest

import (
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

func TestForeachCallsOncePerItem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "maya__export_fbx"}); err != nil {
		t.Fatal(err)
	}
	srv := b.serve(flowtype.LaneMain, func(c flowtype.PendingCall) flowtype.ToolResult {
		return output(map[string]any{"fbx": strings.Replace(c.Args["scene"].(string), ".ma", ".fbx", 1)})
	})
	info := b.run(`
name: vendor
steps:
  - id: list
    tool: flow__echo
    args: { files: [{ path: a.ma }, { path: b.ma }, { path: c.ma }] }
  - id: per_file
    kind: foreach
    items: "$.list.files"
    as: file
    steps:
      - id: export
        tool: maya__export_fbx
        args: { scene: "{{file.path}}" }
      - id: report
        tool: flow__echo
        args: { fbx: "{{export.fbx}}", same: "{{steps.export.output.fbx}}", item: "{{item.path}}" }
  - id: push
    tool: flow__echo
    args: { all: "{{steps.per_file.output}}", second: "{{per_file[1].report.fbx}}" }
`, nil)
	if info.Status != run.StatusCompleted {
		t.Fatalf("status %s %+v", info.Status, info.Error)
	}
	if srv.calls.Load() != 3 {
		t.Fatalf("%d calls, want 3", srv.calls.Load())
	}
	keys := map[string]bool{}
	for _, c := range srv.pulled() {
		keys[c.StepKey] = true
	}
	for i := range 3 {
		if k := "per_file[" + string(rune('0'+i)) + "].export"; !keys[k] {
			t.Fatalf("no call with key %s: %v", k, keys)
		}
	}
	want := `[{"export":{"fbx":"a.fbx"},"report":{"fbx":"a.fbx","item":"a.ma","same":"a.fbx"}},` +
		`{"export":{"fbx":"b.fbx"},"report":{"fbx":"b.fbx","item":"b.ma","same":"b.fbx"}},` +
		`{"export":{"fbx":"c.fbx"},"report":{"fbx":"c.fbx","item":"c.ma","same":"c.fbx"}}]`
	if got := jsonOf(t, info.Outputs["per_file"]); got != want {
		t.Fatalf("foreach output\n got %s\nwant %s", got, want)
	}
	push := info.Outputs["push"].(map[string]any)
	if jsonOf(t, push["all"]) != want || push["second"] != "b.fbx" {
		t.Fatalf("push %s", jsonOf(t, push))
	}
	st := b.steps(info.ID)
	for _, k := range []string{"list", "per_file", "push", "per_file[0].export", "per_file[2].report"} {
		if st[k].Status != run.StepCompleted {
			t.Fatalf("step %s: %+v", k, st[k])
		}
	}
	if st["per_file[1].report"].StepID != "report" {
		t.Fatalf("instance step id %+v", st["per_file[1].report"])
	}
	// Status lists the instances outside iterations only.
	for _, s := range info.Steps {
		if strings.Contains(s.Key, "[") {
			t.Fatalf("Status lists iteration instance %s", s.Key)
		}
	}
	// Progress: 3 top-level steps, then 3 items × 2 body steps.
	var totals []int
	for _, e := range b.events(info.ID) {
		if len(totals) == 0 || totals[len(totals)-1] != e.Progress.Total {
			totals = append(totals, e.Progress.Total)
		}
	}
	if jsonOf(t, totals) != "[3,9]" || info.Progress != (run.Progress{Completed: 9, Total: 9}) {
		t.Fatalf("progress totals %v, final %+v", totals, info.Progress)
	}
}

func TestForeachItemsForms(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		items string
		want  string // the items seen, in order
	}{
		{`"$.list.files"`, `["a","b"]`},
		{`"$.list.files[*]"`, `["a","b"]`},
		{`"$.list.files[1]"`, `["b"]`},
		{`"{{list.files}}"`, `["a","b"]`},
		{`"{{steps.list.output.files}}"`, `["a","b"]`},
		{`[x, 2, true]`, `["x",2,true]`},
		{`"$.list.none"`, `[]`},
		{`"{{list.none}}"`, `[]`},
		{`"$.list.name"`, `["vendor"]`},
		{`"$.inputs.dirs"`, `["/a","/b"]`},
		{`"{{inputs.dirs}}"`, `["/a","/b"]`},
		{`[]`, `[]`},
	}
	for _, c := range cases {
		t.Run(c.items, func(t *testing.T) {
			t.Parallel()
			b := b.sub(t)
			info := b.run(`
inputs: { dirs: { type: array, default: ["/a", "/b"] } }
steps:
  - { id: list, tool: flow__echo, args: { files: [a, b], name: vendor } }
  - id: each
    kind: foreach
    items: `+c.items+`
    steps:
      - { id: e, tool: flow__echo, args: { v: "{{item}}" } }
`, nil)
			if info.Status != run.StatusCompleted {
				t.Fatalf("status %s %+v", info.Status, info.Error)
			}
			var seen []any
			for _, it := range info.Outputs["each"].([]any) {
				seen = append(seen, it.(map[string]any)["e"].(map[string]any)["v"])
			}
			if seen == nil {
				seen = []any{}
			}
			if got := jsonOf(t, seen); got != c.want {
				t.Fatalf("items %s, want %s", got, c.want)
			}
		})
	}
}

func TestNestedForeachKeysAndScopes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info := b.run(`
steps:
  - id: outer
    kind: foreach
    items: [[1, 2], [3]]
    as: row
    steps:
      - { id: tag, tool: flow__echo, args: { n: "{{row}}" } }
      - id: inner
        kind: foreach
        items: "{{row}}"
        as: cell
        concurrency: 2
        steps:
          - { id: leaf, tool: flow__echo, args: { cell: "{{cell}}", row: "{{row}}", item: "{{item}}", tag: "{{tag.n}}" } }
`, nil)
	if info.Status != run.StatusCompleted {
		t.Fatalf("status %s %+v", info.Status, info.Error)
	}
	st := b.steps(info.ID)
	for _, k := range []string{"outer", "outer[0].tag", "outer[0].inner", "outer[0].inner[0].leaf", "outer[0].inner[1].leaf", "outer[1].inner[0].leaf"} {
		if st[k].Status != run.StepCompleted {
			t.Fatalf("instance %s: %+v (have %d instances)", k, st[k], len(st))
		}
	}
	if len(st) != 1+2*2+3 {
		t.Fatalf("%d instances", len(st))
	}
	leaf := st["outer[0].inner[1].leaf"].Output.(map[string]any)
	if jsonOf(t, leaf) != `{"cell":2,"item":2,"row":[1,2],"tag":[1,2]}` {
		t.Fatalf("leaf sees %s", jsonOf(t, leaf))
	}
	want := `[{"inner":[{"leaf":{"cell":1,"item":1,"row":[1,2],"tag":[1,2]}},{"leaf":{"cell":2,"item":2,"row":[1,2],"tag":[1,2]}}],"tag":{"n":[1,2]}},` +
		`{"inner":[{"leaf":{"cell":3,"item":3,"row":[3],"tag":[3]}}],"tag":{"n":[3]}}]`
	if got := jsonOf(t, info.Outputs["outer"]); got != want {
		t.Fatalf("output\n got %s\nwant %s", got, want)
	}
}

// maxInFlight replays a run's events and returns the most body instances running at once.
func maxInFlight(b *testBundle, id, prefix string) int {
	cur, max := 0, 0
	for _, e := range b.events(id) {
		if !strings.HasPrefix(e.StepKey, prefix) {
			continue
		}
		switch e.Type {
		case run.EventStepEnter:
			cur++
			if cur > max {
				max = cur
			}
		case run.EventStepExit:
			cur--
		}
	}
	return max
}

const slowForeach = `
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 4
    steps:
      - { id: nap, tool: flow__sleep, args: { ms: 20 } }
`

func hundred() map[string]any {
	items := make([]any, 100)
	for i := range items {
		items[i] = float64(i)
	}
	return map[string]any{"items": items}
}

func TestForeachConcurrencyOnTheStubClock(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	id := b.submit(slowForeach, hundred())
	for round := range 25 {
		b.waitTimers(4)
		if p := b.clk.Pending(); p != 4 {
			t.Fatalf("round %d: %d sleepers, want 4", round, p)
		}
		b.clk.Advance(20 * time.Millisecond)
	}
	info := b.wait(id)
	if info.Status != run.StatusCompleted || len(info.Outputs["each"].([]any)) != 100 {
		t.Fatalf("status %s", info.Status)
	}
	if elapsed := b.clk.Now().Sub(t0); elapsed != 500*time.Millisecond {
		t.Fatalf("virtual time %v, want 500ms (a quarter of the 2s serial time)", elapsed)
	}
	if m := maxInFlight(b, id, "each["); m != 4 {
		t.Fatalf("max concurrency %d, want 4", m)
	}
}

// On the real clock the overlap is checked by the run's events (four iterations in flight) and
// by time against the tools' own sleeps: run one at a time, 40 sleeps of 50 ms take at least
// 2 s whatever the load, run four at a time about 0.5 s. The 1.5 s between is the slack for a
// loaded machine under the race detector.
func TestForeachConcurrencyOnTheRealClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const items, sleep = 40, 50 * time.Millisecond
	start := time.Now()
	info := b.run(`
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 4
    steps:
      - { id: nap, tool: flow__sleep, args: { ms: 50 } }
`, map[string]any{"items": hundred()["items"].([]any)[:items]})
	elapsed := time.Since(start)
	if info.Status != run.StatusCompleted || len(info.Outputs["each"].([]any)) != items {
		t.Fatalf("status %s", info.Status)
	}
	if m := maxInFlight(b, info.ID, "each["); m != 4 {
		t.Fatalf("max concurrency %d, want 4", m)
	}
	if serial := items * sleep; elapsed >= serial {
		t.Fatalf("took %v, as long as the %d sleeps one after another (%v): they did not overlap", elapsed, items, serial)
	}
}

func TestForeachOnAnyFail(t *testing.T) {
	t.Parallel()
	// Items are the number of times the body's tool fails; 9 fails the iteration.
	text := func(mode string) string {
		return `
steps:
  - id: each
    kind: foreach
    items: [0, 0, 9, 0, 0]
    on_any_fail: ` + mode + `
    steps:
      - { id: s, tool: flow__fail, args: { times: "{{item}}", kind: transient } }
      - { id: after, tool: flow__echo }
  - { id: next, tool: flow__echo }
`
	}
	cases := []struct {
		mode      string
		completed []int // iterations whose body completed
		absent    []int // iterations never started
	}{
		{"abort", []int{0, 1}, []int{3, 4}},
		{"continue", []int{0, 1, 3, 4}, nil},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			info := b.run(text(c.mode), nil)
			if info.Status != run.StatusFailed || info.Error.StepKey != "each[2].s" || info.Error.Kind != "transient" {
				t.Fatalf("status %s error %+v", info.Status, info.Error)
			}
			st := b.steps(info.ID)
			for _, i := range c.completed {
				k := "each[" + string(rune('0'+i)) + "]."
				if st[k+"s"].Status != run.StepCompleted || st[k+"after"].Status != run.StepCompleted {
					t.Fatalf("iteration %d: %+v %+v", i, st[k+"s"], st[k+"after"])
				}
			}
			for _, i := range c.absent {
				if _, ok := st["each["+string(rune('0'+i))+"].s"]; ok {
					t.Fatalf("iteration %d ran after the abort", i)
				}
			}
			if st["each[2].s"].Status != run.StepFailed || st["each[2].after"].Status != run.StepSkipped {
				t.Fatalf("failed iteration: %+v %+v", st["each[2].s"], st["each[2].after"])
			}
			if st["each"].Status != run.StepFailed || st["next"].Status != run.StepSkipped {
				t.Fatalf("foreach %+v next %+v", st["each"], st["next"])
			}
			mustContain(t, "foreach error", st["each"].Error.Message, "1 of 5 iterations failed; first: each[2].s")
		})
	}
}

func TestForeachAbortCancelsIterationsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	id := b.submit(`
steps:
  - id: each
    kind: foreach
    items: [a, b, c, d, e]
    concurrency: 3
    steps:
      - { id: s, tool: t, args: { v: "{{item}}" } }
`, nil)
	calls := map[string]flowtype.PendingCall{}
	for len(calls) < 3 {
		c := b.nextCall(flowtype.LaneMain)
		calls[c.Args["v"].(string)] = c
	}
	if err := b.eng.Host().Complete(calls["b"].ID, flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "fatal", Message: "corrupt scene"}}); err != nil {
		t.Fatal(err)
	}
	info := b.wait(id)
	if info.Status != run.StatusFailed || info.Error.StepKey != "each[1].s" {
		t.Fatalf("status %s error %+v", info.Status, info.Error)
	}
	st := b.steps(id)
	for _, k := range []string{"each[0].s", "each[2].s"} {
		if st[k].Status != run.StepCancelled {
			t.Fatalf("%s is %s, want cancelled", k, st[k].Status)
		}
		mustContain(t, "cancel reason", st[k].Error.Message, "each[1].s failed and on_any_fail is abort")
	}
	for _, v := range []string{"a", "c"} {
		if !b.eng.Host().Cancelled(calls[v].ID) {
			t.Fatalf("call %s is not reported cancelled", v)
		}
	}
	if _, ok := st["each[3].s"]; ok {
		t.Fatal("no new iteration starts after an abort")
	}
}
