package engine

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/internal/fakeprobe"
)

// wakeProbe moves clk by period once the probe loop sleeps (its timer the only one pending),
// and waits until the run it wakes has ended (ran).
func wakeProbe(t *testing.T, clk *clock.Stub, period time.Duration, ran <-chan string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := clk.WaitForTimers(ctx, 1); err != nil {
		t.Fatalf("the probe loop never slept: %v", err)
	}
	clk.Advance(period)
	select {
	case <-ran:
	case <-ctx.Done():
		t.Fatal("the probe did not run after its period")
	}
}

func TestMain(m *testing.M) {
	fakeprobe.Main() // the engine's probe tests start the test binary as a stand-in lmstat
	os.Exit(m.Run())
}

// An engine whose resource has a probe (a fake lmstat) runs it when it opens, on its clock, and
// Resources shows the probe's state and the effective limit; a probe that starts failing shows
// "failed" with the declared limit.
func TestResourceProbeShownInResources(t *testing.T) {
	ctx := context.Background()
	lmstat := fakeprobe.New(t) // the test binary as a stand-in lmstat (internal/fakeprobe)
	lmstat.Set("ok", 7)
	clk := clock.NewStub(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC))
	cfg := Config{Resources: map[string]ResourceConfig{"houdini": {Limit: 4, Probe: &ResourceProbe{Command: lmstat.Command("-f", "houdini"), Parser: "lmstat", EverySecs: 60}},
		"gpu": {Limit: 2}}}
	e, err := Open(ctx, cfg, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	ran := make(chan string, 4)
	e.resGate.Prober().SetChecked(func(r string) { ran <- r })
	probe := func() *ResourceProbeInfo {
		t.Helper()
		info, err := e.Resources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range info.Resources {
			if r.Name == "gpu" && r.Probe != nil {
				t.Fatalf("gpu has no probe: %+v", r.Probe)
			}
			if r.Name == "houdini" {
				return r.Probe
			}
		}
		t.Fatal("no houdini")
		return nil
	}
	// Open ran the probe once before it returned.
	p := probe()
	if p.State != "ok" || p.Free == nil || *p.Free != 3 || p.EffectiveLimit != 3 || p.EverySecs != 60 {
		t.Fatalf("probe: %+v", p)
	}
	b, _ := json.Marshal(p)
	if !strings.Contains(string(b), `"state":"ok","free":3,"effective_limit":3`) {
		t.Fatalf("json: %s", b)
	}
	lmstat.Set("fail", 0) // "lmgrd is not running" on stderr, exit status 1
	// Wake the loop from its 60 s sleep, once it sleeps (its timer is the only one of this
	// engine's clock), and only once: while the probe runs, a move of the clock past its
	// timeout would kill it.
	wakeProbe(t, clk, 60*time.Second, ran)
	p = probe()
	if p.State != "failed" || p.EffectiveLimit != 4 || p.Free != nil || !strings.Contains(p.Error, "lmgrd is not running") {
		t.Fatalf("failed probe: %+v", p)
	}
}

// A bad probe config is refused when the engine opens, each problem naming its field and fix.
func TestResourceProbeConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		probe ResourceProbe
		want  []string
	}{
		{ResourceProbe{Parser: "lmstat"}, []string{"resources.houdini.probe.command: must be the probe's command as a list of arguments"}},
		{ResourceProbe{Command: []string{""}, Parser: "lmstat"}, []string{"resources.houdini.probe.command[0]: must name the program"}},
		{ResourceProbe{Command: []string{"lmutil"}}, []string{"resources.houdini.probe.parser: must say how to read"}},
		{ResourceProbe{Command: []string{"lmutil"}, Parser: "flexlm"}, []string{`resources.houdini.probe.parser: must be "lmstat" or "regex"; got "flexlm"`}},
		{ResourceProbe{Command: []string{"lmutil"}, Parser: "regex"}, []string{"resources.houdini.probe.regex: must be a regular expression with one capture group"}},
		{ResourceProbe{Command: []string{"lmutil"}, Parser: "regex", Regex: `free=\d+`}, []string{"resources.houdini.probe.regex: must have exactly one capture group", "it has 0"}},
		{ResourceProbe{Command: []string{"lmutil"}, Parser: "regex", Regex: `free=(\d+`}, []string{"resources.houdini.probe.regex: does not compile"}},
		{ResourceProbe{Command: []string{"lmutil"}, Parser: "lmstat", Regex: `(x)`}, []string{`resources.houdini.probe.regex: is only read with parser "regex"`}},
		{ResourceProbe{Command: []string{"lmutil"}, Parser: "regex", Regex: `(\d+)`, Feature: "houdini"}, []string{`resources.houdini.probe.feature: is only read with parser "lmstat"`}},
		{ResourceProbe{Command: []string{"lmutil"}, Parser: "lmstat", EverySecs: -1}, []string{"resources.houdini.probe.every_secs: must be 0 (the default, 30) or 1 to 86400", "got -1"}},
		{ResourceProbe{Command: []string{"lmutil"}, Parser: "lmstat", TimeoutSecs: 601}, []string{"resources.houdini.probe.timeout_secs: must be 0", "got 601"}},
		{ResourceProbe{Command: []string{"lmutil"}, Parser: "lmstat", EverySecs: 5, TimeoutSecs: 10}, []string{"resources.houdini.probe.timeout_secs: is 10 but the probe runs every 5 s: make timeout_secs at most every_secs"}},
		{ResourceProbe{Command: []string{"lmutil"}, Parser: "lmstat", Feature: "a b"}, []string{"resources.houdini.probe.feature: must be the feature name"}},
	} {
		p := tc.probe
		_, err := Open(context.Background(), Config{Resources: map[string]ResourceConfig{"houdini": {Limit: 4, Probe: &p}}})
		re, ok := err.(*run.Error)
		if !ok || re.Code != run.CodeInvalidRequest {
			t.Fatalf("%+v: got %v, want invalid_request", tc.probe, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(re.Message, w) {
				t.Errorf("%+v: %q lacks %q", tc.probe, re.Message, w)
			}
		}
	}
	good := ResourceProbe{Command: []string{"lmutil", "lmstat", "-f", "houdini"}, Parser: "regex", Regex: `(?:free)=(\d+)`, EverySecs: 5}
	if err := (Config{Resources: map[string]ResourceConfig{"houdini": {Limit: 4, Probe: &good}}}).WithDefaults().validate(); err != nil {
		t.Fatalf("good probe refused: %v", err)
	}
}

// A step asking for a licence waits (it is not refused) while the licence server says none is
// free, though the declared limit is 4, and runs once the next probe run finds one free.
func TestStepWaitsForTheProbesFreeCount(t *testing.T) {
	ctx := context.Background()
	lmstat := fakeprobe.New(t)
	lmstat.Set("ok", 10)
	clk := clock.NewStub(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC))
	cfg := Config{StallAfterSecs: -1, Resources: map[string]ResourceConfig{"houdini": {Limit: 4,
		Probe: &ResourceProbe{Command: lmstat.Command(), Parser: "lmstat", EverySecs: 30}}}}
	e, err := Open(ctx, cfg, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	ran := make(chan string, 4)
	e.resGate.Prober().SetChecked(func(r string) { ran <- r })
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "cook", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	s, err := spec.ParseString("name: sim\nsteps: [{id: cook, tool: cook, resources: {houdini: 1}}]")
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Submit(ctx, StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	waiting := func() bool {
		info, err := e.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		p := info.Steps
		return len(p) == 1 && p[0].Progress != nil && strings.HasPrefix(p[0].Progress.Message, "waiting for houdini ×1: 1st of 1")
	}
	for deadline := time.Now().Add(10 * time.Second); !waiting(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the step does not wait while no licence is free")
		}
	}
	pull := func() []flowtype.PendingCall {
		cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 5, Timeout: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	if cs := pull(); len(cs) != 0 {
		t.Fatalf("a call while no licence is free: %+v", cs)
	}
	lmstat.Set("ok", 9)
	wakeProbe(t, clk, 30*time.Second, ran) // the next probe run, on the engine's clock
	var cs []flowtype.PendingCall
	for deadline := time.Now().Add(10 * time.Second); len(cs) == 0; cs = pull() {
		if time.Now().After(deadline) {
			t.Fatal("no call once a licence is free")
		}
	}
	if err := e.Host().Complete(cs[0].ID, flowtype.ToolResult{Output: 1}); err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v, %v", info, err)
	}
}
