package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/filehash"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memcluster"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/internal/tracing/tracectx"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Unit tests of the call queue between two engines of one in-memory database (memcluster) on a
// stub clock: A orchestrates and hosts nothing, B hosts the tool "export" and the pool "maya".

// fakeCaller is B's engine: it runs claimed calls by calling run (blocking until it returns).
type fakeCaller struct {
	tools   map[string]bool
	pools   map[string]int
	mu      sync.Mutex
	started []string
	run     func(ctx context.Context, call tools.Call) (tools.Result, error)
	env     json.RawMessage // the engine's own env (EnvCaller)
}

func (c *fakeCaller) Env() json.RawMessage { return c.env }

func (c *fakeCaller) HasTool(t string) bool       { return c.tools[t] }
func (c *fakeCaller) HasRemote(name string) bool  { _, ok := c.pools[name]; return ok }
func (c *fakeCaller) PoolWorkers() map[string]int { return c.pools }
func (c *fakeCaller) RemoteNames() []string {
	names := []string{}
	for n := range c.pools {
		names = append(names, n)
	}
	return names
}
func (c *fakeCaller) HostedTools() (tools, lanes []string) {
	for t := range c.tools {
		tools = append(tools, t)
	}
	return tools, []string{"main"}
}
func (c *fakeCaller) Call(ctx context.Context, call tools.Call) (tools.Result, error) {
	c.mu.Lock()
	c.started = append(c.started, call.StepKey)
	c.mu.Unlock()
	return c.run(ctx, call)
}
func (c *fakeCaller) CallRemote(ctx context.Context, call tools.Call) (tools.Result, error) {
	return c.Call(ctx, call)
}
func (c *fakeCaller) startedCount() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.started) }

type pair struct {
	clk    *clock.Stub
	a, b   *Queue
	ma, mb *Membership
	hb     *memcluster.Store
	caller *fakeCaller
}

// twoEngines starts the queues of A and B (not their heartbeats) and returns once both listen
// (memcluster delivers a wake-up to the listeners of the moment). With poll, the stub clock also
// moves a QueuePoll every few milliseconds, as the polls that carry the queue when a wake-up is
// lost (leases of an hour: nothing expires meanwhile).
func twoEngines(t *testing.T, poll bool, run func(ctx context.Context, call tools.Call) (tools.Result, error)) *pair {
	t.Helper()
	clk := clock.NewStub(t0)
	db := memcluster.NewMem(clk)
	ha, hb := db.Open(), db.Open()
	caller := &fakeCaller{tools: map[string]bool{"export": true}, pools: map[string]int{"maya": 1}, run: run}
	join := func(h *memcluster.Store, id string, c Caller) (*Membership, *Queue) {
		m, err := Join(context.Background(), Config{Leaser: h, Clock: clk, Host: &fakeHost{},
			Info: store.EngineInfo{ID: id, Lease: time.Hour, Remotes: c.RemoteNames()}}, &fakeLocal{})
		if err != nil {
			t.Fatal(err)
		}
		q := NewQueue(m, h, c)
		if err := q.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(q.Stop)
		return m, q
	}
	ma, a := join(ha, "A", &fakeCaller{})
	mb, b := join(hb, "B", caller)
	// A cancel reaches B's running call by its wake-up (or B's next beat, which these tests do
	// not run): wait until both listen, so that no wake-up is lost to a slow goroutine start.
	for deadline := time.Now().Add(10 * time.Second); db.Listening() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 2 queues listen after 10 s", db.Listening())
		}
	}
	if poll {
		stop := make(chan struct{})
		ticked := make(chan struct{})
		go func() {
			defer close(ticked)
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
					clk.Advance(QueuePoll)
				}
			}
		}()
		t.Cleanup(func() { close(stop); <-ticked })
	}
	return &pair{clk: clk, a: a, b: b, ma: ma, mb: mb, hb: hb, caller: caller}
}

func ok(v any) (tools.Result, error) { return tools.Result{Output: v}, nil }

// lateListener is a call queue whose listener starts listening only once gate is closed, as
// PostgreSQL's LISTEN starts some time after ListenCalls is called (long after, on a loaded
// machine; again after a lost connection): the wake-ups sent before then are lost. It counts
// the sweeps (Expired) of the engine it is the store of.
type lateListener struct {
	*memcluster.Store
	gate   chan struct{}
	sweeps atomic.Int32
}

func (l *lateListener) ListenCalls(ctx context.Context, ready func(), fn func(string)) error {
	select {
	case <-l.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return l.Store.ListenCalls(ctx, ready, fn)
}

func (l *lateListener) Expired(ctx context.Context, limit int) ([]store.Run, error) {
	l.sweeps.Add(1)
	return l.Store.Expired(ctx, limit)
}

// Once its listener listens, the queue does what the wake-ups lost before then asked: B, whose
// LISTEN starts only after a call of its tool was queued (q:export) and another engine closed
// (h:C), claims the call and sweeps at once, on a stub clock that does not move (no poll, no
// beat). Without it, a run handed over as B opened waited for B's next beat, a third of the
// lease (tests/go TestClosingEngineHandsItsRunOver failed so under load, 1 run in 25).
func TestQueueThatStartsListeningLooksForWhatItsLostWakeUpsSaid(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewStub(t0)
	db := memcluster.NewMem(clk)
	ha, hc := db.Open(), db.Open()
	for _, h := range []struct {
		s  *memcluster.Store
		id string
	}{{ha, "A"}, {hc, "C"}} {
		if err := h.s.Attach(ctx, store.EngineInfo{ID: h.id, Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	hb := &lateListener{Store: db.Open(), gate: make(chan struct{})}
	started := make(chan string, 1)
	caller := &fakeCaller{tools: map[string]bool{"export": true}, run: func(_ context.Context, call tools.Call) (tools.Result, error) {
		started <- call.StepKey
		return ok(1)
	}}
	mb, err := Join(ctx, Config{Leaser: hb, Clock: clk, Host: &fakeHost{}, Info: store.EngineInfo{ID: "B", Lease: time.Hour}}, &fakeLocal{})
	if err != nil {
		t.Fatal(err)
	}
	b := NewQueue(mb, hb, caller)
	for _, s := range []interface {
		Start(context.Context) error
		Stop()
	}{mb, b} {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
	}
	waitTimers(t, clk, 2) // B's heartbeat and its claimer's poll: the claimer looked once, found nothing
	id, err := ha.EnqueueCall(ctx, store.QueuedCall{RunID: "r1", StepKey: "export", Attempt: 1, Tool: "export", Args: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := hc.Detach(ctx); err != nil { // h:C, as C closes and releases its runs' leases
		t.Fatal(err)
	}
	if n := hb.sweeps.Load(); n != 0 || caller.startedCount() != 0 {
		t.Fatalf("before B listens: %d sweeps, %d calls started; want none", n, caller.startedCount())
	}
	close(hb.gate)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("B listens but did not claim the call queued before it listened")
	}
	waitUntil(t, "B's sweep once it listens", func() bool { return hb.sweeps.Load() >= 1 })
	waitUntil(t, "the call done", func() bool {
		status, _, err := ha.CallStatus(ctx, id)
		return err == nil && status == "done"
	})
}

// A call of a tool only B hosts goes through the queue: B claims it at the wake-up, runs it and
// writes the outcome; A's waiter returns it, with the worker that ran it.
func TestQueueCallRunsOnTheEngineThatHostsTheTool(t *testing.T) {
	p := twoEngines(t, true, func(_ context.Context, call tools.Call) (tools.Result, error) {
		return ok(map[string]any{"fbx": call.Args["scene"].(string) + ".fbx"})
	})
	if !p.a.HostedNow("export") || p.a.HostedNow("render") {
		t.Fatal("A does not see that B hosts export (and only export)")
	}
	res, err := p.a.Call(context.Background(), tools.Call{RunID: "r1", StepKey: "export", Attempt: 1, Tool: "export",
		Args: map[string]any{"scene": "shot010"}})
	if err != nil || res.Error != nil {
		t.Fatalf("Call: %+v %v", res, err)
	}
	var out map[string]any
	if json.Unmarshal(res.OutputJSON, &out) != nil || out["fbx"] != "shot010.fbx" || res.Worker != "B" {
		t.Fatalf("outcome %s from %q; want shot010.fbx from B", res.OutputJSON, res.Worker)
	}
}

// A's step ending (a cancel, its timeout) cancels the queued call: B's running call sees its
// context cancelled, and A gets the context's error.
func TestQueueCancelReachesTheRunningCall(t *testing.T) {
	started, stopped := make(chan struct{}), make(chan struct{})
	p := twoEngines(t, true, func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		close(started)
		<-ctx.Done()
		close(stopped)
		return tools.Result{}, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := p.a.Call(ctx, tools.Call{RunID: "r1", StepKey: "export", Attempt: 1, Tool: "export", Args: map[string]any{}})
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Call after its cancel: %v; want context.Canceled", err)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("B's call was not cancelled")
	}
}

// A claim B no longer holds at its beat (it expired and another engine's beat failed it
// worker_lost) is stopped: the call B runs sees its context cancelled.
func TestQueueBeatStopsAClaimItLost(t *testing.T) {
	started, stopped := make(chan struct{}, 1), make(chan struct{})
	p := twoEngines(t, false, func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		close(stopped)
		return tools.Result{}, ctx.Err()
	})
	res := make(chan tools.Result, 1)
	go func() {
		r, _ := p.a.Call(context.Background(), tools.Call{RunID: "r1", StepKey: "export", Attempt: 1, Tool: "export", Args: map[string]any{}})
		res <- r
	}()
	for claimed := false; !claimed; {
		p.b.KickNow() // claims once the call is queued, wake-up or not
		select {
		case <-started:
			claimed = true
		case <-time.After(5 * time.Millisecond):
		}
	}
	ctx := context.Background()
	p.clk.Advance(2 * time.Hour) // past B's claim (a lease of an hour)
	p.a.Beat(ctx)                // A's beat fails the expired claim worker_lost
	p.b.Beat(ctx)                // B's renewal does not get it back
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("B's beat did not stop the call whose claim it lost")
	}
	for got := false; !got; {
		select {
		case r := <-res:
			if r.Error == nil || r.Error.Kind != run.KindWorkerLost {
				t.Fatalf("outcome %+v; want worker_lost", r)
			}
			got = true
		case <-time.After(5 * time.Millisecond):
			p.clk.Advance(QueuePoll)
		}
	}
}

// B stopping cancels what it runs, written worker_lost for a retry elsewhere.
func TestQueueStopFailsRunningCallsWorkerLost(t *testing.T) {
	started := make(chan struct{}, 1)
	p := twoEngines(t, true, func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return tools.Result{}, ctx.Err()
	})
	res := make(chan tools.Result, 1)
	go func() {
		r, _ := p.a.Call(context.Background(), tools.Call{RunID: "r1", StepKey: "export", Attempt: 1, Tool: "export", Args: map[string]any{}})
		res <- r
	}()
	<-started
	p.b.Stop()
	r := <-res
	if r.Error == nil || r.Error.Kind != run.KindWorkerLost {
		t.Fatalf("outcome of a call whose engine stopped: %+v; want worker_lost", r)
	}
}

// B claims no more calls of a pool than its workers (1 for maya): the second waits queued until
// the first ends.
func TestQueueClaimsNoMorePoolCallsThanWorkers(t *testing.T) {
	release := make(chan struct{})
	p := twoEngines(t, true, func(context.Context, tools.Call) (tools.Result, error) {
		<-release
		return ok(1)
	})
	done := make(chan struct{}, 2)
	for _, key := range []string{"one", "two"} {
		go func() {
			_, _ = p.a.Call(context.Background(), tools.Call{RunID: "r1", StepKey: key, Attempt: 1, Tool: "open", DCC: "maya", Args: map[string]any{}})
			done <- struct{}{}
		}()
	}
	waitUntil(t, "the first pool call to start", func() bool { return p.caller.startedCount() == 1 })
	p.b.KickNow()
	time.Sleep(20 * time.Millisecond) // a claim pass, had it room (none expected)
	if n := p.caller.startedCount(); n != 1 {
		t.Fatalf("%d maya calls running on one worker", n)
	}
	close(release)
	for range 2 {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a pool call never ended")
		}
	}
	if n := p.caller.startedCount(); n != 2 {
		t.Fatalf("%d calls ran; want 2", n)
	}
}

// Without a wake-up, a waiter reads its call's status every QueuePoll on the engine clock.
func TestQueueWaiterPollsOnTheClock(t *testing.T) {
	p := twoEngines(t, false, func(context.Context, tools.Call) (tools.Result, error) { return ok(1) })
	p.b.Stop() // B claims nothing: the test completes the call by hand
	res := make(chan tools.Result, 1)
	go func() {
		r, _ := p.a.Call(context.Background(), tools.Call{RunID: "r1", StepKey: "export", Attempt: 1, Tool: "export", Args: map[string]any{}})
		res <- r
	}()
	var c *store.QueuedCall
	waitUntil(t, "the call to be queued", func() bool {
		var err error
		c, err = p.hb.ClaimCall(context.Background(), []string{"export"}, nil)
		return err == nil && c != nil
	})
	if done, err := p.hb.CompleteCall(context.Background(), c.ID, store.CallOutcome{Output: json.RawMessage(`7`)}); !done || err != nil {
		t.Fatalf("CompleteCall: %v %v", done, err)
	}
	var r tools.Result
	for got := false; !got; {
		select {
		case r = <-res: // the completion's wake-up, when A listened by then, else a poll
			got = true
		case <-time.After(5 * time.Millisecond):
			p.clk.Advance(QueuePoll)
		}
	}
	if string(r.OutputJSON) != "7" {
		t.Fatalf("outcome %s; want 7", r.OutputJSON)
	}
}

// The files a call reported and its env cross the queue with its outcome, a success's and a
// failure's alike: B makes the relative paths absolute against its current directory, keeps
// each (role, path) once, leaves out a path that names no file (empty) and reads any role but
// "write" as "read"; a call whose tool's side reported no env carries B's own.
func TestQueueCarriesTheFilesAndEnvOfTheCall(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	env := json.RawMessage(`{"dcc":"maya","version":"2025.1"}`)
	reported := []flowtype.FileUse{
		{Path: "/show/sh010/layout.usda", Role: flowtype.FileRead},
		{Path: "cache/sh010.abc", Role: flowtype.FileWrite},
		{Path: "/show/sh010/layout.usda", Role: flowtype.FileRead},
		{Path: "", Role: flowtype.FileWrite},
		{Path: "/show/sh010/layout.usda", Role: "bogus"},
		{Path: "/show/sh010/layout.usda", Role: flowtype.FileWrite},
	}
	p := twoEngines(t, true, func(_ context.Context, call tools.Call) (tools.Result, error) {
		switch call.StepKey {
		case "ok":
			return tools.Result{Output: 1, Files: reported, Env: env}, nil
		case "failed":
			return tools.Result{Error: &tools.ToolError{Kind: "error", Message: "the export crashed"}, Files: reported[:2], Env: env}, nil
		default: // no env of its own: B's
			return tools.Result{Output: 2, Files: reported[:1]}, nil
		}
	})
	p.caller.env = json.RawMessage(`{"dcc":"maya","version":"2024.2","host":"farm01"}`)
	clean := func(p string) string { // the path as B's filehash.Clean makes it (Windows: \show\…)
		t.Helper()
		c, err := filehash.Clean(p)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	layout := clean("/show/sh010/layout.usda")
	if abc := clean("cache/sh010.abc"); abc != clean(filepath.Join(wd, "cache", "sh010.abc")) || !filepath.IsAbs(abc) {
		t.Fatalf("Clean(cache/sh010.abc) = %s; want it absolute under %s", abc, wd)
	}
	want := []flowtype.FileUse{
		{Path: layout, Role: flowtype.FileRead},
		{Path: clean(filepath.Join(wd, "cache", "sh010.abc")), Role: flowtype.FileWrite},
		{Path: layout, Role: flowtype.FileWrite},
	}
	call := func(key string) tools.Result {
		t.Helper()
		res, err := p.a.Call(context.Background(), tools.Call{RunID: "r1", StepKey: key, Attempt: 1, Tool: "export", Args: map[string]any{}})
		if err != nil {
			t.Fatalf("Call(%s): %v", key, err)
		}
		return res
	}
	if res := call("ok"); res.Error != nil || !reflect.DeepEqual(res.Files, want) || string(res.Env) != string(env) {
		t.Fatalf("a success: %+v\nfiles %+v\nwant  %+v", res, res.Files, want)
	}
	if res := call("failed"); res.Error == nil || res.Error.Message != "the export crashed" || !reflect.DeepEqual(res.Files, want[:2]) ||
		string(res.Env) != string(env) {
		t.Fatalf("a failure: %+v; want its error with its files %+v and env", res, want[:2])
	}
	if res := call("no env"); res.Error != nil || !reflect.DeepEqual(res.Files, want[:1]) || string(res.Env) != string(p.caller.env) {
		t.Fatalf("a call without env: env %s files %+v; want B's env %s", res.Env, res.Files, p.caller.env)
	}
	p.caller.env = nil
	if res := call("none"); res.Error != nil || res.Env != nil {
		t.Fatalf("no env on either side: env %q; want none (the orchestrator records its own)", res.Env)
	}
}

// A call that reported more files than cross the queue (MaxQueuedFiles, or
// MaxQueuedFilePathBytes of paths; B's bounds are lowered to 5 files and four of its long paths here) fails
// limit_exceeded with the files within the bounds: carrying part of them with a success would
// record (and cache) the attempt without the others. A tool's own failure keeps its error.
// Repeats do not count.
func TestQueueRedteamTooManyFilesFailTheCall(t *testing.T) {
	if MaxQueuedFiles != 100_000 || MaxQueuedFilePathBytes != 16<<20 || byteSize(MaxQueuedFilePathBytes) != "16 MiB" {
		t.Fatalf("the bounds are %d files and %s; dcc_flow's MAX_FILES_PER_CALL and MAX_FILES_BYTES are 100,000 and 16 MiB",
			MaxQueuedFiles, byteSize(MaxQueuedFilePathBytes))
	}
	var many, long []flowtype.FileUse
	for i := range 6 {
		many = append(many, flowtype.FileUse{Path: fmt.Sprintf("/f/%d.exr", i), Role: flowtype.FileWrite}) // 8 bytes each
	}
	for i := range 5 { // 4 of them fill the path bytes allowed (pathBytes, below)
		long = append(long, flowtype.FileUse{Path: fmt.Sprintf("/%d%s", i, strings.Repeat("x", 23)), Role: flowtype.FileRead})
	}
	// The bytes are counted on the cleaned paths: "/0xxx…" on POSIX, `C:\0xxx…` on Windows.
	cleaned, err := filehash.Clean(long[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	pathBytes := 4*len(cleaned) + len(cleaned)/2
	p := twoEngines(t, true, func(_ context.Context, call tools.Call) (tools.Result, error) {
		switch call.StepKey {
		case "many":
			return tools.Result{Output: 1, Files: many}, nil
		case "long":
			return tools.Result{Output: 1, Files: long}, nil
		case "within":
			return tools.Result{Output: 1, Files: append(many[:5:5], many[0], many[3], many[4])}, nil
		default:
			return tools.Result{Error: &tools.ToolError{Kind: "transient", Message: "the farm is busy"}, Files: long}, nil
		}
	})
	p.b.maxFiles, p.b.maxFilePathBytes = 5, pathBytes // before any call: B's claims read them after
	call := func(key string) tools.Result {
		t.Helper()
		res, err := p.a.Call(context.Background(), tools.Call{RunID: "r1", StepKey: key, Attempt: 1, Tool: "export", Args: map[string]any{}})
		if err != nil {
			t.Fatalf("Call(%s): %v", key, err)
		}
		return res
	}
	for _, tc := range []struct {
		key        string
		reported   []flowtype.FileUse
		kept, said int
	}{{"many", many, 5, 6}, {"long", long, 4, 5}} {
		res := call(tc.key)
		if res.Error == nil || res.Error.Kind != "limit_exceeded" || len(res.Files) != tc.kept || res.OutputJSON != nil ||
			!strings.Contains(res.Error.Message, fmt.Sprintf("the call of tool export on engine B reported %d files", tc.said)) ||
			!strings.Contains(res.Error.Message, fmt.Sprintf("at most 5 files and %d bytes of paths; the first %d were kept", pathBytes, tc.kept)) ||
			!strings.Contains(res.Error.Message, "foreach") {
			t.Fatalf("%s: error %+v, %d files; want limit_exceeded naming the tool, the engine, the count and the fix, with %d files",
				tc.key, res.Error, len(res.Files), tc.kept)
		}
		for i, f := range res.Files {
			if c, _ := filehash.Clean(tc.reported[i].Path); f.Path != c || f.Role != tc.reported[i].Role {
				t.Fatalf("%s: file %d is %+v; want the first reported, in order", tc.key, i, f)
			}
		}
	}
	if res := call("within"); res.Error != nil || len(res.Files) != 5 {
		t.Fatalf("5 files and repeats: error %+v, %d files; want a success with the 5", res.Error, len(res.Files))
	}
	if res := call("failed"); res.Error == nil || res.Error.Kind != "transient" || len(res.Files) != 4 {
		t.Fatalf("a failure past the bound: error %+v, %d files; want its own error with the first 4 files", res.Error, len(res.Files))
	}
}

// Files on the queue that are not a JSON list (a row edited by hand) fail a successful call
// invalid_output rather than record it without them; a failure keeps its own error. An env that
// is not a JSON object is none.
func TestQueueRedteamUnreadableFilesOnTheQueue(t *testing.T) {
	p := twoEngines(t, true, func(context.Context, tools.Call) (tools.Result, error) { return ok(1) })
	p.b.Stop() // B claims nothing: the test completes the calls by hand
	for _, tc := range []struct {
		key  string
		out  store.CallOutcome
		kind string
	}{
		{"ok", store.CallOutcome{Output: json.RawMessage(`1`), Files: json.RawMessage(`{"path":"/a"}`), Env: json.RawMessage(`[1]`)}, run.KindInvalidOutput},
		{"failed", store.CallOutcome{ErrorKind: "transient", ErrorMessage: "busy", Files: json.RawMessage(`"x"`)}, "transient"},
	} {
		res := make(chan tools.Result, 1)
		go func() {
			r, _ := p.a.Call(context.Background(), tools.Call{RunID: "r1", StepKey: tc.key, Attempt: 1, Tool: "export", Args: map[string]any{}})
			res <- r
		}()
		var c *store.QueuedCall
		waitUntil(t, "the call to be queued", func() bool {
			var err error
			c, err = p.hb.ClaimCall(context.Background(), []string{"export"}, nil)
			return err == nil && c != nil
		})
		if done, err := p.hb.CompleteCall(context.Background(), c.ID, tc.out); !done || err != nil {
			t.Fatalf("CompleteCall: %v %v", done, err)
		}
		r := <-res
		if r.Error == nil || r.Error.Kind != tc.kind || r.Files != nil || r.Env != nil || r.OutputJSON != nil {
			t.Fatalf("%s: %+v (error %+v); want kind %s, no files, no env", tc.key, r, r.Error, tc.kind)
		}
		if tc.kind == run.KindInvalidOutput && !strings.Contains(r.Error.Message, fmt.Sprintf("the files of queued call %d are not a JSON list", c.ID)) {
			t.Fatalf("message %q", r.Error.Message)
		}
	}
}

// The traceparent of a queued call's span crosses the queue: B's tool gets it as
// Call.Traceparent and in its context (tracectx, for a pool worker's _meta), a host tool's and
// a remote's call alike; a call queued without one, or with one not of the W3C form, gets none.
func TestQueueCallCarriesItsTraceparent(t *testing.T) {
	type seen struct{ call, ctx string }
	got := make(chan seen, 1)
	p := twoEngines(t, true, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		got <- seen{call.Traceparent, tracectx.From(ctx)}
		return ok(1)
	})
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, tc := range []struct {
		name, remote, sent, want string
	}{
		{"host tool", "", tp, tp},
		{"remote", "maya", tp, tp},
		{"none", "", "", ""},
		{"malformed", "", "00-zz-\n", ""},
	} {
		res, err := p.a.Call(context.Background(), tools.Call{RunID: "r1", StepKey: tc.name, Attempt: 1, Tool: "export", DCC: tc.remote,
			Args: map[string]any{}, Traceparent: tc.sent})
		if err != nil || res.Error != nil {
			t.Fatalf("%s: Call: %+v %v", tc.name, res, err)
		}
		if s := <-got; s.call != tc.want || s.ctx != tc.want {
			t.Errorf("%s: B's tool got traceparent %q (context %q); want %q", tc.name, s.call, s.ctx, tc.want)
		}
	}
}
