package startstop

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
)

type svc struct {
	Base
	name string
	log  *[]string
	mu   *sync.Mutex
	err  error
}

func (s *svc) Start(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	s.Go(ctx, func(ctx context.Context) { <-ctx.Done() })
	s.mu.Lock()
	*s.log = append(*s.log, "start "+s.name)
	s.mu.Unlock()
	return nil
}

func (s *svc) Stop() {
	if !s.Running() {
		return
	}
	s.Base.Stop()
	s.mu.Lock()
	*s.log = append(*s.log, "stop "+s.name)
	s.mu.Unlock()
}

func TestGroupStopsInReverse(t *testing.T) {
	var log []string
	var mu sync.Mutex
	a, b, c := &svc{name: "a", log: &log, mu: &mu}, &svc{name: "b", log: &log, mu: &mu}, &svc{name: "c", log: &log, mu: &mu}
	var g Group
	if err := g.Start(context.Background(), a, b); err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	g.Stop()
	g.Stop() // twice: nothing more
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Fatalf("log %v; want %v", log, want)
	}
	if a.Running() || b.Running() || c.Running() {
		t.Fatal("a service still runs after Stop")
	}
}

func TestGroupStartFailureStopsWhatItStarted(t *testing.T) {
	var log []string
	var mu sync.Mutex
	boom := errors.New("boom")
	a, b := &svc{name: "a", log: &log, mu: &mu}, &svc{name: "b", log: &log, mu: &mu, err: boom}
	var g Group
	if err := g.Start(context.Background(), a, b); !errors.Is(err, boom) {
		t.Fatalf("Start: %v; want boom", err)
	}
	if want := []string{"start a", "stop a"}; !slices.Equal(log, want) {
		t.Fatalf("log %v; want %v", log, want)
	}
	g.Stop() // nothing was added
	if len(log) != 2 {
		t.Fatalf("log %v after Stop of an empty group", log)
	}
}

// The loop outlives the context of its start (an Open's ctx ends when Open returns), and a
// Base starts again after Stop.
func TestBaseOutlivesStartContextAndRestarts(t *testing.T) {
	var b Base
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	if !b.Go(ctx, func(lctx context.Context) { <-lctx.Done(); close(ended) }) {
		t.Fatal("Go refused the first start")
	}
	if b.Go(ctx, func(context.Context) {}) {
		t.Fatal("Go started a second loop while the first runs")
	}
	cancel()
	select {
	case <-ended:
		t.Fatal("the loop ended with its start's context")
	default:
	}
	b.Stop()
	<-ended
	if b.Running() {
		t.Fatal("Running after Stop")
	}
	b.Stop() // twice
	ran := make(chan struct{})
	if !b.Go(context.Background(), func(context.Context) { close(ran) }) {
		t.Fatal("Go refused a start after Stop")
	}
	<-ran
	b.Stop()
}

func TestBaseStopBeforeGo(t *testing.T) {
	var b Base
	b.Stop()
	if b.Running() {
		t.Fatal("Running without Go")
	}
}

// A Periodic calls at once, then every period on its clock; Delay skips the call at Start.
func TestPeriodicOnTheClock(t *testing.T) {
	for _, delay := range []bool{false, true} {
		clk := clock.NewStub(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
		calls := make(chan time.Time, 10)
		p := &Periodic{Clock: clk, Period: time.Minute, Delay: delay, Fn: func(context.Context) { calls <- clk.Now() }}
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := 3
		if delay {
			want = 2
		}
		for i := 0; i < 2; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := clk.WaitForTimers(ctx, 1); err != nil {
				t.Fatal(err)
			}
			cancel()
			clk.Advance(time.Minute)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = clk.WaitForTimers(ctx, 1)
		cancel()
		p.Stop()
		if len(calls) != want {
			t.Fatalf("delay %v: %d calls over two periods; want %d", delay, len(calls), want)
		}
		if p.Running() {
			t.Fatal("Running after Stop")
		}
	}
}
