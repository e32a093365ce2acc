package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeSends records the notifications of subscriptions on a stub clock; fail, when set, decides
// the error of each send.
type fakeSends struct {
	mu   sync.Mutex
	clk  *clock.Stub
	at   []time.Duration // since t0
	fail func(n int) error
	n    int
}

func (f *fakeSends) send(_, method string, params map[string]any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.fail != nil {
		if err := f.fail(f.n); err != nil {
			return err
		}
	}
	f.at = append(f.at, f.clk.Now().Sub(t0))
	return nil
}

func (f *fakeSends) times() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.at...)
}

// setupSubs returns subscriptions on a stub clock whose session "s1" watches run "r1".
func setupSubs(t *testing.T, interval time.Duration) (*subscriptions, *clock.Stub, *fakeSends) {
	t.Helper()
	e, err := engine.Open(context.Background(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	clk := clock.NewStub(t0)
	f := &fakeSends{clk: clk}
	s := newSubscriptions(e)
	s.clock, s.interval, s.send = clk, interval, f.send
	s.openSession("s1")
	s.add(context.Background(), "s1", runURIPrefix+"r1")
	t.Cleanup(func() { s.dropSession("s1") })
	return s, clk, f
}

// events feeds events of run r1 at the given offsets from t0 (in order), then fires every
// pending timer.
func events(s *subscriptions, clk *clock.Stub, at ...time.Duration) {
	for i, d := range at {
		clk.Set(t0.Add(d))
		s.event(context.Background(), run.Event{Seq: uint64(i + 1), RunID: "r1"})
	}
	for clk.AdvanceToNext() {
	}
}

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestCoalescing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		interval time.Duration
		events   []time.Duration
		want     []time.Duration
	}{
		{"one event: sent at once", 100 * time.Millisecond, ms(0), ms(0)},
		{"a burst: the first at once, the rest one interval later", 100 * time.Millisecond, ms(0, 1, 2, 50, 99), ms(0, 100)},
		{"spaced events: each at once", 100 * time.Millisecond, ms(0, 100, 250), ms(0, 100, 250)},
		{"an event just inside the window waits for it", 100 * time.Millisecond, ms(0, 150, 160), ms(0, 150, 250)},
		{"a long burst: one per interval and one after the last event", 100 * time.Millisecond,
			ms(0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200, 210), ms(0, 100, 200, 300)},
		{"no interval: one per event", 0, ms(0, 0, 1), ms(0, 0, 1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, clk, f := setupSubs(t, tc.interval)
			events(s, clk, tc.events...)
			got := f.times()
			if len(got) != len(tc.want) {
				t.Fatalf("sent at %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("sent at %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestCoalescingBurst: 600 events over a second give about ten notifications, the last one after
// the last event.
func TestCoalescingBurst(t *testing.T) {
	t.Parallel()
	s, clk, f := setupSubs(t, 100*time.Millisecond)
	var at []time.Duration
	for i := 0; i < 600; i++ {
		at = append(at, time.Duration(i)*time.Second/600)
	}
	events(s, clk, at...)
	got := f.times()
	if len(got) > 11 || got[len(got)-1] < at[len(at)-1] {
		t.Fatalf("sent at %v for 600 events up to %v", got, at[len(at)-1])
	}
}

func TestBlockedSendIsRetried(t *testing.T) {
	t.Parallel()
	s, clk, f := setupSubs(t, 100*time.Millisecond)
	f.fail = func(n int) error {
		if n <= 2 {
			return server.ErrNotificationChannelBlocked
		}
		return nil
	}
	events(s, clk, 0)
	if got := f.times(); len(got) != 1 || got[0] != 200*time.Millisecond {
		t.Fatalf("sent at %v; want one send at 200ms (two retries)", got)
	}

	// A session that never reads: given up after maxSendRetries.
	s2, clk2, f2 := setupSubs(t, 100*time.Millisecond)
	f2.fail = func(int) error { return server.ErrNotificationChannelBlocked }
	events(s2, clk2, 0)
	if f2.n != 1+maxSendRetries || clk2.Pending() != 0 {
		t.Fatalf("%d attempts, %d timers pending", f2.n, clk2.Pending())
	}
	// A session that is gone: nothing is retried.
	s3, clk3, f3 := setupSubs(t, 100*time.Millisecond)
	f3.fail = func(int) error { return server.ErrSessionNotFound }
	events(s3, clk3, 0)
	if f3.n != 1 || clk3.Pending() != 0 {
		t.Fatalf("%d attempts, %d timers pending", f3.n, clk3.Pending())
	}
}

func TestRemoveStopsPendingNotification(t *testing.T) {
	t.Parallel()
	s, clk, f := setupSubs(t, 100*time.Millisecond)
	s.event(context.Background(), run.Event{Seq: 1, RunID: "r1"})
	clk.Set(t0.Add(10 * time.Millisecond))
	s.event(context.Background(), run.Event{Seq: 2, RunID: "r1"}) // due at 100ms
	if clk.Pending() != 1 {
		t.Fatalf("%d timers pending", clk.Pending())
	}
	s.remove("s1", runURIPrefix+"r1")
	if clk.Pending() != 0 {
		t.Fatalf("%d timers pending after remove", clk.Pending())
	}
	clk.Advance(time.Second)
	if got := f.times(); len(got) != 1 {
		t.Fatalf("sent at %v", got)
	}
	sessions, watches, reading, done := s.stats()
	if sessions != 0 || watches != 0 || reading || len(s.runs) != 0 {
		t.Fatalf("%d sessions, %d watches, %d runs, reading %v", sessions, watches, len(s.runs), reading)
	}
	<-done
	// Events of runs nobody watches cost nothing.
	s.event(context.Background(), run.Event{Seq: 3, RunID: "r1"})
	if got := f.times(); len(got) != 1 {
		t.Fatalf("sent at %v", got)
	}
}

// TestSubscribeTerminalRun: a subscription to a run that has ended is followed by one
// notification; subscribing again within the interval gets one more, an interval later.
func TestSubscribeTerminalRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk, f := setupSubs(t, 100*time.Millisecond)
	id, err := s.e.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, `steps: [{id: a, tool: flow__echo, args: {value: 1}}]`)})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.e.Wait(ctx, id, 10*time.Second); err != nil || !info.Terminal {
		t.Fatalf("%v %+v", err, info)
	}
	s.openSession("s2")
	s.add(ctx, "s2", runURIPrefix+id)
	if got := f.times(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("sent at %v; want one notification at once", got)
	}
	clk.Advance(10 * time.Millisecond)
	s.add(ctx, "s2", runURIPrefix+id)
	for clk.AdvanceToNext() {
	}
	if got := f.times(); len(got) != 2 || got[1] != 100*time.Millisecond {
		t.Fatalf("sent at %v; want a second one at 100ms", got)
	}
	if _, watches, _, _ := s.stats(); watches != 2 { // s1's and s2's
		t.Fatalf("%d watches", watches)
	}
	s.dropSession("s2")
}

// TestAddNeedsLiveSession: a subscribe answered for a session that is not (or no longer)
// registered leaves nothing behind.
func TestAddNeedsLiveSession(t *testing.T) {
	t.Parallel()
	s, _, _ := setupSubs(t, 100*time.Millisecond)
	s.add(context.Background(), "never-registered", runURIPrefix+"r1")
	s.openSession("s2")
	s.dropSession("s2")
	s.add(context.Background(), "s2", runURIPrefix+"r1") // raced with the session's end
	if sessions, watches, _, _ := s.stats(); sessions != 1 || watches != 1 {
		t.Fatalf("%d sessions, %d watches; want only s1's", sessions, watches)
	}
}

type fakeSession struct{ id string }

func (*fakeSession) Initialize()                                         {}
func (*fakeSession) Initialized() bool                                   { return true }
func (*fakeSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return nil }
func (f *fakeSession) SessionID() string                                 { return f.id }

func TestCheck(t *testing.T) {
	t.Parallel()
	s, _, _ := setupSubs(t, 100*time.Millisecond) // session s1 is open
	id, err := s.e.Submit(context.Background(), engine.StartRequest{Spec: mustSpec(t, `steps: [{id: a, tool: flow__echo, args: {value: 1}}]`)})
	if err != nil {
		t.Fatal(err)
	}
	in := func(session string) context.Context {
		return server.NewMCPServer("t", "1").WithContext(context.Background(), &fakeSession{session})
	}
	sub := func(uri string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"` + uri + `"}}`
	}
	cases := []struct {
		name string
		ctx  context.Context
		msg  string
		want string // "" = accepted
	}{
		{"a run", in("s1"), sub(runURIPrefix + id), ""},
		{"a run, no session", context.Background(), sub(runURIPrefix + id), ""},
		{"no uri: left to mcp-go", in("s1"), `{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{}}`, ""},
		{"not about subscriptions", in("s1"), `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, ""},
		{"an unknown run", in("s1"), sub(runURIPrefix + "nope"), "resource not found: dccflow://runs/nope (no run nope)"},
		{"no run id", in("s1"), sub(runURIPrefix), "resource not found: dccflow://runs/ (subscribable resources are runs, dccflow://runs/{workflow_id})"},
		{"a sub-path", in("s1"), sub(runURIPrefix + id + "/steps"), "resource not found: dccflow://runs/" + id + "/steps"},
		{"the catalog", in("s1"), sub(catalogURI), "resource dccflow://catalog cannot be subscribed to"},
		{"a session that is not open", in("gone"), sub(runURIPrefix + id), `session "gone" is not open`},
		{"subscriptions/listen with resources", in("s1"),
			`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["dccflow://catalog"]}}}`,
			"resource subscriptions through subscriptions/listen are not supported"},
		{"subscriptions/listen without resources", in("s1"),
			`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}`, ""},
	}
	for _, tc := range cases {
		err := s.check(tc.ctx, 1, json.RawMessage(tc.msg))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
	}
}

func mustSpec(t *testing.T, text string) *spec.Spec {
	t.Helper()
	sp, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}
