package tools_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

var t0 = time.Date(2026, 3, 8, 3, 0, 0, 0, time.UTC)

type bundle struct {
	clk    *clock.Stub
	router *tools.Router
	host   *tools.Host
}

func setup(t *testing.T) *bundle {
	t.Helper()
	clk := clock.NewStub(t0)
	r := tools.NewRouter(clk, nil)
	t.Cleanup(r.Host().Close)
	return &bundle{clk: clk, router: r, host: r.Host()}
}

type callOut struct {
	res tools.Result
	err error
}

func (b *bundle) callAsync(ctx context.Context, call tools.Call) <-chan callOut {
	ch := make(chan callOut, 1)
	go func() {
		res, err := b.router.Call(ctx, call)
		ch <- callOut{res, err}
	}()
	return ch
}

func (b *bundle) next(t *testing.T, lane string, max int) []tools.PendingCall {
	t.Helper()
	calls, err := b.host.Pull(context.Background(), tools.PullRequest{Lanes: []string{lane}, Max: max, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

func TestHostRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.router.RegisterHost(tools.ToolInfo{Name: "maya__export", Lane: tools.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	deadline := t0.Add(time.Minute)
	out := b.callAsync(context.Background(), tools.Call{RunID: "r", StepKey: "per_file[1].export", Tool: "maya__export",
		Args: map[string]any{"scene": "a.ma"}, Attempt: 2, Deadline: deadline})
	calls := b.next(t, tools.LaneWorker, 10)
	if len(calls) != 1 {
		t.Fatalf("calls %+v", calls)
	}
	c := calls[0]
	if c.ID == 0 || c.Tool != "maya__export" || c.RunID != "r" || c.StepKey != "per_file[1].export" || c.Attempt != 2 ||
		c.Args["scene"] != "a.ma" || !c.Deadline.Equal(deadline) || c.Lane != tools.LaneWorker {
		t.Fatalf("pending call %+v", c)
	}
	if b.host.Cancelled(c.ID) {
		t.Fatal("a live call is not cancelled")
	}
	if err := b.host.Complete(c.ID, tools.Result{OutputJSON: []byte(`{"fbx":"a.fbx"}`)}); err != nil {
		t.Fatal(err)
	}
	o := <-out
	if o.err != nil || string(o.res.OutputJSON) != `{"fbx":"a.fbx"}` {
		t.Fatalf("result %+v %v", o.res, o.err)
	}
	err := b.host.Complete(c.ID, tools.Result{})
	if run.CodeOf(err) != run.CodeInvalidState {
		t.Fatalf("second Complete: %v", err)
	}
	if err := b.host.Complete(999999, tools.Result{}); run.CodeOf(err) != run.CodeNotFound {
		t.Fatalf("unknown id: %v", err)
	}
	if !b.host.Cancelled(c.ID) || !b.host.Cancelled(424242) {
		t.Fatal("answered and unknown calls report cancelled")
	}
}

func TestHostPullBatchesAndTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_ = b.router.RegisterHost(tools.ToolInfo{Name: "t"})
	start := time.Now()
	calls, err := b.host.Pull(context.Background(), tools.PullRequest{Lanes: []string{tools.LaneMain}, Max: 5, Timeout: 20 * time.Millisecond})
	if err != nil || len(calls) != 0 {
		t.Fatalf("empty lane: %v %v", calls, err)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Fatal("Pull returned before its timeout")
	}
	outs := make([]<-chan callOut, 3)
	for i := range outs {
		outs[i] = b.callAsync(context.Background(), tools.Call{Tool: "t", StepKey: "s", Attempt: 1})
	}
	for b.host.Pending() < 3 {
		time.Sleep(time.Millisecond)
	}
	got := b.next(t, tools.LaneMain, 2)
	if len(got) != 2 {
		t.Fatalf("max 2: got %d", len(got))
	}
	rest := b.next(t, tools.LaneMain, 0)
	if len(rest) != 1 {
		t.Fatalf("max 0 means 1: got %d", len(rest))
	}
	if calls, _ := b.host.Pull(context.Background(), tools.PullRequest{Lanes: []string{tools.LaneWorker}, Max: 5, Timeout: 0}); len(calls) != 0 {
		t.Fatal("the worker lane holds nothing")
	}
	// Answering, then pulling the next call (as dccflow_calls_complete with "next" does).
	for _, c := range append(got, rest...)[:2] {
		if err := b.host.Complete(c.ID, tools.Result{Output: 1.0}); err != nil {
			t.Fatal(err)
		}
	}
	next := b.callAsync(context.Background(), tools.Call{Tool: "t", Attempt: 1})
	if err := b.host.Complete(rest[0].ID, tools.Result{Output: 2.0}); err != nil {
		t.Fatal(err)
	}
	calls = b.next(t, tools.LaneMain, 1)
	if len(calls) != 1 {
		t.Fatalf("the next call: %v", calls)
	}
	_ = b.host.Complete(calls[0].ID, tools.Result{Output: 3.0})
	for _, ch := range append(outs, next) {
		if o := <-ch; o.err != nil {
			t.Fatal(o.err)
		}
	}
	if err := b.host.Complete(calls[0].ID, tools.Result{}); run.CodeOf(err) != run.CodeInvalidState {
		t.Fatalf("Complete with a stale id: %v", err)
	}
	if _, err := b.host.Pull(context.Background(), tools.PullRequest{Lanes: []string{"gpu"}, Max: 1, Timeout: 0}); run.CodeOf(err) != run.CodeInvalidRequest {
		t.Fatalf("unknown lane: %v", err)
	}
}

func TestHostWithdrawsCancelledCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_ = b.router.RegisterHost(tools.ToolInfo{Name: "t"})
	cause := errors.New("user cancelled the run")

	// Cancelled before it was pulled: never handed out.
	ctx1, cancel1 := context.WithCancelCause(context.Background())
	out1 := b.callAsync(ctx1, tools.Call{Tool: "t"})
	for b.host.Pending() < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel1(cause)
	if o := <-out1; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled call: %v", o.err)
	}
	if calls, _ := b.host.Pull(context.Background(), tools.PullRequest{Lanes: []string{tools.LaneMain}, Max: 5, Timeout: 0}); len(calls) != 0 {
		t.Fatalf("a withdrawn call was handed out: %+v", calls)
	}

	// Cancelled after it was pulled: Cancelled reports it and the late answer is dropped.
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	out2 := b.callAsync(ctx2, tools.Call{Tool: "t"})
	c := b.next(t, tools.LaneMain, 1)[0]
	cancel2(cause)
	if o := <-out2; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled pulled call: %v", o.err)
	}
	if !b.host.Cancelled(c.ID) {
		t.Fatal("Cancelled should report true")
	}
	err := b.host.Complete(c.ID, tools.Result{Output: "late"})
	var re *run.Error
	if !errors.As(err, &re) || re.Code != run.CodeInvalidState || !errors.Is(err, tools.ErrDropped) || re.Details["reason"] != cause.Error() {
		t.Fatalf("late Complete: %#v", err)
	}
	if b.host.Pending() != 0 {
		t.Fatalf("pending %d", b.host.Pending())
	}
}

// TestCompleteRacingCancel answers calls at the moment their step is cancelled: whoever wins,
// Call returns, and a completion that lost is reported as dropped.
func TestCompleteRacingCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_ = b.router.RegisterHost(tools.ToolInfo{Name: "t"})
	for i := 0; i < 300; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		out := b.callAsync(ctx, tools.Call{Tool: "t"})
		c := b.next(t, tools.LaneMain, 1)[0]
		cancel()
		err := b.host.Complete(c.ID, tools.Result{Output: 1.0})
		o := <-out
		switch {
		case err == nil && (o.err != nil || o.res.Output != 1.0):
			t.Fatalf("accepted completion not delivered: %+v %v", o.res, o.err)
		case err != nil && (run.CodeOf(err) != run.CodeInvalidState || !errors.Is(o.err, context.Canceled)):
			t.Fatalf("dropped completion: %v; call returned %v", err, o.err)
		}
	}
	if b.host.Pending() != 0 {
		t.Fatalf("pending %d", b.host.Pending())
	}
}

func TestHostManyWithdrawnCallsAreCompacted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_ = b.router.RegisterHost(tools.ToolInfo{Name: "t"})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 500; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = b.router.Call(ctx, tools.Call{Tool: "t"})
		}()
	}
	for b.host.Pending() < 500 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	live := b.callAsync(context.Background(), tools.Call{Tool: "t", StepKey: "live"})
	got := b.next(t, tools.LaneMain, 10)
	if len(got) != 1 || got[0].StepKey != "live" {
		t.Fatalf("after withdrawals: %+v", got)
	}
	_ = b.host.Complete(got[0].ID, tools.Result{})
	<-live
}

func TestHostClose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_ = b.router.RegisterHost(tools.ToolInfo{Name: "t"})
	out := b.callAsync(context.Background(), tools.Call{Tool: "t"})
	for b.host.Pending() < 1 {
		time.Sleep(time.Millisecond)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := b.host.Pull(context.Background(), tools.PullRequest{Lanes: []string{tools.LaneWorker}, Max: 1, Timeout: time.Minute})
		blocked <- err
	}()
	b.host.Close()
	b.host.Close()
	if o := <-out; !errors.Is(o.err, tools.ErrClosed) {
		t.Fatalf("call after close: %v", o.err)
	}
	if err := <-blocked; run.CodeOf(err) != run.CodeClosed {
		t.Fatalf("blocked Next: %v", err)
	}
	if _, err := b.router.Call(context.Background(), tools.Call{Tool: "t"}); !errors.Is(err, tools.ErrClosed) {
		t.Fatalf("new call: %v", err)
	}
}

func TestRegisterHostValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, info := range []tools.ToolInfo{
		{Name: ""}, {Name: "bad name"}, {Name: "flow__mine"}, {Name: "t", Lane: "gpu"},
		{Name: "t", MaxConcurrent: -1}, {Name: "t", Schema: []byte("{")},
	} {
		if err := b.router.RegisterHost(info); run.CodeOf(err) != run.CodeInvalidRequest {
			t.Errorf("RegisterHost(%+v) = %v", info, err)
		}
	}
	if err := b.router.RegisterHost(tools.ToolInfo{Name: "maya__qc", MaxConcurrent: 2}); err != nil {
		t.Fatal(err)
	}
	info, ok := b.router.Lookup("maya__qc")
	if !ok || info.Lane != tools.LaneMain || info.MaxConcurrent != 2 {
		t.Fatalf("lookup %+v %v", info, ok)
	}
	names := ""
	for _, ti := range b.router.Tools() {
		names += ti.Name + " "
	}
	if names != "flow__echo flow__fail flow__sleep maya__qc " {
		t.Fatalf("tools %q", names)
	}
	if b.router.UnregisterHost(tools.Echo) || !b.router.UnregisterHost("maya__qc") || b.router.UnregisterHost("maya__qc") {
		t.Fatal("UnregisterHost results")
	}
	if _, err := b.router.Call(context.Background(), tools.Call{Tool: "maya__qc"}); !errors.Is(err, tools.ErrUnknownTool) {
		t.Fatalf("unknown tool: %v", err)
	}
}

func TestMaxConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_ = b.router.RegisterHost(tools.ToolInfo{Name: "t", MaxConcurrent: 2})
	outs := make([]<-chan callOut, 5)
	for i := range outs {
		outs[i] = b.callAsync(context.Background(), tools.Call{Tool: "t"})
	}
	served := 0
	for served < 5 {
		calls := b.next(t, tools.LaneMain, 10)
		if len(calls) > 2 {
			t.Fatalf("%d calls in flight, limit 2", len(calls))
		}
		time.Sleep(5 * time.Millisecond) // give blocked callers a chance to overshoot the limit
		if p := b.host.Pending(); p > 2 {
			t.Fatalf("%d calls pending, limit 2", p)
		}
		for _, c := range calls {
			_ = b.host.Complete(c.ID, tools.Result{})
			served++
		}
	}
	for _, ch := range outs {
		<-ch
	}
}

func TestBuiltins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.router.Call(ctx, tools.Call{Tool: tools.Echo, Args: map[string]any{"value": 3.0}})
	if err != nil || res.Output.(map[string]any)["value"] != 3.0 {
		t.Fatalf("echo: %+v %v", res, err)
	}

	fail := tools.Call{Tool: tools.Fail, RunID: "r", StepKey: "s", Args: map[string]any{"times": 2.0, "kind": "transient"}}
	for i := 1; i <= 2; i++ {
		fail.Attempt = i
		res, _ := b.router.Call(ctx, fail)
		if res.Error == nil || res.Error.Kind != "transient" || res.Error.Message != "flow__fail: failure "+string(rune('0'+i))+" of 2" {
			t.Fatalf("failure %d: %+v", i, res.Error)
		}
	}
	other := fail
	other.StepKey = "other"
	if res, _ := b.router.Call(ctx, other); res.Error == nil {
		t.Fatal("counts are per step instance")
	}
	fail.Attempt = 3
	res, _ = b.router.Call(ctx, fail)
	if res.Error != nil || res.Output.(map[string]any)["failures"] != 2.0 || res.Output.(map[string]any)["attempt"] != 3.0 {
		t.Fatalf("success after failures: %+v", res)
	}
	always, _ := b.router.Call(ctx, tools.Call{Tool: tools.Fail, Args: map[string]any{"kind": "fatal", "trace": "tb"}})
	if always.Error == nil || always.Error.Kind != "fatal" || always.Error.Trace != "tb" {
		t.Fatalf("always fails: %+v", always.Error)
	}
	bad, _ := b.router.Call(ctx, tools.Call{Tool: tools.Fail, Args: map[string]any{"times": "x"}})
	if bad.Error == nil || bad.Error.Kind != run.KindInvalidInput {
		t.Fatalf("bad times: %+v", bad.Error)
	}
	if bad, _ := b.router.Call(ctx, tools.Call{Tool: tools.Sleep, Args: map[string]any{"ms": -1.0}}); bad.Error == nil || bad.Error.Kind != run.KindInvalidInput {
		t.Fatalf("bad ms: %+v", bad.Error)
	}
}

func TestSleepOnTheEngineClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.callAsync(context.Background(), tools.Call{Tool: tools.Sleep, Args: map[string]any{"ms": 1500.0}})
	if err := b.clk.WaitForTimers(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	b.clk.Advance(1499 * time.Millisecond)
	select {
	case <-out:
		t.Fatal("woke early")
	default:
	}
	b.clk.Advance(time.Millisecond)
	if o := <-out; o.err != nil || o.res.Output.(map[string]any)["slept_ms"] != 1500.0 {
		t.Fatalf("sleep: %+v %v", o.res, o.err)
	}
}

func TestBlockingToolIgnoringCancelIsAbandoned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("stop")
	out := b.callAsync(ctx, tools.Call{Tool: tools.Sleep, Args: map[string]any{"ms": 60000.0, "ignore_cancel": true}})
	if err := b.clk.WaitForTimers(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	cancel(cause)
	if o := <-out; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("abandoned call: %v", o.err)
	}
	if b.clk.Pending() != 1 {
		t.Fatal("the tool itself keeps sleeping: it ignores its context")
	}
	b.clk.Advance(time.Minute) // let the abandoned goroutine finish
}

type remoteDouble struct{ calls atomic.Int32 }

func (r *remoteDouble) CallRemote(ctx context.Context, dcc, tool string, args map[string]any) (tools.Result, error) {
	r.calls.Add(1)
	if tool == "hang" {
		select {} // ignores ctx entirely
	}
	return tools.Result{Output: map[string]any{"dcc": dcc, "tool": tool, "args": args}}, nil
}

func TestRemote(t *testing.T) {
	t.Parallel()
	clk := clock.NewStub(t0)
	rd := &remoteDouble{}
	r := tools.NewRouter(clk, rd)
	if !r.HasRemote() {
		t.Fatal("HasRemote")
	}
	res, err := r.CallRemote(context.Background(), tools.Call{DCC: "unreal", Tool: "import_assets", Args: map[string]any{"x": 1.0}})
	if err != nil || res.Output.(map[string]any)["dcc"] != "unreal" {
		t.Fatalf("remote: %+v %v", res, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := r.CallRemote(ctx, tools.Call{DCC: "unreal", Tool: "hang"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hanging remote: %v", err)
	}
	none := tools.NewRouter(clk, nil)
	if _, err := none.CallRemote(context.Background(), tools.Call{DCC: "unreal", Tool: "x"}); !errors.Is(err, tools.ErrNoRemote) {
		t.Fatalf("no remote: %v", err)
	}
}

// TestRemoteRouting: a call of a remote this engine has goes to its RemoteCaller; of one it
// lacks, to the queue when another engine has it (with the remote in Call.DCC), else a step's
// own optional pool runs in-process, and anything else is the RemoteCaller's to refuse as
// before. A call claimed from the queue is never queued again.
func TestRemoteRouting(t *testing.T) {
	t.Parallel()
	clk := clock.NewStub(t0)
	rd := &remoteDouble{}
	r := tools.NewRouter(clk, rd)
	r.SetRemoteNames([]string{"maya"})
	var queued []tools.Call
	r.SetQueue(tools.CallerFunc(func(_ context.Context, c tools.Call) (tools.Result, error) {
		queued = append(queued, c)
		return tools.Result{Output: "queued", Worker: "E/" + c.DCC + "/1"}, nil
	}), func(string) bool { return false }, func(name string) bool { return name == "houdini" })
	if !r.HasRemoteNamed("maya") || r.HasRemoteNamed("houdini") {
		t.Fatal("HasRemoteNamed")
	}
	ctx := context.Background()
	res, err := r.CallRemote(ctx, tools.Call{DCC: "maya", Tool: "t", Pooled: true, PoolOptional: true})
	if err != nil || res.Output.(map[string]any)["dcc"] != "maya" || len(queued) != 0 {
		t.Fatalf("local pool: %+v %v %v", res, err, queued)
	}
	res, err = r.CallRemote(ctx, tools.Call{DCC: "houdini", Tool: "t"})
	if err != nil || res.Output != "queued" || len(queued) != 1 || queued[0].DCC != "houdini" {
		t.Fatalf("another engine's remote: %+v %v %v", res, err, queued)
	}
	res, err = r.CallRemote(ctx, tools.Call{DCC: "nuke", Tool: "flow__echo", Args: map[string]any{"value": 1.0}, Pooled: true, PoolOptional: true})
	if err != nil || res.Output.(map[string]any)["value"] != 1.0 || len(queued) != 1 {
		t.Fatalf("optional pool nobody has: %+v %v %v", res, err, queued)
	}
	res, err = r.CallRemote(ctx, tools.Call{DCC: "houdini", Tool: "t", Queued: true})
	if err != nil || res.Output.(map[string]any)["dcc"] != "houdini" || len(queued) != 1 {
		t.Fatalf("a claimed call went back to the queue: %+v %v %v", res, err, queued)
	}
}

// adoptingQueue is a queue caller that adopts the calls of step "left" (tools.Adopter).
type adoptingQueue struct {
	asked []string // the step keys Adopt was asked about
}

func (q *adoptingQueue) Call(_ context.Context, c tools.Call) (tools.Result, error) {
	return tools.Result{Output: "queued"}, nil
}

func (q *adoptingQueue) Adopt(_ context.Context, c tools.Call) (tools.Result, bool, error) {
	q.asked = append(q.asked, c.StepKey)
	if c.StepKey == "left" {
		return tools.Result{Output: "adopted"}, true, nil
	}
	return tools.Result{}, false, nil
}

// TestAdoptRouting: a call with Adopt set asks the queue first — a host tool of this engine, a
// tool of another engine's, a remote's call — and takes the outcome of the call it adopts; one
// without Adopt, a built-in's and a call claimed from the queue never ask.
func TestAdoptRouting(t *testing.T) {
	t.Parallel()
	r := tools.NewRouter(clock.NewStub(t0), &remoteDouble{})
	t.Cleanup(r.Host().Close)
	r.SetRemoteNames([]string{"maya"})
	q := &adoptingQueue{}
	r.SetQueue(q, func(tool string) bool { return tool == "elsewhere" }, func(string) bool { return false })
	if err := r.RegisterHost(tools.ToolInfo{Name: "export"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []tools.Call{
		{StepKey: "left", Tool: "export", Adopt: true},
		{StepKey: "left", Tool: "elsewhere", Adopt: true},
	} {
		if res, err := r.Call(ctx, c); err != nil || res.Output != "adopted" {
			t.Errorf("%s: %+v %v, want the adopted outcome", c.Tool, res, err)
		}
	}
	if res, err := r.CallRemote(ctx, tools.Call{StepKey: "left", DCC: "maya", Tool: "t", Adopt: true}); err != nil || res.Output != "adopted" {
		t.Errorf("remote: %+v %v, want the adopted outcome", res, err)
	}
	if res, err := r.Call(ctx, tools.Call{StepKey: "fresh", Tool: "elsewhere", Adopt: true}); err != nil || res.Output != "queued" {
		t.Errorf("nothing to adopt: %+v %v, want the call queued", res, err)
	}
	asked := len(q.asked)
	if res, err := r.Call(ctx, tools.Call{StepKey: "left", Tool: tools.Echo, Args: map[string]any{"value": 1.0}, Adopt: true}); err != nil || res.Output == "adopted" {
		t.Errorf("built-in: %+v %v", res, err)
	}
	if res, err := r.Call(ctx, tools.Call{StepKey: "left", Tool: "elsewhere"}); err != nil || res.Output != "queued" {
		t.Errorf("no Adopt: %+v %v", res, err)
	}
	if res, err := r.CallRemote(ctx, tools.Call{StepKey: "left", DCC: "maya", Tool: "t", Adopt: true, Queued: true}); err != nil || res.Output == "adopted" {
		t.Errorf("a claimed call: %+v %v", res, err)
	}
	if len(q.asked) != asked {
		t.Errorf("asked the queue to adopt %v; a built-in, a call without Adopt and a claimed call must not ask", q.asked[asked:])
	}
}

// TestDryRouter: a dry router hands every call, of any name (a built-in, an unknown tool, a
// tool_remote), to its caller, and calls nothing else.
func TestDryRouter(t *testing.T) {
	var got []string
	r := tools.NewDryRouter(tools.CallerFunc(func(_ context.Context, c tools.Call) (tools.Result, error) {
		got = append(got, c.DCC+"/"+c.Tool)
		return tools.Result{Output: "fixture"}, nil
	}))
	t.Cleanup(r.Host().Close)
	for _, name := range []string{tools.Fail, tools.Sleep, "never_registered"} {
		if !r.Inline(name) {
			t.Errorf("%s is not inline in a dry router", name)
		}
		res, err := r.Call(context.Background(), tools.Call{Tool: name, Args: map[string]any{"ms": 60_000}})
		if err != nil || res.Error != nil || res.Output != "fixture" {
			t.Errorf("%s: %+v %v", name, res, err)
		}
	}
	res, err := r.CallRemote(context.Background(), tools.Call{DCC: "maya", Tool: "export"})
	if err != nil || res.Output != "fixture" {
		t.Errorf("remote: %+v %v", res, err)
	}
	want := []string{"/" + tools.Fail, "/" + tools.Sleep, "/never_registered", "maya/export"}
	if len(got) != len(want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("calls %v, want %v", got, want)
		}
	}
	if len(r.Tools()) != 0 {
		t.Errorf("a dry router registers no tool: %v", r.Tools())
	}
}

// onlyMaya is a RemoteCaller with the remote maya only: it refuses any other name, as the
// engine's remote pool does (code not_found).
type onlyMaya struct{}

func (onlyMaya) CallRemote(_ context.Context, dcc, tool string, _ map[string]any) (tools.Result, error) {
	if dcc != "maya" {
		return tools.Result{}, &run.Error{Code: run.CodeNotFound, Message: `unknown remote "` + dcc + `" (known remotes: maya)`,
			Details: map[string]any{"remote": dcc, "known": []string{"maya"}}}
	}
	return tools.Result{Output: tool}, nil
}

// TestRemoteNobodyHas: a required call of a remote that neither this engine nor, on a shared
// database, any other engine has is refused with code not_found as before; on a shared database
// the message says that no attached engine has it either and how to give it one. A call
// claimed from the queue, and one on an engine without a shared database, keep the
// RemoteCaller's own refusal.
func TestRemoteNobodyHas(t *testing.T) {
	t.Parallel()
	clk := clock.NewStub(t0)
	ctx := context.Background()
	r := tools.NewRouter(clk, onlyMaya{})
	r.SetRemoteNames([]string{"maya"})
	_, err := r.CallRemote(ctx, tools.Call{DCC: "nuke", Tool: "t"})
	if run.CodeOf(err) != run.CodeNotFound || err.Error() != `unknown remote "nuke" (known remotes: maya)` {
		t.Fatalf("one engine: %v", err)
	}
	r.SetQueue(tools.CallerFunc(func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{Output: "queued"}, nil
	}), func(string) bool { return false }, func(name string) bool { return name == "houdini" })
	_, err = r.CallRemote(ctx, tools.Call{DCC: "nuke", Tool: "t"})
	var re *run.Error
	if !errors.As(err, &re) || re.Code != run.CodeNotFound || re.Details["remote"] != "nuke" ||
		err.Error() != `neither this engine (remotes: maya) nor any engine attached to the database has remote "nuke" now; `+
			`add "nuke" to the remotes of an engine's config, or start a worker that has it: `+
			`dcc-flow worker --db <database URL> --remotes FILE` {
		t.Fatalf("shared database: %v", err)
	}
	if _, err := r.CallRemote(ctx, tools.Call{DCC: "nuke", Tool: "t", Queued: true}); err == nil ||
		!strings.HasPrefix(err.Error(), "unknown remote") {
		t.Fatalf("a claimed call: %v", err)
	}
	if res, err := r.CallRemote(ctx, tools.Call{DCC: "houdini", Tool: "t"}); err != nil || res.Output != "queued" {
		t.Fatalf("another engine's remote: %+v %v", res, err)
	}
	none := tools.NewRouter(clk, nil)
	none.SetRemoteNames(nil)
	none.SetQueue(tools.CallerFunc(func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{}, nil
	}), func(string) bool { return false }, func(string) bool { return false })
	_, err = none.CallRemote(ctx, tools.Call{DCC: "nuke", Tool: "t"})
	if !errors.Is(err, tools.ErrNoRemote) || !strings.Contains(err.Error(), `neither this engine (no remotes) nor any engine attached`) {
		t.Fatalf("no remote caller, shared database: %v", err)
	}
}
