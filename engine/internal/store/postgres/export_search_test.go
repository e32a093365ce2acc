package postgres

import (
	"context"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// ExplainListRuns returns the plan of ListRuns(f), with the time each node took (EXPLAIN
// ANALYZE), for the search benchmark's log.
func (s *Store) ExplainListRuns(ctx context.Context, f store.RunFilter) (string, error) {
	q, args := listRunsQuery(&f)
	rows, err := s.pool.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF) "+q, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", err
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n"), rows.Err()
}
