package pgtest_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

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

// A test process that is killed leaves no server behind: the reaper stops it and removes its
// folder.
func TestReaperStopsTheClusterOfAKilledProcess(t *testing.T) {
	if os.Getenv("PGTEST_REAPER_CHILD") == "1" {
		c, err := pgtest.Start(context.Background())
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("cluster", c.Dir(), c.Port())
		time.Sleep(time.Minute)
		return
	}
	pgtest.Shared(t) // skips (or fails under CI) without initdb, as the other tests
	cmd := exec.Command(os.Args[0], "-test.run=^TestReaperStopsTheClusterOfAKilledProcess$")
	cmd.Env = append(os.Environ(), "PGTEST_REAPER_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir string
	var port int
	if _, err := fmt.Fscanf(bufio.NewReader(out), "cluster %s %d\n", &dir, &port); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child did not start its cluster: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, statErr := os.Stat(dir)
		conn, dialErr := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if dialErr == nil {
			conn.Close()
		}
		if os.IsNotExist(statErr) && dialErr != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the kill: folder %s: %v; server on %d: %v", dir, statErr, port, dialErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
