package gotest

import (
	"context"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func TestPoolConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := engine.Open(context.Background(), engine.Config{Remotes: map[string]engine.RemoteConfig{
		"maya": {Command: []string{"mayapy"}, Workers: 300, RecycleAfterCalls: -1, MaxRSSMB: 2 << 20,
			StartTimeoutSecs: 0.01, IdleStopSecs: -3, KillAfterSecs: 1e9},
		"web": {URL: "http://127.0.0.1:9/mcp", Workers: 2},
	}})
	re := asRunError(err)
	if re == nil || re.Code != run.CodeInvalidRequest {
		t.Fatalf("err %v", err)
	}
	mustContain(t, "message", re.Message,
		"remotes.maya.workers: must be 0 or 1 to 256; got 300", "remotes.maya.recycle_after_calls:",
		"remotes.maya.max_rss_mb:", "remotes.maya.start_timeout_secs: must be 0 (30 s) or 0.1 to 604800 seconds",
		"remotes.maya.idle_stop_secs:", "remotes.maya.kill_after_secs:", "remotes.web.workers: pool fields")
}

// A foreach over a 2-worker pool: each step record names the worker that ran it, the pool
// lists both workers, and a crashed worker's attempt fails worker_lost and is retried.
func TestPoolThroughTheEngine(t *testing.T) {
	t.Parallel()
	bin := mcpServer(t)
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Remotes: map[string]engine.RemoteConfig{
		"maya": {Command: []string{bin}, Workers: 2, KillAfterSecs: 5},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	s, err := spec.ParseString(`
name: pooled
steps:
  - id: each
    kind: foreach
    items: [1, 2, 3, 4]
    concurrency: 4
    steps:
      - {id: nap, kind: tool_remote, dcc: maya, tool: sleep, args: {ms: 200}}
  - id: boom
    kind: tool_remote
    dcc: maya
    tool: crash
    retry: {max_attempts: 2, initial_delay_ms: 1, max_delay_ms: 2}
`)
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.Run(ctx, engine.StartRequest{Spec: s})
	if err != nil || info.Status != run.StatusFailed {
		t.Fatalf("%v %+v", err, info)
	}
	steps, err := e.Steps(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	workers := map[string]bool{}
	for _, st := range steps {
		switch {
		case st.StepID == "nap":
			if !strings.HasPrefix(st.Worker, "maya/") {
				t.Errorf("step %s: worker %q", st.Key, st.Worker)
			}
			workers[st.Worker] = true
		case st.Key == "boom":
			if st.Attempts != 2 || st.Error == nil || st.Error.Kind != run.KindWorkerLost || !strings.Contains(st.Error.Message, "was lost during the call") {
				t.Errorf("boom: %+v %+v", st, st.Error)
			}
		}
	}
	if len(workers) != 2 {
		t.Errorf("the 4 items ran on %v, want 2 workers", workers)
	}
	pools := e.Pools()
	if len(pools) != 1 || pools[0].Name != "maya" || pools[0].Workers != 2 || pools[0].Lost != 2 {
		t.Fatalf("Pools() = %+v", pools)
	}
}

// Routing: a tool step runs on a pool named by its `pool:` or by tool_pools, and in-process
// where the engine has no such pool, so one spec serves tests and production.
func TestToolStepsRoutedToPools(t *testing.T) {
	t.Parallel()
	bin := mcpServer(t)
	const text = `
name: routed
steps:
  - {id: by_map, tool: echo, args: {x: 1}}
  - {id: by_field, tool: flow__echo, pool: maya, args: {x: 2}}
  - {id: local, tool: flow__echo, args: {x: 3}}
`
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Canonical(); !strings.Contains(string(c), `"pool":"maya"`) {
		t.Fatalf("the canonical form lacks the pool: %s", c)
	}
	ctx := context.Background()
	prod, err := engine.Open(ctx, engine.Config{
		Remotes:   map[string]engine.RemoteConfig{"maya": {Command: []string{bin}, Workers: 2}},
		ToolPools: map[string]string{"ec*": "maya", "e*": "maya"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(ctx)
	info, err := prod.Run(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	workers := map[string]string{}
	for _, st := range info.Steps {
		workers[st.Key] = st.Worker
	}
	// flow__echo is not served by the MCP server: routed there, it fails not_found.
	if info.Status != run.StatusFailed || !strings.HasPrefix(workers["by_map"], "maya/") || !strings.HasPrefix(workers["by_field"], "maya/") {
		t.Fatalf("prod run: %s %+v %v", info.Status, info.Error, workers)
	}
	if info.Error == nil || info.Error.StepKey != "by_field" || info.Error.Kind != run.KindNotFound {
		t.Fatalf("prod run error: %+v", info.Error)
	}

	// The same spec on an engine without the pool: everything in-process (echo is unknown here,
	// so that step is left out).
	local, err := engine.Open(ctx, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close(ctx)
	s2, _ := spec.ParseString(strings.Replace(text, "  - {id: by_map, tool: echo, args: {x: 1}}\n", "", 1))
	info, err = local.Run(ctx, engine.StartRequest{Spec: s2})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("local run: %v %+v", err, info)
	}
	for _, st := range info.Steps {
		if st.Worker != "" {
			t.Errorf("step %s ran on %q in-process", st.Key, st.Worker)
		}
	}

	_, err = engine.Open(ctx, engine.Config{ToolPools: map[string]string{"[": "maya", "x*": "houdini"}})
	re := asRunError(err)
	if re == nil {
		t.Fatalf("bad tool_pools: %v", err)
	}
	mustContain(t, "message", re.Message, `tool_pools["["]: "[" is not a valid pattern`, `tool_pools["x*"]: remote "houdini" is not configured`)
	bad, err := spec.ParseString("steps: [{id: a, tool: t, pool: 'no pe'}]")
	if err == nil {
		err = bad.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "not a valid remote name") {
		t.Errorf("bad pool name: %v", err)
	}
	if _, err := spec.ParseString("steps: [{id: a, dcc: maya, tool: t, pool: maya}]"); err == nil || !strings.Contains(err.Error(), `unknown field "pool"`) {
		t.Errorf("pool on tool_remote: %v", err)
	}
}

// tool_pools naming a remote the engine lacks is a config error on a database of its own (no
// other engine can have it); on a shared PostgreSQL database it is checked at submit instead
// (TestQueuePoolStepsRunOnTheEngineThatHasThePool).
func TestToolPoolsNamingAMissingRemote(t *testing.T) {
	t.Parallel()
	_, err := engine.Open(context.Background(), engine.Config{DB: t.TempDir() + "/runs.db", ToolPools: map[string]string{"maya__*": "maya"}})
	re := asRunError(err)
	if re == nil || re.Code != run.CodeInvalidRequest {
		t.Fatalf("err %v", err)
	}
	mustContain(t, "message", re.Message, `tool_pools["maya__*"]: remote "maya" is not configured in remotes`)
}
