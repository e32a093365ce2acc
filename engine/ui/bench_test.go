package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"strings"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

// seedRuns writes n finished runs of 3 workflows straight into a new SQLite database (as many
// nights of runs would leave it) and returns its path.
func seedRuns(tb testing.TB, n int) string {
	tb.Helper()
	ctx := context.Background()
	db := filepath.Join(tb.TempDir(), "flow.db")
	s, err := storeopen.File(ctx, db, false)
	if err != nil {
		tb.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	names := []string{"echo", "failing", "gated"}
	sp := json.RawMessage(`{"name":"echo","inputs":{"value":{"type":"string","required":true}},"steps":[{"id":"say","tool":"flow__echo","args":{"value":"{{inputs.value}}"}}]}`)
	for i := 0; i < n; {
		b := &store.Batch{}
		for ; i < n && len(b.CreateRuns) < 1000; i++ {
			at := t0.Add(time.Duration(i) * time.Minute)
			st := run.StatusCompleted
			var re *store.RunError
			if i%7 == 0 {
				st, re = run.StatusFailed, &store.RunError{Kind: "error", Message: "disk full"}
			}
			b.CreateRuns = append(b.CreateRuns, store.Run{ID: fmt.Sprintf("r%08d", i), Name: names[i%3], SpecJSON: sp, SpecHash: "h",
				Inputs: json.RawMessage(`{"value":"x"}`), Status: st, Error: re, Origin: "local", Progress: run.Progress{Completed: 1, Total: 1},
				CreatedAt: at, UpdatedAt: at.Add(time.Second), FinishedAt: at.Add(time.Second)})
		}
		if err := s.Write(ctx, b); err != nil {
			tb.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	return db
}

// GET /api/runs?limit=50 over 10,000 runs in SQLite: the first page, a page deep in the list
// (cursor) and a filtered page. docs/guide/ui.md quotes the figures.
func BenchmarkRunsPage10k(b *testing.B) {
	e := newEngine(b, seedRuns(b, 10000))
	bn := benchOver(b, e, ui.Options{})
	var deep string
	{
		var p runsPage
		bn.getJSON(b, "/api/runs?limit=500", &p)
		bn.getJSON(b, "/api/runs?limit=500&cursor="+p.NextCursor, &p) // after 1,000 runs
		deep = p.NextCursor
	}
	for _, c := range []struct{ name, query string }{
		{"first", "/api/runs?limit=50"},
		{"cursor", "/api/runs?limit=50&cursor=" + deep},
		{"failed", "/api/runs?limit=50&status=failed"},
		{"workflow", "/api/runs?limit=50&workflow=gated&cursor=" + deep},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				code, body, _ := bn.do(b, http.MethodGet, c.query, nil)
				if code != 200 || len(body) < 1000 {
					b.Fatalf("%d %s", code, body)
				}
			}
		})
	}
}

// The same as a test with a generous bound, so a regression to reading every run fails CI.
func TestRunsPageStaysFastWith10kRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 10,000 runs")
	}
	e := newEngine(t, seedRuns(t, 10000))
	bn := benchOver(t, e, ui.Options{})
	var p runsPage
	bn.getJSON(t, "/api/runs?limit=50", &p) // warm
	start := time.Now()
	const n = 10
	for range n {
		bn.getJSON(t, "/api/runs?limit=50&status=failed", &p)
		if len(p.Runs) != 50 || p.NextCursor == "" {
			t.Fatalf("page %+v", p)
		}
	}
	bound := 300 * time.Millisecond
	if raceEnabled {
		bound *= 10 // the race detector slows this code about tenfold; reading every run is slower still
	}
	if per := time.Since(start) / n; per > bound {
		t.Errorf("GET /api/runs?limit=50 took %v over 10,000 runs, want under %v", per, bound)
	} else {
		t.Logf("GET /api/runs?limit=50&status=failed over 10,000 runs: %v", per)
	}
}

// The run page of a 10,000-item foreach: the answer lists 2,000 instances (instances_total counts
// them all) and the Gantt bars of those only, and stays fast (figure in docs/guide/ui.md).
func TestRunPageOfA10kForeach(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 10,000-item foreach")
	}
	b := newBench(t, ui.Options{})
	items := make([]string, 10000)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	info, err := b.e.Run(context.Background(), engine.StartRequest{Spec: mustSpec(t, `
name: big
steps:
  - id: frames
    kind: foreach
    items: [`+strings.Join(items, ",")+`]
    concurrency: 16
    steps:
      - {id: sim, tool: flow__echo, args: {frame: "{{item}}"}}
`)})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, info)
	}
	var d struct {
		Instances         []ui.Instance `json:"instances"`
		InstancesTotal    int           `json:"instances_total"`
		Attempts          []ui.Attempt  `json:"attempts"`
		AttemptsTruncated bool          `json:"attempts_truncated"`
	}
	start := time.Now()
	code, body, _ := b.do(t, http.MethodGet, "/api/runs/"+info.ID, nil)
	took := time.Since(start)
	if code != 200 {
		t.Fatalf("%d %.300s", code, body)
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Instances) != 2000 || d.InstancesTotal != 10001 || !d.AttemptsTruncated || len(d.Attempts) == 0 || len(d.Attempts) > 2000 {
		t.Errorf("instances %d of %d, attempts %d (truncated %v)", len(d.Instances), d.InstancesTotal, len(d.Attempts), d.AttemptsTruncated)
	}
	bound := 2 * time.Second
	if raceEnabled {
		bound *= 10
	}
	if took > bound {
		t.Errorf("GET /api/runs/ID of a 10,000-item foreach took %v", took)
	}
	t.Logf("GET /api/runs/ID of a 10,000-item foreach: %v, %d bytes", took, len(body))
	// The filter finds instances beyond the first 2,000.
	d.Instances = nil
	b.getJSON(t, "/api/runs/"+info.ID+"?instances="+url.QueryEscape("frames[9876]."), &d)
	if len(d.Instances) != 1 || d.Instances[0].Key != "frames[9876].sim" || d.InstancesTotal != 10001 {
		t.Errorf("filtered: %+v (total %d)", d.Instances, d.InstancesTotal)
	}
}
