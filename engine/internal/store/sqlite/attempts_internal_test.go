package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
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
