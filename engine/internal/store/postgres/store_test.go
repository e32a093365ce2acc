package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/postgres"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

func newRun(id string) store.Run {
	now := time.Now()
	return store.Run{ID: id, SpecJSON: json.RawMessage(`{}`), Status: run.StatusRunning, CreatedAt: now, UpdatedAt: now}
}

func TestGroupCommitCoalescesAndIsolatesFailures(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	now := time.Now()
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r")}}); err != nil {
		t.Fatal(err)
	}
	before := s.Commits()
	const writers = 200
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := &store.Batch{Steps: []store.Step{{RunID: "r", Key: fmt.Sprintf("s%d", i), StepID: "s", Kind: "tool", Status: run.StepCompleted}},
				Events: []run.Event{{RunID: "r", Type: run.EventStepExit, Time: now}}}
			switch i % 50 {
			case 7:
				b.Steps[0].RunID = "missing" // this batch fails alone
			case 9:
				b.CreateRuns = []store.Run{newRun("r")} // so does this one
			case 11:
				b.RunUpdates = []store.RunUpdate{{ID: "missing", Status: run.StatusCompleted}}
			}
			errs[i] = s.Write(ctx, b)
		}()
	}
	wg.Wait()
	failed := 0
	for i, err := range errs {
		switch i % 50 {
		case 7, 11:
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("batch %d: want ErrNotFound, got %v", i, err)
			}
			failed++
		case 9:
			if !errors.Is(err, store.ErrExists) {
				t.Errorf("batch %d: want ErrExists, got %v", i, err)
			}
			failed++
		default:
			if err != nil {
				t.Errorf("batch %d failed with the group: %v", i, err)
			}
		}
	}
	steps, _ := s.ListSteps(ctx, "r")
	evs, _ := s.ListEvents(ctx, store.EventFilter{RunID: "r"})
	if len(steps) != writers-failed || len(evs) != writers-failed {
		t.Fatalf("%d steps, %d events, want %d", len(steps), len(evs), writers-failed)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Fatalf("sequence gap after a failed batch: %d then %d", evs[i-1].Seq, evs[i].Seq)
		}
	}
	if n := s.Commits() - before; n >= writers {
		t.Fatalf("%d transactions for %d concurrent writes: no group commit", n, writers)
	}
	t.Logf("%d concurrent writes in %d transactions", writers, s.Commits()-before)
}

// A key written twice in one group keeps its last write at the place of its first; text that
// PostgreSQL cannot hold (invalid UTF-8, NUL) is stored with U+FFFD rather than failing the write.
func TestStepRowsDedupAndOddText(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	b := &store.Batch{CreateRuns: []store.Run{newRun("r")}}
	for i := range 5 {
		b.Steps = append(b.Steps, store.Step{RunID: "r", Key: fmt.Sprintf("k%d", i), StepID: "s", Kind: "tool", Status: run.StepRunning})
	}
	b.Steps = append(b.Steps, store.Step{RunID: "r", Key: "k1", StepID: "s", Kind: "tool", Status: run.StepFailed,
		ErrorMessage: "bad \xff byte and a \x00 NUL", Output: json.RawMessage(`{"v":1}`)})
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	steps, err := s.ListSteps(ctx, "r")
	if err != nil || len(steps) != 5 {
		t.Fatalf("%d steps, %v", len(steps), err)
	}
	for i, st := range steps {
		if st.Key != fmt.Sprintf("k%d", i) {
			t.Fatalf("step %d is %s", i, st.Key)
		}
	}
	if st := steps[1]; st.Status != run.StepFailed || st.ErrorMessage != "bad \uFFFD byte and a \uFFFD NUL" || string(st.Output) != `{"v":1}` {
		t.Fatalf("k1: %+v", st)
	}
}

// Many read-write stores on one database: each attaches as an engine; a run belongs to the
// engine that created it while its lease lasts (another's update of it is ErrLeaseLost, its
// claim and Acquire fail), heartbeats renew it, and once it expired one of two claimers takes it
// over, interrupting it (and its steps in flight) for the resume path. Read-only stores beside
// them read and file control requests.
func TestLeasesAcrossEngines(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	open := func(id string, lease time.Duration) *postgres.Store {
		s := openURL(t, url)
		if err := s.Attach(ctx, store.EngineInfo{ID: id, Host: "h", PID: 1, Tools: []string{"t"}, Lease: lease}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b, c := open("A", 300*time.Millisecond), open("B", time.Minute), open("C", time.Minute)
	if es, err := b.Engines(ctx); err != nil || len(es) != 3 || es[0].ID != "A" || es[0].Tools[0] != "t" || es[0].Lease != 300*time.Millisecond {
		t.Fatalf("engines: %+v %v", es, err)
	}
	now := time.Now()
	child := newRun("rc")
	child.ParentRunID, child.ParentStepKey = "r", "sub"
	if err := a.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r"), child},
		Steps: []store.Step{{RunID: "r", Key: "done", StepID: "done", Kind: "tool", Status: run.StepCompleted},
			{RunID: "r", Key: "busy", StepID: "busy", Kind: "tool", Status: run.StepRunning}}}); err != nil {
		t.Fatal(err)
	}
	if h, err := b.Holder(ctx, "r"); err != nil || h != "A" {
		t.Fatalf("holder seen by B: %q %v", h, err)
	}
	if h, err := a.Holder(ctx, "r"); err != nil || h != "" {
		t.Fatalf("holder seen by A itself: %q %v", h, err)
	}
	upd := store.RunUpdate{ID: "r", Status: run.StatusFailed, UpdatedAt: now, FinishedAt: now}
	if err := b.Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{upd}}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("B updating A's run: %v", err)
	}
	if ok, holder, err := b.Acquire(ctx, "r"); ok || holder != "A" || err != nil {
		t.Fatalf("B acquiring A's run: %v %q %v", ok, holder, err)
	}
	// A control request for A's run is A's to answer, not C's; one for an unknown run goes to
	// the first engine that looks.
	id, err := c.RequestControl(ctx, store.ControlRequest{RunID: "r", Action: "cancel", CreatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := c.RequestControl(ctx, store.ControlRequest{RunID: "nope", Action: "cancel", CreatedAt: now})
	if p, err := c.PendingControl(ctx); err != nil || len(p) != 1 || p[0].ID != orphan {
		t.Fatalf("C's pending requests: %+v %v", p, err)
	}
	if p, err := a.PendingControl(ctx); err != nil || len(p) != 1 || p[0].ID != id {
		t.Fatalf("A's pending requests: %+v %v", p, err)
	}
	in := store.Interruption{Error: &store.RunError{Kind: "interrupted", Message: "taken over"}}
	if ok, err := b.ClaimRun(ctx, "r", now, in); ok || err != nil {
		t.Fatalf("B claiming a live run: %v %v", ok, err)
	}
	// A beats: its lease goes on past its 300 ms.
	for i := 0; i < 4; i++ {
		time.Sleep(150 * time.Millisecond)
		if owned, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, []string{"r", "unknown"}); err != nil || len(owned) != 1 || owned[0] != "r" {
			t.Fatalf("heartbeat: %v %v", owned, err)
		}
	}
	if exp, err := b.Expired(ctx, 0); err != nil || len(exp) != 0 {
		t.Fatalf("expired while A beats: %+v %v", exp, err)
	}
	// A stops beating: the lease expires, B and C claim at once, one wins.
	time.Sleep(400 * time.Millisecond)
	if exp, err := b.Expired(ctx, 0); err != nil || len(exp) != 1 || exp[0].ID != "r" {
		t.Fatalf("expired: %+v %v", exp, err)
	}
	wins := make(chan bool, 2)
	for _, s := range []*postgres.Store{b, c} {
		go func() {
			ok, err := s.ClaimRun(ctx, "r", now, in)
			if err != nil {
				t.Error(err)
			}
			wins <- ok
		}()
	}
	if w1, w2 := <-wins, <-wins; w1 == w2 {
		t.Fatalf("claims: %v %v; want exactly one", w1, w2)
	}
	rec, err := a.GetRun(ctx, "r")
	if err != nil || rec.Status != run.StatusInterrupted || rec.Error == nil || rec.Error.Message != "taken over" {
		t.Fatalf("claimed run: %+v %v", rec, err)
	}
	steps, _ := a.ListSteps(ctx, "r")
	if steps[0].Status != run.StepCompleted || steps[1].Status != run.StepInterrupted {
		t.Fatalf("claimed steps: %+v", steps)
	}
	// A, which lost it, cannot write the run's end over the new owner's record, nor renew it.
	if err := a.Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{upd}}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("A after the takeover: %v", err)
	}
	if owned, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, []string{"r"}); err != nil || len(owned) != 0 {
		t.Fatalf("A's heartbeat after the takeover: %v %v", owned, err)
	}
	if h, err := a.Holder(ctx, "r"); err != nil || (h != "B" && h != "C") {
		t.Fatalf("holder after the takeover: %q %v", h, err)
	}
	// Interrupted by the claim and held by the claimer, which resumes it: Wait goes on waiting
	// (Leased), for the child too, which goes with its parent's lease.
	for _, s := range []*postgres.Store{a, b, c} {
		for _, id := range []string{"r", "rc"} {
			if ok, err := s.Leased(ctx, id); !ok || err != nil {
				t.Fatalf("leased %s after the takeover: %v %v", id, ok, err)
			}
		}
	}
	if _, err := a.Leased(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("leased of an unknown run: %v", err)
	}
	// A terminal update by the holder releases the lease; then anyone may acquire it (a resume).
	winner := b
	if h, _ := a.Holder(ctx, "r"); h == "C" {
		winner = c
	}
	if err := winner.Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{upd}}); err != nil {
		t.Fatal(err)
	}
	if h, err := a.Holder(ctx, "r"); err != nil || h != "" {
		t.Fatalf("holder of a finished run: %q %v", h, err)
	}
	if ok, err := a.Leased(ctx, "r"); ok || err != nil {
		t.Fatalf("leased after the end: %v %v", ok, err)
	}
	if ok, _, err := a.Acquire(ctx, "r"); !ok || err != nil {
		t.Fatalf("acquiring a finished run: %v %v", ok, err)
	}
	// Detach releases at once.
	if err := a.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	if h, err := b.Holder(ctx, "r"); err != nil || h != "" {
		t.Fatalf("holder after detach: %q %v", h, err)
	}
	if es, _ := b.Engines(ctx); len(es) != 2 {
		t.Fatalf("engines after detach: %+v", es)
	}
	// Read-only beside them.
	ro, err := postgres.OpenReadOnly(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("x")}}); !errors.Is(err, postgres.ErrReadOnly) {
		t.Fatalf("viewer write: %v", err)
	}
}

// Events keep their seq across a reopen, and a pruned seq is never assigned again.
func TestSeqSurvivesReopenAndPrune(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	s, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	r := newRun("r")
	r.Status, r.FinishedAt = run.StatusCompleted, old
	b := &store.Batch{CreateRuns: []store.Run{r}, Events: []run.Event{{RunID: "r", Type: run.EventWorkflowTerminal, Time: old}, {RunID: "r", Type: run.EventWorkflowTerminal, Time: old}}}
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, time.Now(), nil); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	s.Close()
	s, err = postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if last, _ := s.LastSeq(ctx); last != 2 {
		t.Fatalf("LastSeq after prune and reopen: %d", last)
	}
	b = &store.Batch{CreateRuns: []store.Run{newRun("q")}, Events: []run.Event{{RunID: "q", Type: run.EventWorkflowStarted, Time: old}}}
	if err := s.Write(ctx, b); err != nil || b.Events[0].Seq != 3 {
		t.Fatalf("next seq %d, %v", b.Events[0].Seq, err)
	}
}

// A database migrated by a newer dcc-flow is refused, naming the versions; concurrent first
// opens of a new database migrate it once.
func TestSchemaVersions(t *testing.T) {
	ctx := context.Background()
	c := pgtest.Shared(t)
	url, err := c.NewDatabase(ctx) // a copy of the migrated template
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, 'future')`, postgres.SchemaVersion()+5); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(ctx, url)
	var se *postgres.SchemaError
	if !errors.As(err, &se) || se.Found != postgres.SchemaVersion()+5 || !strings.Contains(err.Error(), "upgrade dcc-flow") {
		t.Fatalf("newer schema: %v", err)
	}
	if _, err := postgres.OpenReadOnly(ctx, url); !errors.As(err, &se) {
		t.Fatalf("newer schema, read-only: %v", err)
	}
	// An empty database: several engines migrate it at once. Named after the test's own
	// database, which is new at each run (a fixed name failed "already exists" under -count 2).
	emptyDB := conn.Config().Database + "_empty"
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{emptyDB}.Sanitize()+` TEMPLATE template0`); err != nil {
		t.Fatal(err)
	}
	empty := strings.Replace(url, "/"+conn.Config().Database+"?", "/"+emptyDB+"?", 1)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = postgres.Migrate(ctx, empty) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migration: %v", err)
		}
	}
	s, err := postgres.Open(ctx, empty)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r")}}); err != nil {
		t.Fatal(err)
	}
}

// A server that is down makes writes and reads fail with a storage fault (code storage), and
// the store works again once the server is back: the pool reconnects.
func TestServerDownIsAFaultAndTheStoreReconnects(t *testing.T) {
	ctx := context.Background()
	c := pgtest.StartT(t)
	if err := c.Prepare(ctx, func(url string) error { return postgres.Migrate(ctx, url) }); err != nil {
		t.Fatal(err)
	}
	url, err := c.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := openURL(t, url)
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r")}}); err != nil {
		t.Fatal(err)
	}
	if err := c.StopServer(ctx); err != nil {
		t.Fatal(err)
	}
	err = s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("q")}})
	if postgres.AsFault("", err) == nil || run.CodeOf(err) != run.CodeStorage {
		t.Fatalf("write with the server down: %v (code %s)", err, run.CodeOf(err))
	}
	if _, err := s.GetRun(ctx, "r"); postgres.AsFault("", err) == nil {
		t.Fatalf("read with the server down: %v", err)
	}
	if err := c.StartServer(ctx); err != nil {
		t.Fatal(err)
	}
	var werr error
	for range 50 { // the pool drops its dead connections as it meets them
		if werr = s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("q")}}); werr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if werr != nil {
		t.Fatalf("after the server came back: %v", werr)
	}
	if r, err := s.GetRun(ctx, "q"); err != nil || r.ID != "q" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgresql://flow:s3cret@db.studio:5432/flow":              "postgresql://flow:xxxxx@db.studio:5432/flow",
		"postgres://db.studio/flow?password=s3cret&sslmode=require": "postgres://db.studio/flow?password=xxxxx&sslmode=require",
		"postgresql://flow@db.studio/flow":                          "postgresql://flow@db.studio/flow",
	} {
		if got := postgres.Redact(in); got != want {
			t.Errorf("Redact(%s) = %s, want %s", in, got, want)
		}
	}
	_, err := postgres.Open(context.Background(), "postgresql://flow:s3cret@127.0.0.1:1/flow?connect_timeout=2")
	if err == nil || strings.Contains(err.Error(), "s3cret") || postgres.AsFault("", err) == nil {
		t.Fatalf("an unreachable server: %v", err)
	}
}

// BenchmarkRun100: a run of 100 steps fanned out (storetest.BenchmarkRun); compare with the
// SQLite store's BenchmarkRun100 (docs/operations/cluster.md, "Figures").
func BenchmarkRun100(b *testing.B) {
	storetest.BenchmarkRun(b, func(b *testing.B) store.Store { return openTemp(b) })
}

// BenchmarkStepSequential: one durable step completion per Write.
func BenchmarkStepSequential(b *testing.B) {
	storetest.BenchmarkStepSequential(b, func(b *testing.B) store.Store { return openTemp(b) })
}

// openAttached is openTemp attached as an engine: its writes are fenced (docs/operations/cluster.md, "Leases").
func openAttached(b *testing.B) store.Store {
	s := openTemp(b)
	if err := s.Attach(context.Background(), store.EngineInfo{ID: "bench", Lease: time.Minute}); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkRun100Attached and BenchmarkStepSequentialAttached: the same, as an engine of a
// shared database, whose every write carries the lease fence.
func BenchmarkRun100Attached(b *testing.B) { storetest.BenchmarkRun(b, openAttached) }

func BenchmarkStepSequentialAttached(b *testing.B) {
	storetest.BenchmarkStepSequential(b, openAttached)
}

// The SQL of docs/operations/cluster.md runs on a database an engine has open, and its last query finds
// that engine.
func TestDocsSQL(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	s := openURL(t, url)
	if err := s.Attach(ctx, store.EngineInfo{ID: "E", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("RUN")},
		Steps: []store.Step{{RunID: "RUN", Key: "a", StepID: "a", Kind: "tool", Status: run.StepRunning}},
		Attempts: []store.Attempt{{RunID: "RUN", StepKey: "per_shot[7].render", Attempt: 1, Tool: "render", Status: run.StepFailed,
			Args: json.RawMessage(`{"shot":"sh010"}`), Worker: "maya/4242", PID: 4242, ErrorKind: run.KindWorkerLost, Exit: "exit status 139"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueCall(ctx, store.QueuedCall{RunID: "RUN", StepKey: "a", Attempt: 1, Tool: "export"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := s.RecordFire(ctx, store.Fire{ScheduleID: "ID", Kind: store.FireFired, RunID: "RUN", Origin: "webhook",
		ScheduledAt: now, FiredAt: now, ReplayKey: "1700000000." + strings.Repeat("ab", 32)}); err != nil {
		t.Fatal(err)
	}
	c, err := s.ClaimCall(ctx, []string{"export"}, nil)
	if err != nil || c == nil {
		t.Fatalf("claim: %+v %v", c, err)
	}
	for seq := 1; seq <= 2; seq++ {
		if ok, err := s.ReportCall(ctx, c.ID, store.CallReport{Seq: seq, Progress: &run.StepProgress{Done: float64(seq)},
			Lines: []run.LogLine{run.LogLineOf("cached", nil)}}); !ok || err != nil {
			t.Fatalf("report: %v %v", ok, err)
		}
	}
	doc, err := os.ReadFile("../../../../docs/operations/cluster.md")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	blocks := strings.Split(string(doc), "```sql\n")[1:]
	if len(blocks) != 2 {
		t.Fatalf("%d sql blocks in docs/operations/cluster.md", len(blocks))
	}
	var rows int
	for _, stmt := range strings.Split(strings.SplitN(blocks[1], "```", 2)[0], ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		r, err := conn.Query(ctx, stmt)
		if err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		rows = 0
		for r.Next() {
			rows++
		}
		if err := r.Err(); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		if rows != 1 {
			t.Errorf("%d rows from %s", rows, stmt)
		}
	}
}
