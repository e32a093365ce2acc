package gotest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// Many engines on one PostgreSQL database (docs/operations/cluster.md, "Leases"): each test runs three
// engine processes (this test binary re-executed as TestClusterHelperProcess) on one database,
// with a lease of 1 s.

const clusterLeaseSecs = 1

// clusterSpecs are the workflows the helper submits by name. Every `work` call is logged to the
// calls file as "ENGINE KEY" before it is answered (after ms milliseconds).
var clusterSpecs = map[string]string{
	"seq": `
name: seq
steps:
  - {id: s1, tool: work, args: {k: s1, ms: 250}}
  - {id: s2, tool: work, args: {k: s2, ms: 250}, depends_on: [s1]}
  - {id: s3, tool: work, args: {k: s3, ms: 250}, depends_on: [s2]}
  - {id: s4, tool: work, args: {k: s4, ms: 250}, depends_on: [s3]}
  - {id: s5, tool: work, args: {k: s5, ms: 250}, depends_on: [s4]}
  - {id: s6, tool: work, args: {k: s6, ms: 250}, depends_on: [s5]}
`,
	"gate": `
name: gate
steps:
  - {id: gate, kind: approve}
  - {id: after, tool: flow__echo, args: {value: 1}, depends_on: [gate]}
`,
	"long": `
name: long
steps:
  - {id: slow, tool: work, args: {k: slow, ms: 20000}}
`,
	"adopt": `
name: adopt
steps:
  - {id: a, tool: work, args: {k: a, ms: 3000}}
`,
	"retried": `
name: retried
steps:
  - {id: r, tool: work, args: {k: r, ms: 1500}, retry: {max_attempts: 2, initial_delay_ms: 0}}
`,
	"tick": `
name: tick
steps:
  - {id: t, tool: flow__echo, args: {value: 1}}
`,
}

// TestClusterHelperProcess is one engine of the cluster tests: it opens DCC_FLOW_CLUSTER_DB
// with a 1 s lease (DCC_FLOW_CLUSTER_LEASE: another, in seconds), hosts the `work` tool, registers clusterSpecs (and, with
// DCC_FLOW_CLUSTER_SCHEDULE=1, an interval schedule of 1 s on `tick`; with
// DCC_FLOW_CLUSTER_WEBHOOK=1, a webhook schedule on `tick` at /hooks/hook, served on a loopback
// port), prints "ready ENGINE_ID" (then "webhooks URL" with the webhook) and then answers commands on stdin, one line each: submit NAME, cancel RUN, approve RUN STEP,
// pause RUN, unpause RUN, status RUN, quit.
func TestClusterHelperProcess(t *testing.T) {
	db := os.Getenv("DCC_FLOW_CLUSTER_DB")
	if db == "" {
		t.Skip("helper process of the cluster tests")
	}
	ctx := context.Background()
	lease := float64(clusterLeaseSecs)
	if v := os.Getenv("DCC_FLOW_CLUSTER_LEASE"); v != "" {
		var err error
		if lease, err = strconv.ParseFloat(v, 64); err != nil {
			fmt.Println("lease:", err)
			os.Exit(2)
		}
	}
	e, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: lease})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	calls, err := os.OpenFile(os.Getenv("DCC_FLOW_CLUSTER_CALLS"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Println("calls:", err)
		os.Exit(2)
	}
	if os.Getenv("DCC_FLOW_CLUSTER_NOTOOLS") == "1" {
		// An orchestrator only: its `work` calls go through the tool-call queue.
	} else if err := e.RegisterTool(flowtype.ToolInfo{Name: "work", Lane: flowtype.LaneMain}); err != nil {
		os.Exit(2)
	}
	go func() {
		for {
			cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 8, Timeout: 50 * time.Millisecond})
			if err != nil {
				return
			}
			for _, c := range cs {
				go func() {
					fmt.Fprintf(calls, "%s %s %d\n", e.EngineID(), c.Args["k"], time.Now().UnixNano())
					time.Sleep(time.Duration(c.Args["ms"].(float64)) * time.Millisecond)
					_ = e.Host().Complete(c.ID, flowtype.ToolResult{Output: map[string]any{"done": c.Args["k"]}})
				}()
			}
		}
	}()
	specs := map[string]*spec.Spec{}
	for name, text := range clusterSpecs {
		s, err := spec.ParseString(text)
		if err != nil {
			fmt.Println("spec:", err)
			os.Exit(2)
		}
		specs[name] = s
		if err := e.Register(s); err != nil {
			fmt.Println("register:", err)
			os.Exit(2)
		}
	}
	if os.Getenv("DCC_FLOW_CLUSTER_SCHEDULE") == "1" {
		scheds, err := engine.ParseSchedules([]byte("schedules:\n  - {id: tick, workflow: tick, max_concurrent: 0, trigger: {kind: interval, every: 1s}}\n"),
			"cluster", nil)
		if err == nil {
			err = e.Schedule(scheds[0])
		}
		if err == nil {
			err = e.StartScheduler(ctx)
		}
		if err != nil {
			fmt.Println("schedule:", err)
			os.Exit(2)
		}
	}
	webhooks := ""
	if os.Getenv("DCC_FLOW_CLUSTER_WEBHOOK") == "1" {
		scheds, err := engine.ParseSchedules([]byte("schedules:\n  - {id: hook, workflow: tick, max_concurrent: 0, trigger: {kind: webhook, path: /hooks/hook}}\n"),
			"cluster", nil)
		if err == nil {
			err = e.Schedule(scheds[0])
		}
		var ws *engine.WebhookServer
		if err == nil {
			ws, err = e.ServeWebhooks("127.0.0.1:0")
		}
		if err != nil {
			fmt.Println("webhooks:", err)
			os.Exit(2)
		}
		webhooks = "http://" + ws.Addr()
	}
	fmt.Println("ready", e.EngineID())
	if webhooks != "" {
		fmt.Println("webhooks", webhooks)
	}
	answer := func(what string, err error) {
		if err != nil {
			fmt.Println("err", run.CodeOf(err), strings.ReplaceAll(err.Error(), "\n", " "))
			return
		}
		fmt.Println("ok", what)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "submit":
			id, err := e.Submit(ctx, engine.StartRequest{Spec: specs[f[1]]})
			if err != nil {
				answer("", err)
				continue
			}
			fmt.Println("run", id)
		case "cancel":
			answer("cancel", e.Cancel(ctx, f[1], "from another engine"))
		case "approve":
			answer("approve", e.Approve(ctx, f[1], f[2], true, "fine", "lead"))
		case "pause":
			answer("pause", e.Pause(ctx, f[1], "", "lead"))
		case "unpause":
			answer("unpause", e.Unpause(ctx, f[1], "", "lead"))
		case "status":
			info, err := e.Status(ctx, f[1])
			if err != nil {
				answer("", err)
				continue
			}
			fmt.Println("status", info.Status)
		case "quit":
			if err := e.Close(ctx); err != nil {
				fmt.Println("close:", err)
				os.Exit(2)
			}
			fmt.Println("closed")
			os.Exit(0)
		}
	}
	os.Exit(0)
}

// clusterNode is one engine process of a cluster test.
type clusterNode struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	id    string
}

// startCluster starts n engine processes on db (in parallel) and waits until each is ready.
func startCluster(t testing.TB, db, calls string, n int, schedule bool) []*clusterNode {
	t.Helper()
	envs := make([][]string, n)
	for i := range envs {
		if schedule {
			envs[i] = []string{"DCC_FLOW_CLUSTER_SCHEDULE=1"}
		}
	}
	return startNodes(t, db, calls, envs)
}

// startNodes starts one engine process per entry of envs (its extra environment) on db.
func startNodes(t testing.TB, db, calls string, envs [][]string) []*clusterNode {
	t.Helper()
	nodes := make([]*clusterNode, len(envs))
	for i := range nodes {
		cmd := exec.Command(os.Args[0], "-test.run=^TestClusterHelperProcess$")
		cmd.Env = append(os.Environ(), "DCC_FLOW_CLUSTER_DB="+db, "DCC_FLOW_CLUSTER_CALLS="+calls)
		cmd.Env = append(cmd.Env, envs[i]...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		nd := &clusterNode{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 64)}
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				nd.lines <- sc.Text()
			}
			close(nd.lines)
		}()
		nodes[i] = nd
		t.Cleanup(func() {
			_ = nd.cmd.Process.Kill()
			_ = nd.cmd.Wait()
		})
	}
	for _, nd := range nodes {
		nd.id = strings.TrimPrefix(nd.expect("ready "), "ready ")
	}
	return nodes
}

// expect returns the next line of the node's output that starts with one of prefixes, failing
// the test on another status line, on exit or after 20 s.
func (nd *clusterNode) expect(prefixes ...string) string {
	nd.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-nd.lines:
			if !ok {
				nd.t.Fatalf("engine %s exited while %v was expected", nd.id, prefixes)
			}
			for _, p := range prefixes {
				if strings.HasPrefix(l, p) {
					return l
				}
			}
			if strings.HasPrefix(l, "err") || strings.Contains(l, ":") && !strings.HasPrefix(l, "=== ") {
				nd.t.Fatalf("engine %s said %q while %v was expected", nd.id, l, prefixes)
			}
		case <-timeout:
			nd.t.Fatalf("engine %s: no %v within 20 s", nd.id, prefixes)
		}
	}
}

// do sends one command and returns the answer line that starts with want.
func (nd *clusterNode) do(cmd, want string) string {
	nd.t.Helper()
	if _, err := fmt.Fprintln(nd.stdin, cmd); err != nil {
		nd.t.Fatal(err)
	}
	return nd.expect(want)
}

// viewer opens a read-only engine on db for the test to look at the runs.
func viewer(t testing.TB, db string) *engine.Engine {
	t.Helper()
	v, err := engine.Open(context.Background(), engine.Config{DB: db, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close(context.Background()) })
	return v
}

// waitFor polls the run's stored status until it is want. A run that ends otherwise fails t at
// once, except a run interrupted by a takeover (another engine's claim, before its resume).
func waitFor(t *testing.T, v *engine.Engine, id string, want run.Status, within time.Duration) *engine.RunInfo {
	t.Helper()
	deadline := time.Now().Add(within)
	var info *engine.RunInfo
	var err error
	for time.Now().Before(deadline) {
		if info, err = v.Status(context.Background(), id); err == nil && info.Status == want {
			return info
		}
		// Interrupted by a takeover is the moment between an engine's claim and its resume.
		takenOver := err == nil && info.Status == run.StatusInterrupted && info.Error != nil &&
			strings.Contains(info.Error.Message, "took it over")
		if err == nil && info.Terminal && info.Error != nil && !takenOver {
			t.Fatalf("run %s ended %s, not %s: %+v", id, info.Status, want, *info.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("run %s: %+v %v; never %s within %s", id, info, err, want, within)
	return nil
}

// toolCall is one line of the calls file.
type toolCall struct {
	engine, key string
	at          time.Time
}

// readCalls returns the calls file's whole lines (none while it is empty; a line still being
// written, with no newline yet, is left for the next read).
func readCalls(t *testing.T, path string) []toolCall {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []toolCall
	lines := strings.Split(string(b), "\n")
	for _, l := range lines[:len(lines)-1] {
		var c toolCall
		var ns int64
		if _, err := fmt.Sscanf(l, "%s %s %d", &c.engine, &c.key, &ns); err != nil {
			t.Fatalf("calls file line %q: %v", l, err)
		}
		c.at = time.Unix(0, ns)
		out = append(out, c)
	}
	return out
}

// SIGKILL of the engine orchestrating a run: once the run's lease expires, another of the three
// engines takes it over (an interrupted event naming it), resumes it and completes it; no step
// that had completed before the kill is called again, and only the step in flight at the kill
// is called a second time.
func TestClusterKilledEngineRunIsTakenOver(t *testing.T) {
	// Not parallel: three engine processes each, on a 1 s lease, want the machine to themselves.
	db := pgtest.DB(t)
	calls := filepath.Join(t.TempDir(), "calls")
	nodes := startCluster(t, db, calls, 3, false)
	a := nodes[0]
	id := strings.TrimPrefix(a.do("submit seq", "run "), "run ")
	v := viewer(t, db)
	ctx := context.Background()
	deadline := time.Now().Add(15 * time.Second)
	completedBefore := func() map[string]bool {
		steps, err := v.Steps(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		done := map[string]bool{}
		for _, st := range steps {
			if st.Status == run.StepCompleted {
				done[st.Key] = true
			}
		}
		return done
	}
	for len(completedBefore()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("two steps never completed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	killedAt := time.Now()
	done := completedBefore() // the dead engine writes nothing more
	info := waitFor(t, v, id, run.StatusCompleted, 20*time.Second)
	took := time.Since(killedAt)

	evs, err := v.EventsSince(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var takenBy string
	var resumedAt time.Time
	for _, ev := range evs {
		if ev.RunID != id {
			continue
		}
		switch ev.Type {
		case run.EventInterrupted:
			var d struct {
				By string `json:"taken_over_by"`
			}
			_ = json.Unmarshal(ev.Detail, &d)
			takenBy = d.By
		case run.EventWorkflowResumed:
			resumedAt = ev.Time
		}
	}
	if takenBy == "" || takenBy == a.id || (takenBy != nodes[1].id && takenBy != nodes[2].id) || resumedAt.IsZero() {
		t.Fatalf("taken over by %q (engines %s, %s, %s), resumed at %s", takenBy, a.id, nodes[1].id, nodes[2].id, resumedAt)
	}
	count := map[string]int{}
	for _, c := range readCalls(t, calls) {
		count[c.key]++
		if c.engine != a.id && c.engine != takenBy {
			t.Errorf("call of %s on engine %s, neither the dead one nor the one that took over", c.key, c.engine)
		}
	}
	again := 0
	for _, k := range []string{"s1", "s2", "s3", "s4", "s5", "s6"} {
		switch {
		case count[k] == 0:
			t.Errorf("step %s never called", k)
		case done[k] && count[k] != 1:
			t.Errorf("step %s completed before the kill and was called %d times", k, count[k])
		case count[k] > 2:
			t.Errorf("step %s called %d times", k, count[k])
		case count[k] == 2:
			again++
		}
	}
	if again > 1 {
		t.Errorf("%d steps called twice; only the one in flight at the kill may be", again)
	}
	t.Logf("killed with %d of 6 steps completed; taken over by %s, resumed %s after the kill (lease %d s), completed %s after it (progress %+v)",
		len(done), takenBy, resumedAt.Sub(killedAt).Round(time.Millisecond), clusterLeaseSecs, took.Round(time.Millisecond), info.Progress)
	for _, nd := range nodes[1:] {
		nd.do("quit", "closed")
	}
}

// An interval schedule (1 s) that all three engines have fires once per slot: one run per
// scheduled time, never two.
func TestClusterScheduleFiresOncePerSlot(t *testing.T) {
	// Not parallel: three engine processes each, on a 1 s lease, want the machine to themselves.
	db := pgtest.DB(t)
	nodes := startCluster(t, db, filepath.Join(t.TempDir(), "calls"), 3, true)
	time.Sleep(3500 * time.Millisecond)
	var wg sync.WaitGroup
	for _, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := fmt.Fprintln(nd.stdin, "quit"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, nd := range nodes {
		nd.expect("closed")
	}
	v := viewer(t, db)
	ctx := context.Background()
	fires, err := v.ScheduleFires(ctx, "tick", 0)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := v.Runs(ctx, engine.RunFilter{Name: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	slots := map[time.Time]int{}
	for _, f := range fires {
		if f.Kind != "fired" {
			t.Errorf("fire %+v", f)
		}
		slots[f.ScheduledAt.Truncate(time.Millisecond)]++
	}
	for slot, n := range slots {
		if n != 1 {
			t.Errorf("slot %s fired %d times", slot, n)
		}
	}
	// Three engines firing on their own would make about three fires a second, on three phases.
	if len(fires) < 2 || len(fires) > 6 || len(runs) != len(fires) {
		t.Fatalf("%d fires and %d runs in 3.5 s with three engines; want one run per fire, 2 to 6 of them", len(fires), len(runs))
	}
	for slot := range slots {
		if slot.Nanosecond() != 0 {
			t.Errorf("slot %s is not on the epoch's phase of 1 s", slot)
		}
	}
	t.Logf("%d slots, %d fires, %d runs across 3 engines", len(slots), len(fires), len(runs))
}

// Approve, pause, unpause and cancel a run from engines that do not run it: each goes to the
// engine that holds the run's lease as a control request, which applies it and answers.
func TestClusterControlFromAnotherEngine(t *testing.T) {
	// Not parallel: three engine processes each, on a 1 s lease, want the machine to themselves.
	db := pgtest.DB(t)
	nodes := startCluster(t, db, filepath.Join(t.TempDir(), "calls"), 3, false)
	a, b, c := nodes[0], nodes[1], nodes[2]
	v := viewer(t, db)

	gate := strings.TrimPrefix(a.do("submit gate", "run "), "run ")
	waitFor(t, v, gate, run.StatusWaiting, 10*time.Second)
	if got := b.do("status "+gate, "status "); got != "status waiting" {
		t.Fatalf("status from another engine: %q", got)
	}
	b.do("approve "+gate+" gate", "ok approve")
	waitFor(t, v, gate, run.StatusCompleted, 10*time.Second)

	long := strings.TrimPrefix(a.do("submit long", "run "), "run ")
	waitFor(t, v, long, run.StatusRunning, 10*time.Second)
	b.do("pause "+long, "ok pause")
	waitFor(t, v, long, run.StatusPaused, 10*time.Second)
	c.do("unpause "+long, "ok unpause")
	waitFor(t, v, long, run.StatusRunning, 10*time.Second)
	c.do("cancel "+long, "ok cancel")
	info := waitFor(t, v, long, run.StatusCancelled, 10*time.Second)
	if info.Error == nil || !strings.Contains(info.Error.Message, "from another engine") {
		t.Fatalf("cancelled run: %+v", info)
	}
	// Nothing was taken over: the owner answered every request.
	evs, err := v.EventsSince(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == run.EventInterrupted {
			t.Fatalf("a run was interrupted: %+v", ev)
		}
	}
	for _, nd := range nodes {
		nd.do("quit", "closed")
	}
}

// The tool-call queue across processes (docs/operations/cluster.md, "The tool-call queue"): engine A hosts
// no tool; its run's `work` call goes through the queue to B or C. SIGKILL of the worker engine
// mid-call: once its claim's lease expires the attempt fails worker_lost, and the retry runs on
// the other worker; the run completes on A.
func TestClusterKilledWorkerCallIsRetried(t *testing.T) {
	// Not parallel: three engine processes each, on a 1 s lease, want the machine to themselves.
	db := pgtest.DB(t)
	calls := filepath.Join(t.TempDir(), "calls")
	nodes := startNodes(t, db, calls, [][]string{{"DCC_FLOW_CLUSTER_NOTOOLS=1"}, nil, nil})
	a := nodes[0]
	id := strings.TrimPrefix(a.do("submit retried", "run "), "run ")
	deadline := time.Now().Add(10 * time.Second)
	var first []toolCall
	for len(first) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the work call never reached a worker engine")
		}
		time.Sleep(20 * time.Millisecond)
		if _, err := os.Stat(calls); err == nil {
			first = readCalls(t, calls)
		}
	}
	var victim, other *clusterNode
	for _, nd := range nodes[1:] {
		if nd.id == first[0].engine {
			victim = nd
		} else {
			other = nd
		}
	}
	if victim == nil || other == nil {
		t.Fatalf("the call ran on %s, not on a worker engine (%s, %s)", first[0].engine, nodes[1].id, nodes[2].id)
	}
	if err := victim.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	killedAt := time.Now()
	v := viewer(t, db)
	waitFor(t, v, id, run.StatusCompleted, 20*time.Second)
	took := time.Since(killedAt)
	got := readCalls(t, calls)
	if len(got) != 2 || got[0].engine != victim.id || got[1].engine != other.id {
		t.Fatalf("calls: %+v; want one on %s then one on %s", got, victim.id, other.id)
	}
	steps, err := v.Steps(context.Background(), id)
	if err != nil || len(steps) != 1 || steps[0].Attempts != 2 || steps[0].Status != run.StepCompleted {
		t.Fatalf("steps: %+v %v", steps, err)
	}
	if rows := queueRows(t, db); strings.Join(rows, ",") != "work 1 done worker_lost,work 2 done " {
		t.Fatalf("queue rows: %q", rows)
	}
	t.Logf("worker killed mid-call; the retry started on %s %s after the kill (lease %d s), the run completed %s after it",
		other.id, got[1].at.Sub(killedAt).Round(time.Millisecond), clusterLeaseSecs, took.Round(time.Millisecond))
}

// Two engine processes serve one webhook schedule behind a (simulated) load balancer:
// deliveries alternate between them and each starts a run on the engine that received it; then
// 50 deliveries, each sent to both engines at once, start one run each, the other engine
// answering 200 duplicate with that run's id, as a redelivery to one engine is answered.
func TestClusterWebhooksOneRunPerDelivery(t *testing.T) {
	// Not parallel: engine processes on a 1 s lease want the machine to themselves.
	db := pgtest.DB(t)
	env := []string{"DCC_FLOW_CLUSTER_WEBHOOK=1"}
	nodes := startNodes(t, db, filepath.Join(t.TempDir(), "calls"), [][]string{env, env})
	urls := make([]string, len(nodes))
	for i, nd := range nodes {
		urls[i] = strings.TrimPrefix(nd.expect("webhooks "), "webhooks ")
	}
	v := viewer(t, db)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	runs := map[string]bool{}
	for i := range 10 {
		r := postHook(t, urls[i%2], "/hooks/hook", fmt.Sprintf("alt-%d", i))
		id, _ := r.body["run_id"].(string)
		if r.code != 202 || id == "" || runs[id] {
			t.Fatalf("delivery %d to engine %d: %d %v; want 202 with a new run", i, i%2, r.code, r.body)
		}
		runs[id] = true
		info := waitFor(t, v, id, run.StatusCompleted, 10*time.Second)
		if info.Origin != engine.OriginWebhook {
			t.Errorf("run %s origin %q", id, info.Origin)
		}
		var owner string
		if err := conn.QueryRow(ctx, `SELECT owner FROM workflows WHERE id = $1`, id).Scan(&owner); err != nil || owner != nodes[i%2].id {
			t.Errorf("run %s of delivery %d ran on %q (%v); want the engine that received it, %s", id, i, owner, err, nodes[i%2].id)
		}
	}
	start := time.Now()
	for i := range 50 {
		d := fmt.Sprintf("both-%d", i)
		id := checkOneRunPerDelivery(t, d, sendToAll(t, urls, "/hooks/hook", d))
		if runs[id] {
			t.Fatalf("delivery %s answered with the run %s of another delivery", d, id)
		}
		runs[id] = true
	}
	t.Logf("50 deliveries sent to both engine processes at once in %s", time.Since(start))
	stored, err := v.Runs(ctx, engine.RunFilter{Name: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	fires, err := v.ScheduleFires(ctx, "hook", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 60 || len(fires) != 60 {
		t.Fatalf("%d runs and %d fires for 60 deliveries; want one each per delivery", len(stored), len(fires))
	}
}

// A database restart mid-run across engines (docs/operations/cluster.md, "A database restart"): engine A hosts no tool,
// so its run's `work` calls go through the tool-call queue to B and C. The server is restarted
// (same port) with two of the six steps completed: every engine reconnects (its heartbeat
// advances past the restart), the run completes, and no step completed before the restart is
// called again.
func TestClusterDatabaseRestartMidRun(t *testing.T) {
	// Not parallel: three engine processes each, on a 1 s lease, want the machine to themselves.
	c := pgtest.StartT(t) // a cluster of its own: it is restarted
	ctx := context.Background()
	db, err := c.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(t.TempDir(), "calls")
	// A lease of 3 s, not the other tests' 1 s: what is tested is a restart shorter than the
	// lease, and under a full `make test` the restart and the reconnections took over 1 s once
	// (a step's claim then expired across it: worker_lost, as documented for a restart longer
	// than the lease).
	lease := "DCC_FLOW_CLUSTER_LEASE=3"
	nodes := startNodes(t, db, calls, [][]string{{"DCC_FLOW_CLUSTER_NOTOOLS=1", lease}, {lease}, {lease}})
	a := nodes[0]
	id := strings.TrimPrefix(a.do("submit seq", "run "), "run ")
	v := viewer(t, db)
	completed := func() map[string]bool {
		steps, err := v.Steps(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		done := map[string]bool{}
		for _, st := range steps {
			if st.Status == run.StepCompleted {
				done[st.Key] = true
			}
		}
		return done
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(completed()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("two steps never completed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	done := completed()
	began := time.Now()
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restartTook := time.Since(began)
	up := dbNow(t, db) // the server's clock, which heartbeat_at is on
	info := waitFor(t, v, id, run.StatusCompleted, 20*time.Second)
	took := time.Since(began)

	// Every engine beats again after the restart.
	deadline = time.Now().Add(5 * time.Second)
	for {
		beats := heartbeats(t, db)
		late := []string{}
		for _, nd := range nodes {
			if b, ok := beats[nd.id]; !ok || !b.After(up) {
				late = append(late, fmt.Sprintf("%s (%s)", nd.id, b))
			}
		}
		if len(late) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat after the restart (%s) from %v", up, late)
		}
		time.Sleep(50 * time.Millisecond)
	}
	count := map[string]int{}
	for _, cl := range readCalls(t, calls) {
		count[cl.key]++
		if cl.engine == a.id {
			t.Errorf("call of %s on engine A, which hosts no tool", cl.key)
		}
	}
	for _, k := range []string{"s1", "s2", "s3", "s4", "s5", "s6"} {
		switch {
		case count[k] == 0:
			t.Errorf("step %s never called", k)
		case done[k] && count[k] != 1:
			t.Errorf("step %s completed before the restart and was called %d times", k, count[k])
		case count[k] > 2:
			t.Errorf("step %s called %d times", k, count[k])
		}
	}
	t.Logf("restart (%s) with %d of 6 steps completed; the run completed %s after it began (progress %+v); calls %v",
		restartTook.Round(time.Millisecond), len(done), took.Round(time.Millisecond), info.Progress, count)
	for _, nd := range nodes {
		nd.do("quit", "closed")
	}
}

// dbNow is the database server's clock.
func dbNow(t *testing.T, db string) time.Time {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var now time.Time
	if err := conn.QueryRow(context.Background(), `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// heartbeats are the engines rows' heartbeat_at, by engine id.
func heartbeats(t *testing.T, db string) map[string]time.Time {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT id, heartbeat_at FROM engines`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	var id string
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &at}, func() error { out[id] = at; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}
