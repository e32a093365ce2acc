package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine/internal/store/postgres"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// shared is the cluster suites' harness on a new database: each Open is a store of its own on
// it (an engine's), and Advance ages every server time the database keeps by d — the leases of
// runs and claims, heartbeats, claims of slots, finished calls, reports — which is, to every
// comparison with now(), the server's clock moving forward by d.
func shared[S any](t *testing.T, as func(*postgres.Store) S) storetest.Shared[S] {
	url := pgtest.DB(t)
	return storetest.Shared[S]{
		Open: func(t *testing.T) S { return as(openURL(t, url)) },
		Advance: func(t *testing.T, d time.Duration) {
			t.Helper()
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var b pgx.Batch
			secs := d.Seconds()
			for _, q := range []string{
				`UPDATE workflows SET lease_until = lease_until - make_interval(secs => $1) WHERE lease_until IS NOT NULL`,
				`UPDATE engines SET heartbeat_at = heartbeat_at - make_interval(secs => $1), started_at = started_at - make_interval(secs => $1)`,
				`UPDATE tool_calls SET lease_until = lease_until - make_interval(secs => $1), created_at = created_at - make_interval(secs => $1),
					claimed_at = claimed_at - make_interval(secs => $1), done_at = done_at - make_interval(secs => $1)`,
				`UPDATE tool_call_reports SET created_at = created_at - make_interval(secs => $1)`,
				`UPDATE schedule_slots SET claimed_at = claimed_at - make_interval(secs => $1)`,
				`UPDATE resource_waiters SET enqueued_at = enqueued_at - make_interval(secs => $1)`,
			} {
				b.Queue(q, secs)
			}
			if err := conn.SendBatch(ctx, &b).Close(); err != nil {
				t.Fatalf("moving the database's times %s back: %v", d, err)
			}
		},
	}
}

// The cluster features' shared suites (the same as memcluster's).
func TestExerciseCluster(t *testing.T) {
	storetest.ExerciseLeaser(t, func(t *testing.T) storetest.Shared[storetest.LeaserStore] {
		return shared(t, func(s *postgres.Store) storetest.LeaserStore { return s })
	})
	storetest.ExerciseCallQueue(t, func(t *testing.T) storetest.Shared[storetest.QueueStore] {
		return shared(t, func(s *postgres.Store) storetest.QueueStore { return s })
	})
}
