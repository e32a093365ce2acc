//go:build unix

package gotest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// Scarce resources held by an engine process that dies or stops, on a real PostgreSQL database
// (docs/guide/resources.md, "Where the count is kept"): its units count while its heartbeat is
// at most its lease old, so another engine's waiting step gets them once the lease ends. The
// units are counted from outside the engines, as the proof of `make bench-resources` does
// (scripts/bench_resources.py): a connection of the test reads resource_slots of live engines.

const resLimit = 2

// resHoldSpec: two steps at once, each holding one unit of lic while its call runs.
const resHoldSpec = `
name: res_hold
steps:
  - {id: a, tool: hold, resources: {lic: 1}}
  - {id: b, tool: hold, resources: {lic: 1}, depends_on: []}
`

// resOneSpec: one step holding one unit.
const resOneSpec = `
name: res_one
steps:
  - {id: one, tool: hold, resources: {lic: 1}}
`

// TestClusterResourceHelperProcess is the holder of the tests below: an engine on
// DCC_FLOW_RES_DB (lease 1 s, lic limit 2) that starts res_hold and never answers its `hold`
// calls. It prints "ready ENGINE_ID", "run RUN_ID", then "held" once both calls are in its
// hands (both units taken), and waits to be killed.
func TestClusterResourceHelperProcess(t *testing.T) {
	db := os.Getenv("DCC_FLOW_RES_DB")
	if db == "" {
		t.Skip("helper process of the cluster resource tests")
	}
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: clusterLeaseSecs,
		Resources: map[string]engine.ResourceConfig{"lic": {Limit: resLimit}}})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "hold", Lane: flowtype.LaneMain}); err != nil {
		fmt.Println("register:", err)
		os.Exit(2)
	}
	fmt.Println("ready", e.EngineID())
	s, err := spec.ParseString(resHoldSpec)
	if err != nil {
		fmt.Println("spec:", err)
		os.Exit(2)
	}
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		fmt.Println("submit:", err)
		os.Exit(2)
	}
	fmt.Println("run", id)
	pulled := 0
	for pulled < 2 {
		cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 2, Timeout: 50 * time.Millisecond})
		if err != nil {
			fmt.Println("pull:", err)
			os.Exit(2)
		}
		pulled += len(cs) // never completed: the units stay held
	}
	fmt.Println("held")
	select {}
}

// resSample is the units of lic that each live engine holds, as one query read them.
type resSample struct {
	asked    time.Time
	byEngine map[string]int
}

func (s resSample) total() int {
	n := 0
	for _, u := range s.byEngine {
		n += u
	}
	return n
}

// resSampler reads the units of live engines every few milliseconds on a connection of its own
// (a row counts while its engine's heartbeat is at most its lease old), until stop.
type resSampler struct {
	mu      sync.Mutex
	samples []resSample
	stop    chan struct{}
	done    chan error
}

func startResSampler(t *testing.T, db string) *resSampler {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	s := &resSampler{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer conn.Close(ctx)
		for {
			select {
			case <-s.stop:
				s.done <- nil
				return
			default:
			}
			asked := time.Now()
			rows, err := conn.Query(ctx, `SELECT s.engine_id, sum(s.amount)::int FROM resource_slots s JOIN engines e ON e.id = s.engine_id
				WHERE s.resource = 'lic' AND e.heartbeat_at + make_interval(secs => e.lease_secs) >= now() GROUP BY s.engine_id`)
			if err != nil {
				s.done <- err
				return
			}
			smp := resSample{asked: asked, byEngine: map[string]int{}}
			for rows.Next() {
				var id string
				var n int
				if err := rows.Scan(&id, &n); err != nil {
					s.done <- err
					return
				}
				smp.byEngine[id] = n
			}
			if err := rows.Err(); err != nil {
				s.done <- err
				return
			}
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(s.finish)
	return s
}

// finish stops the sampler (once) and returns its samples.
func (s *resSampler) finish() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
}

func (s *resSampler) all(t *testing.T) []resSample {
	t.Helper()
	s.finish()
	if err := <-s.done; err != nil {
		t.Fatalf("sampler: %v", err)
	}
	s.done <- nil // a second call finds it stopped too
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]resSample(nil), s.samples...)
}

// SIGKILL of an engine process holding both units of lic: another engine's waiting step gets
// a unit once the dead engine's lease ends; from then on none of the dead engine's units counts,
// and the units counted by live engines never pass the limit (the survivor also takes the dead
// engine's run over, whose two steps ask for the units again).
func TestClusterKilledHolderFreesItsUnits(t *testing.T) {
	testHolderGone(t, false)
}

// SIGSTOP of an engine process holding both units, past its lease: another engine's waiting
// step gets a unit; the stopped engine's run is taken over; once it wakes (SIGCONT) and beats
// again, its old units do not count again, and the limit holds throughout.
func TestClusterStoppedHolderFreesItsUnits(t *testing.T) {
	testHolderGone(t, true)
}

func testHolderGone(t *testing.T, stop bool) {
	// Not parallel: engine processes on a 1 s lease want the machine to themselves.
	db := pgtest.DB(t)
	ctx := context.Background()
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterResourceHelperProcess$")
	cmd.Env = append(os.Environ(), "DCC_FLOW_RES_DB="+db)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	expect := func(prefix string) string {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the holder exited while %q was expected", prefix)
				}
				if strings.HasPrefix(l, prefix) {
					return strings.TrimSpace(strings.TrimPrefix(l, prefix))
				}
				if strings.Contains(l, ":") && !strings.HasPrefix(l, "=== ") {
					t.Fatalf("the holder said %q while %q was expected", l, prefix)
				}
			case <-timeout:
				t.Fatalf("the holder: no %q within 30 s", prefix)
			}
		}
	}
	holderID := expect("ready ")
	holderRun := expect("run ")
	expect("held")
	sampler := startResSampler(t, db)

	// The other engine: it hosts `hold` too, answering at once.
	b, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: clusterLeaseSecs,
		Resources: map[string]engine.ResourceConfig{"lic": {Limit: resLimit}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(ctx) })
	if err := b.RegisterTool(flowtype.ToolInfo{Name: "hold", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	firstCall := make(chan time.Time, 1)
	pullCtx, stopPull := context.WithCancel(ctx)
	defer stopPull()
	go func() {
		for {
			cs, err := b.Host().Pull(pullCtx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 8, Timeout: 50 * time.Millisecond})
			if err != nil {
				return
			}
			for _, c := range cs {
				select {
				case firstCall <- time.Now():
				default:
				}
				_ = b.Host().Complete(c.ID, flowtype.ToolResult{Output: 1})
			}
		}
	}()
	s, err := spec.ParseString(resOneSpec)
	if err != nil {
		t.Fatal(err)
	}
	own, err := b.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	// B's step waits: the holder's two units count, and B's waiter is in the database's queue.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		info, err := b.Status(ctx, own)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Steps) == 1 && info.Steps[0].Status == run.StepWaitingResources && info.Steps[0].Waiting != nil &&
			info.Steps[0].Waiting.AllEngines && info.Steps[0].Progress != nil &&
			strings.HasSuffix(info.Steps[0].Progress.Message, "in the database's queue (all engines)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B's step never waited for the holder's units: %+v", info.Steps)
		}
	}

	var gone time.Time
	if stop {
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	gone = time.Now() // the holder's last heartbeat was before this
	var got time.Time
	select {
	case got = <-firstCall:
	case <-time.After(20 * time.Second):
		t.Fatal("B's step never got a unit after the holder was gone")
	}
	if stop {
		// Wake the holder once its run is taken over (so that it cannot claim it back), and
		// wait until it has beaten again: its old units must not count again.
		waitFor(t, b, holderRun, run.StatusCompleted, 20*time.Second)
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		woke := time.Now()
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			var beat time.Time
			if err := conn.QueryRow(ctx, `SELECT heartbeat_at FROM engines WHERE id = $1`, holderID).Scan(&beat); err != nil {
				t.Fatalf("the holder's engines row: %v", err)
			}
			if beat.After(woke) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the woken holder never beat again")
			}
		}
	}
	waitFor(t, b, own, run.StatusCompleted, 20*time.Second)
	waitFor(t, b, holderRun, run.StatusCompleted, 20*time.Second)
	time.Sleep(50 * time.Millisecond) // the sampler reads once more after the last beat seen
	samples := sampler.all(t)

	lease := time.Duration(clusterLeaseSecs) * time.Second
	// A heartbeat the holder sent just before the signal may still be executed by the server
	// after it (its now() then a little later than gone): half a second of slack.
	const slack = 500 * time.Millisecond
	var freed time.Time
	for _, smp := range samples {
		if n := smp.total(); n > resLimit {
			t.Errorf("%s: %d units of lic counted, over the limit %d: %v", smp.asked.Format("15:04:05.000"), n, resLimit, smp.byEngine)
		}
		held := smp.byEngine[holderID]
		if smp.asked.After(gone) && held == 0 && freed.IsZero() {
			freed = smp.asked
		}
		if smp.asked.After(gone.Add(lease+slack)) && held > 0 {
			t.Errorf("%s: %d units of the holder counted %v after it was %s, past its lease of %v",
				smp.asked.Format("15:04:05.000"), held, smp.asked.Sub(gone).Round(time.Millisecond), map[bool]string{true: "stopped", false: "killed"}[stop], lease)
		}
	}
	if len(samples) < 20 {
		t.Fatalf("only %d samples", len(samples))
	}
	t.Logf("%d samples; the holder's units stopped counting %v after it was gone, B's step got one %v after (lease %v)",
		len(samples), freed.Sub(gone).Round(time.Millisecond), got.Sub(gone).Round(time.Millisecond), lease)
}
