package engine

import (
	"context"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/remote"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// poolCaller makes tool_remote calls through the MCP client pool of Config.Remotes.
type poolCaller struct{ p *remote.Pool }

func (c poolCaller) CallRemote(ctx context.Context, dcc, tool string, args map[string]any) (tools.Result, error) {
	if rep := tools.ReporterFrom(ctx); rep != nil {
		ctx = remote.WithReport(ctx, func(p *run.StepProgress, logs []run.LogLine, dropped int) {
			rep.Report(tools.Report{Progress: p, Logs: logs, Dropped: dropped})
		})
	}
	r, err := c.p.Call(ctx, dcc, tool, args)
	if err != nil {
		return tools.Result{}, err
	}
	res := tools.Result{Output: r.Output, Worker: r.Worker.String(), Logs: r.Logs, LogsDropped: r.LogsDropped,
		Files: r.Files, Env: r.Env}
	if r.IsError {
		res.Output, res.Error = nil, &tools.ToolError{Kind: r.Kind, Message: r.Message, Trace: r.Trace}
	}
	return res, nil
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// newRemotePool builds the MCP client pool of the configured remotes (connections are made on
// first use); their tokens and stdio children's environments come from environ, and the
// resources a pool's workers hold from units.
func newRemotePool(remotes map[string]RemoteConfig, environ func() []string, units remote.UnitsFunc) (*remote.Pool, error) {
	cfgs := make(map[string]remote.Config, len(remotes))
	for name, r := range remotes {
		cfgs[name] = remote.Config{URL: r.URL, URLs: r.URLs, WorkersPerURL: r.WorkersPerURL, Headers: r.Headers, TokenEnv: r.TokenEnv, Command: r.Command, Env: r.Env,
			Dir: r.Dir, Timeout: secs(r.TimeoutSecs), Workers: r.Workers, RecycleAfterCalls: r.RecycleAfterCalls,
			MaxRSSMB: r.MaxRSSMB, StartTimeout: secs(r.StartTimeoutSecs), IdleStop: secs(r.IdleStopSecs),
			KillAfter: secs(r.KillAfterSecs), Resources: r.Resources}
	}
	return remote.NewPool(cfgs, remote.WithEnviron(environ), remote.WithUnits(units))
}

// PoolInfo describes one worker pool (a command remote with pool fields, or a list of URLs;
// docs/guide/pools.md).
type PoolInfo struct {
	Name    string       `json:"name"`
	Command []string     `json:"command"`        // a pool of processes'; null for a pool of servers
	URLs    []string     `json:"urls,omitempty"` // a pool of servers'
	Workers int          `json:"workers"`        // the most workers at once (servers: URLs × workers_per_url)
	Started int          `json:"started"`        // workers ever started
	Lost    int          `json:"lost"`           // workers that died during a call or were killed
	Running []WorkerInfo `json:"running"`        // the live workers, oldest first
}

// WorkerInfo describes one live worker of a pool: a process, or a session with a server.
type WorkerInfo struct {
	ID         int     `json:"id"`            // 1, 2, … in start order within the pool
	PID        *int    `json:"pid"`           // 0 while starting; nil (null) for a server
	URL        string  `json:"url,omitempty"` // the server of a pool of servers
	State      string  `json:"state"`         // starting, idle, busy or draining (finishing a cancelled call)
	Calls      int     `json:"calls"`         // calls served
	RSSMB      float64 `json:"rss_mb"`        // resident memory in MiB; -1 when unknown (not Linux)
	UptimeSecs float64 `json:"uptime_secs"`
}

// WarmPools starts every worker of every pool and waits until each answered its initialize
// (or failed to start, or ctx ended): a check that the pools' command lines work and that
// their licences are free. The workers then wait idle for calls. The error names each pool,
// the command and the end of its stderr.
func (e *Engine) WarmPools(ctx context.Context) error {
	if e.remotes == nil {
		return nil
	}
	if err := e.remotes.Warm(ctx); err != nil {
		return &run.Error{Code: run.CodeWorkerStart, Message: err.Error(), Err: err}
	}
	return nil
}

// Pools lists the configured worker pools, by name, with their live workers; remotes that are
// not pools (a single URL, command remotes without pool fields) are left out.
func (e *Engine) Pools() []PoolInfo {
	out := []PoolInfo{}
	if e.remotes == nil {
		return out
	}
	now := time.Now()
	for _, p := range e.remotes.Pools() {
		pi := PoolInfo{Name: p.Name, Command: p.Command, URLs: p.URLs, Workers: p.Max, Started: p.Started, Lost: p.Lost, Running: []WorkerInfo{}}
		for _, w := range p.Workers {
			rss := -1.0
			if w.RSSBytes >= 0 {
				rss = float64(w.RSSBytes) / (1 << 20)
			}
			var pid *int
			if w.URL == "" {
				pid = &w.PID
			}
			pi.Running = append(pi.Running, WorkerInfo{ID: w.ID, PID: pid, URL: w.URL, State: w.State, Calls: w.Calls, RSSMB: rss,
				UptimeSecs: now.Sub(w.StartedAt).Seconds()})
		}
		out = append(out, pi)
	}
	return out
}
