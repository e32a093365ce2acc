package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

func TestMain(m *testing.M) {
	os.Exit(pgtest.Main(m, pgtest.Options{Prepare: func(url string) error {
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), `CREATE TABLE prepared (x int); INSERT INTO prepared VALUES (7)`)
		return err
	}}))
}

// Each database is a copy of the prepared template, and databases are independent.
func TestDatabasesAreFreshCopiesOfTheTemplate(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.DB(t), pgtest.DB(t)
	if a == b {
		t.Fatalf("two tests share database %s", a)
	}
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(ctx)
	var x int
	if err := ca.QueryRow(ctx, `SELECT x FROM prepared`).Scan(&x); err != nil || x != 7 {
		t.Fatalf("template not copied: %d %v", x, err)
	}
	if _, err := ca.Exec(ctx, `INSERT INTO prepared VALUES (8)`); err != nil {
		t.Fatal(err)
	}
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(ctx)
	var n int
	if err := cb.QueryRow(ctx, `SELECT count(*) FROM prepared`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("databases not independent: %d rows, %v", n, err)
	}
	var fsync string
	if err := cb.QueryRow(ctx, `SHOW fsync`).Scan(&fsync); err != nil || fsync != "off" {
		t.Fatalf("fsync = %q, %v", fsync, err)
	}
}

// A cluster of a test's own restarts on the same port and is removed by its cleanup.
func TestStartTRestart(t *testing.T) {
	c := pgtest.StartT(t)
	ctx := context.Background()
	url, err := c.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	conn.Close(ctx)
}
