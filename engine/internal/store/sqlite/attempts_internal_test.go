package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The resume history and a step's attempts are read through indexes, not by scanning the run's
// events or the attempts table.
func TestAttemptQueriesUseIndexes(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "flow.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct{ query, want string }{
		{sqlResumes, "workflow_events_resumed"},
		{`SELECT attempt FROM step_attempts WHERE run_id = ? AND step_key = ? ORDER BY step_key, attempt`, "PRIMARY KEY"},
	} {
		rows, err := s.r.Query(`EXPLAIN QUERY PLAN `+c.query, "r1", "k")
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if got := strings.Join(plan, "; "); !strings.Contains(got, c.want) || strings.Contains(got, "SCAN workflow_events") {
			t.Errorf("plan of %q = %s; want it through %s", c.query, got, c.want)
		}
	}
}

// Every search field of store.RunFilter is answered from its index of migration 0011, not by
// scanning the attempts, the steps or the inputs of every run.
func TestSearchQueriesUseIndexes(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "flow.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		f    store.RunFilter
		want []string
	}{
		{store.RunFilter{Inputs: map[string]string{"shot": "sh010"}}, []string{"run_inputs_value"}},
		{store.RunFilter{Tool: "maya.render"}, []string{"step_attempts_tool"}},
		{store.RunFilter{Worker: "render"}, []string{"step_attempts_worker"}},
		{store.RunFilter{ErrorKind: "timeout"}, []string{"step_attempts_error", "workflow_steps_error"}},
		{store.RunFilter{ErrorText: "exit 139"}, []string{"step_attempts_error", "workflow_steps_error"}},
		{store.RunFilter{StepStatuses: []run.StepStatus{run.StepFailed}}, []string{"workflow_steps_status"}},
		{store.RunFilter{Inputs: map[string]string{"shot": "sh010"}, Tool: "t", Since: time.Unix(1, 0), Limit: 50},
			[]string{"run_inputs_value", "step_attempts_tool"}},
	} {
		where, args := searchWhere(&c.f, nil)
		q := `EXPLAIN QUERY PLAN SELECT id FROM workflows WHERE ` + strings.Join(where, " AND ") + ` ORDER BY created_at DESC, id DESC`
		rows, err := s.r.Query(q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		got := strings.Join(plan, "; ")
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("plan of %+v = %s; want it through %s", c.f, got, w)
			}
		}
		for _, scan := range []string{"SCAN step_attempts", "SCAN workflow_steps", "SCAN run_inputs", "SCAN j"} {
			if strings.Contains(got+";", scan+";") || strings.Contains(got, scan+" ") && !strings.Contains(got, scan+" USING") {
				t.Errorf("plan of %+v = %s; it scans a table (%s)", c.f, got, scan)
			}
		}
	}
}
