package resources

import (
	"context"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/internal/fakeprobe"
)

const lmstatFixture = `lmutil - Copyright (c) 1989-2023 Flexera. All Rights Reserved.
Flexible License Manager status on Sun 11/29/2026 10:44

Users of features served by sesinetd:
Users of houdini:  (Total of 10 licenses issued;  Total of 7 licenses in use)

  "houdini" v20.0, vendor: sesinetd, expiry: permanent(no expiration date)
  floating license

    artist1 ws01 ws01 (v20.0) (licsrv/27000 101), start Sun 11/29 9:01
Users of nuke_r:  (Total of 4 licenses issued;  Total of 4 licenses in use)
Users of hqueue:  (Error: 1 licenses, unsupported by licensed server)
`

func TestLmstatParser(t *testing.T) {
	for _, tc := range []struct {
		feature, out string
		free         int
		err          string
	}{
		{"houdini", lmstatFixture, 3, ""},
		{"nuke_r", lmstatFixture, 0, ""},
		{"houdini", "Users of houdini:  (Total of 1 license issued;  Total of 0 licenses in use)\n", 1, ""},
		{"houdini", "Users of houdini: (Total of 2 licenses issued; Total of 5 licenses in use)\n", 0, ""}, // over-used: 0 free
		{"houdini", "Users of houdini: (Total of 2 licenses issued; Total of 1 licenses in use)\nUsers of houdini: (Total of 3 licenses issued; Total of 0 licenses in use)\n", 4, ""},
		{"hqueue", lmstatFixture, 0, "not its totals"},
		{"maya", lmstatFixture, 0, "no line \"Users of maya:"},
		{"houdini", "lmgrd is not running: License server machine is down\n", 0, "check the feature name"},
		{"houdini", "Users of houdini: (Total of 99999999999999999999 licenses issued; Total of 0 licenses in use)\n", 0, "out of range"},
		{"houdini", "\x00\xff garbage", 0, "no line"},
	} {
		free, err := LmstatParser(tc.feature)([]byte(tc.out))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s in %q: err %v, want one containing %q", tc.feature, tc.out, err, tc.err)
			}
			continue
		}
		if err != nil || free != tc.free {
			t.Errorf("%s in %q: %d, %v; want %d", tc.feature, tc.out, free, err, tc.free)
		}
	}
}

func TestRegexParser(t *testing.T) {
	p := RegexParser(regexp.MustCompile(`free=(\d+)`))
	if n, err := p([]byte("gpus: total=4 free=3\n")); err != nil || n != 3 {
		t.Fatalf("got %d, %v; want 3", n, err)
	}
	if _, err := p([]byte("total=4\n")); err == nil || !strings.Contains(err.Error(), "matches nothing") {
		t.Fatalf("no match: %v", err)
	}
	p = RegexParser(regexp.MustCompile(`free=(\S+)`))
	if _, err := p([]byte("free=lots")); err == nil || !strings.Contains(err.Error(), "not a whole number") {
		t.Fatalf("not a number: %v", err)
	}
}

// fakeLmstat is a stand-in lmstat (internal/fakeprobe: the test binary itself, on every OS)
// that behaves as set says: "ok" prints houdini's line with used licences in use, "fail" exits
// 1, "hang" sleeps, "garbage" prints junk.
func fakeLmstat(t *testing.T) (argv []string, set func(mode string, used int)) {
	t.Helper()
	f := fakeprobe.New(t)
	return f.Command("lmstat", "-f", "houdini"), f.Set
}

func TestMain(m *testing.M) {
	fakeprobe.Main()
	os.Exit(m.Run())
}

type changes struct {
	mu   sync.Mutex
	msgs []string
}

func (c *changes) add(_ string, _ ProbeStatus, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, msg)
}

func (c *changes) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.msgs...)
}

func newProbeFixture(t *testing.T) (*clock.Stub, *Scheduler, *Prober, func(string, int), *changes) {
	t.Helper()
	clk := clock.NewStub(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	s := New(clk, map[string]int{"houdini": 4}, Options{})
	argv, set := fakeLmstat(t)
	ch := &changes{}
	p := NewProber(s, []ProbeSpec{{Resource: "houdini", Declared: 4, Command: argv, Every: 30 * time.Second, Timeout: 5 * time.Second,
		Parse: LmstatParser("houdini")}}, nil, ch.add)
	return clk, s, p, set, ch
}

func limitOf(s *Scheduler, name string) int {
	for _, r := range s.Snapshot().Resources {
		if r.Name == name {
			return r.Limit
		}
	}
	return -1
}

// TestProbeLowersTheLimitAndFallsBack: the free count lowers the limit (never above the
// declared one, adding back the units this engine holds); a probe that fails, prints garbage
// or hangs (killed at its timeout) brings the declared limit back, warning once per change.
func TestProbeLowersTheLimitAndFallsBack(t *testing.T) {
	ctx := context.Background()
	clk, s, p, set, ch := newProbeFixture(t)
	if st, _ := p.Status("houdini"); st.State != ProbePending || st.Effective != 4 {
		t.Fatalf("before a run: %+v", st)
	}
	set("ok", 8) // 2 free of 10
	if st := p.Check(ctx, "houdini"); st.State != ProbeOK || st.Free != 2 || st.Effective != 2 || limitOf(s, "houdini") != 2 {
		t.Fatalf("2 free: %+v, limit %d", st, limitOf(s, "houdini"))
	}
	set("ok", 0) // 10 free: capped by the declared 4
	if st := p.Check(ctx, "houdini"); st.Effective != 4 {
		t.Fatalf("10 free: %+v", st)
	}
	// This engine holds 1 unit, which the licence server counts in use: 9 in use = 1 free,
	// and the limit is that free one plus the one held.
	g, err := s.Acquire(ctx, Request{Amounts: map[string]int{"houdini": 1}})
	if err != nil {
		t.Fatal(err)
	}
	set("ok", 9)
	if st := p.Check(ctx, "houdini"); st.Effective != 2 {
		t.Fatalf("1 free, 1 held here: %+v", st)
	}
	g.Release()
	if len(ch.list()) != 0 {
		t.Fatalf("warnings while it worked: %q", ch.list())
	}

	set("fail", 0)
	st := p.Check(ctx, "houdini")
	if st.State != ProbeFailed || st.Effective != 4 || limitOf(s, "houdini") != 4 || !strings.Contains(st.Error, "lmgrd is not running") {
		t.Fatalf("failing: %+v", st)
	}
	p.Check(ctx, "houdini") // failing again the same way: no second warning
	if msgs := ch.list(); len(msgs) != 1 || !strings.Contains(msgs[0], "using the declared limit 4") {
		t.Fatalf("warnings: %q", msgs)
	}

	set("garbage", 0)
	if st := p.Check(ctx, "houdini"); st.State != ProbeFailed || !strings.Contains(st.Error, "output not understood") {
		t.Fatalf("garbage: %+v", st)
	}
	if msgs := ch.list(); len(msgs) != 2 {
		t.Fatalf("a new kind of failure warns again: %q", msgs)
	}

	set("ok", 9)
	if st := p.Check(ctx, "houdini"); st.State != ProbeOK || st.Effective != 1 {
		t.Fatalf("recovered: %+v", st)
	}
	if msgs := ch.list(); len(msgs) != 3 || !strings.Contains(msgs[2], "works again") {
		t.Fatalf("recovery notice: %q", msgs)
	}

	// A hanging probe is killed at its timeout (on the stub clock) and the declared limit holds.
	set("hang", 0)
	done := make(chan ProbeStatus)
	go func() { done <- p.Check(ctx, "houdini") }()
	if err := clk.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	select {
	case st := <-done:
		if st.State != ProbeFailed || !strings.Contains(st.Error, "timed out after 5s") || limitOf(s, "houdini") != 4 {
			t.Fatalf("hang: %+v", st)
		}
	case <-time.After(20 * time.Second): // a bound, not an assertion of timing
		t.Fatal("the hanging probe was not killed")
	}
}

// TestProbeLoopRunsOnTheEngineClock: started, the prober runs at once and then every period of
// the (stub) clock; a lowered limit makes a waiter wait, and a raised one lets it through.
func TestProbeLoopRunsOnTheEngineClock(t *testing.T) {
	ctx := context.Background()
	clk, s, p, set, _ := newProbeFixture(t)
	set("ok", 10) // none free
	ran := make(chan string, 4)
	p.checked = func(r string) { ran <- r }
	if err := p.Start(ctx); err != nil { // the first run, before Start returns
		t.Fatal(err)
	}
	defer p.Stop()
	<-ran
	if st, _ := p.Status("houdini"); st.State != ProbeOK || st.Effective != 0 {
		t.Fatalf("first run: %+v", st)
	}
	got := make(chan error, 1)
	go func() {
		g, err := s.Acquire(ctx, Request{Amounts: map[string]int{"houdini": 1}})
		if err == nil {
			g.Release()
		}
		got <- err
	}()
	select {
	case <-got:
		t.Fatal("granted with no licence free")
	default:
	}
	set("ok", 7)
	if err := clk.WaitForTimers(ctx, 1); err != nil { // the loop asleep until the next period
		t.Fatal(err)
	}
	clk.Advance(30 * time.Second)
	<-ran
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if st, _ := p.Status("houdini"); st.Effective != 3 {
		t.Fatalf("second run: %+v", st)
	}
}

// A hostile probe printing without end is cut at MaxProbeOutput (the process killed at its
// timeout or left to finish; nothing past the cap is kept) and counts as a failed run.
func TestRedteamProbeHugeOutputIsBounded(t *testing.T) {
	f := fakeprobe.New(t)
	f.Set("flood", 0) // about 8 MiB of lmstat lines
	out, err := RunProbeCommand(context.Background(), f.Command())
	if err == nil || !strings.Contains(err.Error(), "printed more than 1048576 bytes") || out != nil {
		t.Fatalf("got %d bytes, %v", len(out), err)
	}
	var c capped
	c.max = 10
	if n, _ := c.Write(make([]byte, 100)); n != 100 || c.Len() != 10 {
		t.Fatalf("capped kept %d of a write reported as %d", c.Len(), n)
	}
}
