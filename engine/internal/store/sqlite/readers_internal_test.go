package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// TestReadersStayOpen: the reading connections, all taken at once then given back, stay open
// for the next reads. database/sql keeps 2 idle by default: with 4 in use, the other 2 were
// closed on their return, and concurrent reads (a foreach's cache lookups) opened them again
// each time (a schema read, the statements prepared anew: most of a lookup's cost).
func TestReadersStayOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := s.r.Stats().MaxOpenConnections
	for round := 0; round < 3; round++ {
		conns := make([]*sql.Conn, n)
		for i := range conns {
			if conns[i], err = s.r.Conn(ctx); err != nil {
				t.Fatal(err)
			}
			if err := conns[i].QueryRowContext(ctx, "SELECT 1").Scan(new(int)); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range conns {
			_ = c.Close()
		}
	}
	if st := s.r.Stats(); n < 2 || st.MaxIdleClosed != 0 || st.OpenConnections != n {
		t.Errorf("after 3 rounds of %d reads at once: %d connections closed as idle, %d open; want none closed, %d open",
			n, st.MaxIdleClosed, st.OpenConnections, n)
	}
}
