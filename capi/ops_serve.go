package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/mcpserver"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

// stdioDoor is MCP served on the process's standard input and output. Its stream ends when the
// client closes our standard input (an MCP host stopping its child), on a read or write error,
// or when the door is stopped; the host learns it from dccflow_serve_status.
type stdioDoor struct {
	stop  context.CancelFunc
	ended chan struct{} // closed once the stream has ended
	err   error         // why, when not the end of input or a stop; set before ended closes
}

var opScheduleAdd = withEngine(func(e *engine.Engine, req *flowtype.ScheduleSpec) (any, error) {
	if err := required("id", req.ID); err != nil {
		return nil, err
	}
	if err := e.Schedule(*req); err != nil {
		return nil, err
	}
	next, _ := e.NextFire(req.ID)
	return map[string]any{"id": req.ID, "next_fire": timeOrNil(next)}, nil
})

type idRequest struct {
	ID string `json:"id"`
}

var opScheduleRemove = withEngine(func(e *engine.Engine, req *idRequest) (any, error) {
	if err := required("id", req.ID); err != nil {
		return nil, err
	}
	return struct{}{}, e.Unschedule(req.ID)
})

type scheduleJSON struct {
	flowtype.ScheduleSpec
	NextFire      any          `json:"next_fire"`
	SecretMissing bool         `json:"secret_missing,omitempty"`
	LastFire      *engine.Fire `json:"last_fire,omitempty"`
}

var opSchedulesList = withEngine(func(e *engine.Engine, _ *struct{}) (any, error) {
	out := []scheduleJSON{}
	for _, info := range e.Schedules() {
		sj := scheduleJSON{ScheduleSpec: info.Spec, NextFire: timeOrNil(info.NextFire), SecretMissing: info.SecretMissing}
		if fires, err := e.ScheduleFires(context.Background(), info.Spec.ID, 1); err == nil && len(fires) > 0 {
			sj.LastFire = &fires[0]
		}
		out = append(out, sj)
	}
	return map[string]any{"schedules": out}, nil
})

type serveRequest struct {
	Webhooks     *string `json:"webhooks"`
	SchedulesDir string  `json:"schedules_dir"`
	Scheduler    *bool   `json:"scheduler"`
	// MCP is "stdio" (the process's standard input and output) or "http://HOST:PORT".
	MCP   string `json:"mcp"`
	Token string `json:"token"`
	// UI is "HOST:PORT" (or "http://HOST:PORT") for the web dashboard (docs/guide/ui.md); port 0
	// picks one. Off loopback it needs Token.
	UI string `json:"ui"`
	// UISessionIdleSecs ends a dashboard session unused that long (0 = 12 h);
	// UISessionMaxSecs ends it that long after its sign-in (0 = 7 days). 60 s to 365 days.
	UISessionIdleSecs float64 `json:"ui_session_idle_secs"`
	UISessionMaxSecs  float64 `json:"ui_session_max_secs"`
	// MCPMaxBodyBytes caps MCP HTTP request bodies (0 = 8 MiB; 1 KiB to 1 GiB).
	MCPMaxBodyBytes int64 `json:"mcp_max_body_bytes"`
	// AllowedOrigins are the browser origins, besides the server's own, that may call MCP over
	// HTTP ("*" = any); another Origin is answered 403.
	AllowedOrigins []string `json:"allowed_origins"`
	// MCPMaxSessions caps the MCP HTTP sessions open at once (0 = 1000); MCPSessionIdleSecs
	// ends sessions idle that long (0 = 1800).
	MCPMaxSessions     int     `json:"mcp_max_sessions"`
	MCPSessionIdleSecs float64 `json:"mcp_session_idle_secs"`
	// AllowUnsignedWebhooks serves webhook schedules without secret_env on a non-loopback
	// address.
	AllowUnsignedWebhooks bool `json:"allow_unsigned_webhooks"`
	// Metrics is "HOST:PORT" (port 0 picks one): serve the engine's Prometheus metrics on GET
	// /metrics (docs/operations/metrics.md); off loopback it needs Token.
	Metrics string `json:"metrics"`
	// Retention is how long ended runs are kept ("30d", "12h", "forever"; absent = 30 days):
	// see serveRetention (ops_retention.go).
	Retention *string `json:"retention"`
}

// opServeStart loads schedules, starts the scheduler and the webhook server as asked:
// {"schedules_dir"?, "scheduler"?: true, "webhooks"?: "127.0.0.1:8787",
// "allow_unsigned_webhooks"?, "mcp"?, "token"?, "mcp_max_body_bytes"?, "allowed_origins"?,
// "mcp_max_sessions"?, "mcp_session_idle_secs"?, "ui"?, "ui_session_idle_secs"?,
// "ui_session_max_secs"?, "retention"?, "metrics"?} →
// "scheduler" absent starts it when schedules_dir is given; false only loads the schedules
// (to list them with their next fire times, firing nothing).
// {"schedules": n, "webhooks_addr"?: "127.0.0.1:8787", "mcp_url"?, "ui_url"?, "metrics_addr"?,
// "retention"?: {...}}. "retention"
// ("30d", "forever"; absent = 30 days) starts the engine's retention loop (ops_retention.go).
//
// It runs under the entry's lock, so that engine_close, which stops the servers under it, never
// misses one: on an entry closed meanwhile it answers stale_handle.
func opServeStart(h uint64, in []byte) (any, error) {
	ent, err := engines.get(h)
	if err != nil {
		return nil, err
	}
	var req serveRequest
	if err := decode(in, &req); err != nil {
		return nil, err
	}
	ent.mu.Lock()
	defer ent.mu.Unlock()
	if ent.closed {
		return nil, staleHandle(h)
	}
	e := ent.e
	retention, retain, err := serveRetention(e, &req)
	if err != nil {
		return nil, err
	}
	res := map[string]any{}
	if req.SchedulesDir != "" {
		specs, err := e.LoadSchedules(req.SchedulesDir)
		if err != nil {
			return nil, err
		}
		res["schedules"] = len(specs)
	}
	if (req.Scheduler == nil && req.SchedulesDir != "") || (req.Scheduler != nil && *req.Scheduler) {
		if err := e.StartScheduler(context.Background()); err != nil {
			return nil, err
		}
	}
	if retain {
		if err := e.StartRetention(retention); err != nil {
			return nil, err
		}
		res["retention"] = retentionJSON(e)
	}
	if req.Webhooks != nil {
		var opts []engine.WebhookOption
		if req.AllowUnsignedWebhooks {
			opts = append(opts, engine.AllowUnsignedWebhooks())
		}
		addr, err := ent.startWebhooksLocked(*req.Webhooks, opts...)
		if err != nil {
			return nil, err
		}
		res["webhooks_addr"] = addr
	}
	if req.Metrics != "" {
		if ent.metrics == nil {
			ms, err := e.ServeMetrics(req.Metrics, req.Token)
			if err != nil {
				return nil, err
			}
			ent.metrics = ms
		}
		res["metrics_addr"] = ent.metrics.Addr()
	}
	if req.MCP != "" {
		opts := []mcpserver.HTTPOption{mcpserver.WithMaxBodyBytes(req.MCPMaxBodyBytes), mcpserver.WithMaxSessions(req.MCPMaxSessions)}
		if req.MCPSessionIdleSecs != 0 {
			if req.MCPSessionIdleSecs < 1 || req.MCPSessionIdleSecs > 7*24*3600 {
				return nil, &badRequest{msg: fmt.Sprintf("invalid request: mcp_session_idle_secs is %v; use 0 for the default (1800) or 1 to 604800", req.MCPSessionIdleSecs)}
			}
			opts = append(opts, mcpserver.WithSessionIdleTimeout(time.Duration(req.MCPSessionIdleSecs*float64(time.Second))))
		}
		if len(req.AllowedOrigins) > 0 {
			opts = append(opts, mcpserver.WithAllowedOrigins(req.AllowedOrigins...))
		}
		url, err := ent.startMCPLocked(req.MCP, req.Token, opts...)
		if err != nil {
			return nil, err
		}
		res["mcp_url"] = url
	}
	if req.UI != "" {
		opts := ui.Options{Token: req.Token}
		for _, d := range []struct {
			name string
			secs float64
			to   *time.Duration
		}{{"ui_session_idle_secs (serve --ui-session-idle)", req.UISessionIdleSecs, &opts.SessionIdle},
			{"ui_session_max_secs (serve --ui-session-max)", req.UISessionMaxSecs, &opts.SessionMax}} {
			if d.secs == 0 {
				continue
			}
			if d.secs < 60 || d.secs > 365*24*3600 {
				return nil, &badRequest{msg: fmt.Sprintf("invalid request: %s is %v; use 0 for the default or 60 to 31536000 seconds (a minute to a year)", d.name, d.secs)}
			}
			*d.to = time.Duration(d.secs * float64(time.Second))
		}
		url, err := ent.startUILocked(req.UI, opts)
		if err != nil {
			return nil, err
		}
		res["ui_url"] = url
	}
	return res, nil
}

// startUILocked serves the web dashboard on addr (once per handle) and returns its URL. The
// caller holds ent.mu.
func (ent *engineEntry) startUILocked(addr string, opts ui.Options) (string, error) {
	if ent.ui == nil {
		// The dashboard's address also answers GET /metrics, behind the dashboard's token rule.
		mh, err := ent.e.Metrics()
		if err != nil {
			return "", err
		}
		opts.Metrics = mh
		s, err := ui.Serve(ent.e, strings.TrimSuffix(strings.TrimPrefix(addr, "http://"), "/"), opts)
		if err != nil {
			return "", err
		}
		ent.ui = s
	}
	return ent.ui.URL(), nil
}

// startWebhooksLocked serves the engine's webhook schedules on addr (once per handle) and
// returns the address it listens on. The caller holds ent.mu.
func (ent *engineEntry) startWebhooksLocked(addr string, opts ...engine.WebhookOption) (string, error) {
	if ent.webhooks == nil {
		ws, err := ent.e.ServeWebhooks(addr, opts...)
		if err != nil {
			return "", err
		}
		ent.webhooks = ws
	}
	return ent.webhooks.Addr(), nil
}

// startMCPLocked serves the engine over MCP: "stdio" on the process's standard streams, or
// "http://HOST:PORT" (port 0 picks one), once per handle each. It returns the endpoint ("stdio"
// or the URL). The caller holds ent.mu.
func (ent *engineEntry) startMCPLocked(where, token string, opts ...mcpserver.HTTPOption) (string, error) {
	srv := mcpserver.New(ent.e)
	switch {
	case where == "stdio":
		if ent.mcpStdio == nil {
			ctx, cancel := context.WithCancel(context.Background())
			sd := &stdioDoor{stop: cancel, ended: make(chan struct{})}
			ent.mcpStdio = sd
			go func() {
				defer close(sd.ended)
				defer func() {
					if p := recover(); p != nil {
						sd.err = fmt.Errorf("internal error serving MCP on stdio (a bug in dcc-flow): %v", p)
					}
				}()
				sd.err = srv.ServeStdio(ctx, os.Stdin, os.Stdout)
			}()
		}
		return "stdio", nil
	case strings.HasPrefix(where, "http://"):
		if ent.mcpHTTP == nil {
			// The MCP address also answers GET /metrics, behind the same token and Origin checks.
			mh, err := ent.e.Metrics()
			if err != nil {
				return "", err
			}
			opts = append(opts, mcpserver.WithMetrics(mh))
			hs, err := srv.ListenHTTP(strings.TrimSuffix(strings.TrimPrefix(where, "http://"), "/mcp"), token, opts...)
			if err != nil {
				return "", err
			}
			ent.mcpHTTP = hs
		}
		return ent.mcpHTTP.URL(), nil
	}
	return "", &badRequest{msg: fmt.Sprintf(`invalid request: "mcp" must be "stdio" or "http://HOST:PORT"; got %q`, where)}
}

type serveStatusRequest struct {
	// TimeoutMs waits up to this long (capped like every blocking export) for the MCP stdio
	// stream to end, when one is served; 0 answers at once.
	TimeoutMs int64 `json:"timeout_ms"`
}

// opServeStatus reports the servers serve_start started: {"webhooks_addr"?, "mcp_url"?, "ui_url"?,
// "metrics_addr"?,
// "mcp_stdio"?: "serving" | "ended", "mcp_stdio_error"?}. "ended" means the MCP client closed
// the process's standard input (or the stream failed: mcp_stdio_error says why); a host such
// as dcc-flow serve then stops, as on SIGTERM. With timeout_ms it returns as soon as the
// stream ends, or after timeout_ms with "serving".
func opServeStatus(h uint64, in []byte) (any, error) {
	ent, err := engines.get(h)
	if err != nil {
		return nil, err
	}
	var req serveStatusRequest
	if err := decode(in, &req); err != nil {
		return nil, err
	}
	res := map[string]any{}
	ent.mu.Lock()
	webhooks, mcpHTTP, sd, ms, dash := ent.webhooks, ent.mcpHTTP, ent.mcpStdio, ent.metrics, ent.ui
	ent.mu.Unlock()
	if ms != nil {
		res["metrics_addr"] = ms.Addr()
	}
	if dash != nil {
		res["ui_url"] = dash.URL()
	}
	if webhooks != nil {
		res["webhooks_addr"] = webhooks.Addr()
	}
	if mcpHTTP != nil {
		res["mcp_url"] = mcpHTTP.URL()
	}
	if sd == nil {
		return res, nil
	}
	if req.TimeoutMs > 0 {
		t := time.NewTimer(millis(req.TimeoutMs))
		defer t.Stop()
		select {
		case <-sd.ended:
		case <-t.C:
		}
	}
	select {
	case <-sd.ended:
		res["mcp_stdio"] = "ended"
		if sd.err != nil {
			res["mcp_stdio_error"] = sd.err.Error()
		}
	default:
		res["mcp_stdio"] = "serving"
	}
	return res, nil
}

// opServeStop stops the servers and the scheduler of an engine (the engine stays open).
func opServeStop(h uint64, _ []byte) (any, error) {
	ent, err := engines.get(h)
	if err != nil {
		return nil, err
	}
	ent.mu.Lock()
	ent.stopServersLocked()
	ent.mu.Unlock()
	ent.e.StopRetention()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return struct{}{}, ent.e.StopScheduler(ctx)
}

func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}
