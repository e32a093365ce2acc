// Package mcpserver serves an engine's workflows over MCP (docs/reference/mcp.md) with mark3labs/mcp-go:
// the tools workflows_run, workflows_get_status, workflows_cancel, workflows_lookup,
// workflows_resume and workflows_approve (names, arguments and results follow the reference
// so its agents work unchanged), the catalog, each run, the schedules and each schedule's fire
// history, a file's lineage and the stale outputs as resources (a run resource can be subscribed to: notifications/resources/updated,
// coalesced), and run updates as
// `notifications/$/dcc.workflowUpdated` plus MCP progress notifications.
//
// Transports: ServeStdio (no signal handling: the caller owns the process) and streamable HTTP
// (Handler, ListenHTTP) on 127.0.0.1 by default; binding any other address requires a bearer
// token. The package never writes to stdout or stderr.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// UpdatedMethod is the notification method of run updates.
const UpdatedMethod = "notifications/$/dcc.workflowUpdated"

// Server is an MCP server over one engine.
type Server struct {
	e       *engine.Engine
	mcp     *server.MCPServer
	limiter *limiter
	subs    *subscriptions
	maxWait time.Duration
}

// Option configures a Server.
type Option func(*Server)

// WithRunRateLimit bounds workflows_run per client session to perSecond runs with bursts of
// burst (token bucket). perSecond ≤ 0 disables the limit. Default: 10 per second, burst 20.
func WithRunRateLimit(perSecond float64, burst int) Option {
	return func(s *Server) { s.limiter = newLimiter(perSecond, burst) }
}

// New returns an MCP server for e.
func New(e *engine.Engine, opts ...Option) *Server {
	s := &Server{e: e, limiter: newLimiter(10, 20), subs: newSubscriptions(e), maxWait: 10 * time.Minute}
	for _, o := range opts {
		o(s)
	}
	// Resources: subscribe (run resources send notifications/resources/updated); no
	// listChanged, since the list (the catalog and the run template) never changes.
	hooks := s.subs.hooks()
	hooks.AddOnUnregisterSession(func(_ context.Context, session server.ClientSession) {
		s.limiter.forget(session.SessionID())
	})
	s.mcp = server.NewMCPServer("dcc-flow", engine.Version,
		server.WithToolCapabilities(false), server.WithResourceCapabilities(true, false), server.WithRecovery(),
		server.WithHooks(hooks),
		server.WithInstructions("dcc-flow runs pipelines of DCC tool calls. Start one with workflows_run (a spec or a catalog name), watch it with workflows_get_status, answer approvals with workflows_approve."))
	s.subs.send = s.mcp.SendNotificationToSpecificClient
	s.addTools()
	s.addResources()
	return s
}

// MCPServer returns the underlying mcp-go server (to add tools of the host, for instance).
func (s *Server) MCPServer() *server.MCPServer { return s.mcp }

// ServeStdio serves one client over r/w until ctx ends or r is closed. It installs no signal
// handler and logs nothing. One at a time per process: mcp-go keeps a single stdio session in
// a package variable, so two stdio servers at once would send each other's notifications (a
// process has one standard input anyway).
func (s *Server) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) error {
	st := server.NewStdioServer(s.mcp)
	st.SetErrorLogger(log.New(io.Discard, "", 0))
	err := st.Listen(ctx, r, &suggestWriter{w: w, fix: s.suggestUnknownTool})
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (s *Server) addTools() {
	s.mcp.AddTool(mcp.NewTool("workflows_run",
		mcp.WithDescription("Start a workflow run from a spec (YAML or JSON text, or a JSON object) or a catalog name, with inputs. Returns workflow_id and status at once; with wait_secs > 0 it waits up to that long for the end, sending progress and notifications/$/dcc.workflowUpdated meanwhile."),
		mcp.WithAny("spec", mcp.Description("The workflow spec: YAML or JSON text, or a JSON object. Give spec or workflow.")),
		mcp.WithString("workflow", mcp.Description("A catalog name (see workflows_lookup). Give spec or workflow.")),
		mcp.WithObject("inputs", mcp.Description("The run's inputs, checked against the spec's declared inputs.")),
		mcp.WithNumber("priority", mcp.Description("The run's priority when its steps wait for scarce resources, over the spec's `priority`: a whole number from -1000 to 1000, higher first (absent = the spec's).")),
		mcp.WithNumber("wait_secs", mcp.Description("Wait up to this many seconds for the run to end (0 = return at once).")),
		mcp.WithBoolean("dry_run", mcp.Description("Call no tool and record nothing: answer with the steps in the order they would run and the arguments each would receive (tool outputs from fixtures, approvals granted).")),
		mcp.WithObject("fixtures", mcp.Description("dry_run: the output of tool steps by step instance key, step id or tool name (most specific first); others output null.")),
		mcp.WithObject("approvals", mcp.Description("dry_run: step key or id -> false to deny that approval; the others are granted.")),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithOpenWorldHintAnnotation(true),
		mcp.WithReadOnlyHintAnnotation(false), mcp.WithIdempotentHintAnnotation(false)), s.toolRun)
	s.mcp.AddTool(mcp.NewTool("workflows_get_status",
		mcp.WithDescription("Status of a run: status, terminal, progress, steps, open approvals, outputs when done, error."),
		mcp.WithString("workflow_id", mcp.Required(), mcp.Description("The run id returned by workflows_run.")),
		mcp.WithReadOnlyHintAnnotation(true), mcp.WithIdempotentHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false), mcp.WithOpenWorldHintAnnotation(false)), s.toolStatus)
	s.mcp.AddTool(mcp.NewTool("workflows_cancel",
		mcp.WithDescription("Cancel a run: no new step starts, running tool calls are told, the run becomes cancelled. Cancelling a finished run does nothing."),
		mcp.WithString("workflow_id", mcp.Required()),
		mcp.WithString("reason", mcp.Description("Why, for the run record.")),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithIdempotentHintAnnotation(true),
		mcp.WithReadOnlyHintAnnotation(false), mcp.WithOpenWorldHintAnnotation(false)), s.toolCancel)
	s.mcp.AddTool(mcp.NewTool("workflows_lookup",
		mcp.WithDescription("Search the workflow catalog by name or description words; an empty query lists every workflow."),
		mcp.WithString("query"),
		mcp.WithReadOnlyHintAnnotation(true), mcp.WithIdempotentHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false), mcp.WithOpenWorldHintAnnotation(false)), s.toolLookup)
	s.mcp.AddTool(mcp.NewTool("workflows_resume",
		mcp.WithDescription("Resume a failed, interrupted or cancelled run, reusing its completed steps."),
		mcp.WithString("workflow_id", mcp.Required()),
		mcp.WithArray("force_steps", mcp.Description("Step ids or instance keys to run again."), mcp.WithStringItems()),
		mcp.WithString("expected_spec_hash", mcp.Description("Refuse (spec_changed) unless the run's spec has this hash.")),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithIdempotentHintAnnotation(false),
		mcp.WithReadOnlyHintAnnotation(false), mcp.WithOpenWorldHintAnnotation(true)), s.toolResume)
	s.mcp.AddTool(mcp.NewTool("workflows_approve",
		mcp.WithDescription("Answer the open approval of an approve step."),
		mcp.WithString("workflow_id", mcp.Required()),
		mcp.WithString("step", mcp.Required(), mcp.Description("The approve step's instance key, e.g. human_gate.")),
		mcp.WithBoolean("approved", mcp.Required()),
		mcp.WithString("reason"), mcp.WithString("by"),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithIdempotentHintAnnotation(false),
		mcp.WithReadOnlyHintAnnotation(false), mcp.WithOpenWorldHintAnnotation(false)), s.toolApprove)
	s.addPauseTools()
	s.addSearchTool()
}

// toolError is a tool failure: isError with the stable code in structuredContent.
func toolError(err error) *mcp.CallToolResult {
	code := run.CodeOf(err)
	body := map[string]any{"code": code, "message": err.Error()}
	var pe spec.ProblemError // a spec's or a schedule set's problems
	if errors.As(err, &pe) {
		body["problems"] = pe.ProblemList()
	}
	res := mcp.NewToolResultStructured(body, fmt.Sprintf("%s: %s", code, err.Error()))
	res.IsError = true
	return res
}

func structured(v any) *mcp.CallToolResult {
	b, _ := json.Marshal(v)
	return mcp.NewToolResultStructured(v, string(b))
}

func (s *Server) toolRun(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	session := server.ClientSessionFromContext(ctx)
	sessionID := ""
	if session != nil {
		sessionID = session.SessionID()
	}
	if wait, ok := s.limiter.allow(sessionID); !ok {
		return toolError(&run.Error{Code: "rate_limited", Message: fmt.Sprintf("too many workflows_run calls from this session; retry in %.1f s", wait.Seconds()),
			Details: map[string]any{"retry_after_secs": math.Ceil(wait.Seconds()*10) / 10}}), nil
	}
	args := req.GetArguments()
	start := engine.StartRequest{Origin: engine.OriginMCP}
	if w, ok := args["workflow"].(string); ok {
		start.Workflow = w
	}
	if in, ok := args["inputs"].(map[string]any); ok {
		start.Inputs = in
	}
	if err := refuseRoundedIntegers(args, "inputs", "spec", "fixtures"); err != nil {
		return toolError(err), nil
	}
	if raw, ok := args["priority"]; ok && raw != nil {
		p, err := priorityArg(raw)
		if err != nil {
			return toolError(err), nil
		}
		start.Priority = &p
	}
	if raw, ok := args["spec"]; ok && raw != nil {
		var text []byte
		switch v := raw.(type) {
		case string:
			text = []byte(v)
		default:
			b, err := json.Marshal(v)
			if err != nil {
				return toolError(run.Errorf(run.CodeInvalidRequest, "spec: %v", err)), nil
			}
			text = b
		}
		sp, err := spec.Parse(text, spec.Options{Source: "spec"})
		if err != nil {
			return toolError(err), nil
		}
		start.Spec = sp
	}
	if dry, _ := args["dry_run"].(bool); dry {
		return s.dryRun(ctx, start, args), nil
	}
	id, err := s.e.Submit(ctx, start)
	if err != nil {
		return toolError(err), nil
	}
	var token mcp.ProgressToken
	if req.Params.Meta != nil {
		token = req.Params.Meta.ProgressToken
	}
	waitSecs := req.GetFloat("wait_secs", 0)
	if waitSecs > 0 {
		wait := min(time.Duration(waitSecs*float64(time.Second)), s.maxWait)
		wctx, cancel := context.WithTimeout(ctx, wait)
		s.forward(wctx, id, token) // on the request's stream: returns when the run ends
		cancel()
	} else if sessionID != "" {
		go s.forward(context.WithoutCancel(ctx), id, token)
	}
	info, err := s.e.Status(context.Background(), id)
	if err != nil {
		return toolError(err), nil
	}
	return structured(map[string]any{"workflow_id": id, "status": info.Status, "terminal": info.Terminal,
		"progress": info.Progress, "outputs": info.Outputs, "error": info.Error}), nil
}

// dryRun answers workflows_run with dry_run: the engine's DryRunResult as structuredContent.
// It runs with origin mcp, so its rendered args show only the env_allow variables.
func (s *Server) dryRun(ctx context.Context, start engine.StartRequest, args map[string]any) *mcp.CallToolResult {
	req := engine.DryRunRequest{StartRequest: start}
	if f, ok := args["fixtures"]; ok && f != nil {
		m, ok := f.(map[string]any)
		if !ok {
			return toolError(run.Errorf(run.CodeInvalidRequest, "fixtures must be an object of step key, step id or tool name to output"))
		}
		req.Fixtures = m
	}
	if a, ok := args["approvals"]; ok && a != nil {
		m, ok := a.(map[string]any)
		if !ok {
			return toolError(run.Errorf(run.CodeInvalidRequest, "approvals must be an object of step key or id to true or false"))
		}
		req.Approvals = map[string]bool{}
		for k, v := range m {
			b, ok := v.(bool)
			if !ok {
				return toolError(run.Errorf(run.CodeInvalidRequest, "approvals.%s must be true or false; got %v", k, v))
			}
			req.Approvals[k] = b
		}
	}
	res, err := s.e.DryRun(ctx, req)
	if err != nil {
		return toolError(err)
	}
	return structured(res)
}

// forward sends the run's events to the session that started it, as workflowUpdated and (with
// a progress token) progress notifications, until the run ends or ctx does. Sending never blocks
// the engine: notifications a slow client cannot take are dropped by mcp-go.
func (s *Server) forward(ctx context.Context, runID string, token mcp.ProgressToken) {
	sub, err := s.e.Subscribe(ctx, engine.EventQuery{RunID: runID})
	if err != nil {
		return
	}
	defer sub.Close()
	last := 0.0 // the progress value sent last
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return
		}
		detail := map[string]any{"kind": ev.Type, "step_key": ev.StepKey, "status": ev.Status, "attempt": ev.Attempt}
		if len(ev.Detail) > 0 {
			var d map[string]any
			if json.Unmarshal(ev.Detail, &d) == nil {
				for k, v := range d {
					if _, taken := detail[k]; !taken {
						detail[k] = v
					}
				}
			}
		}
		terminal := ev.Type == run.EventWorkflowTerminal
		params := map[string]any{"workflow_id": runID, "status": ev.Status, "terminal": terminal,
			"progress": ev.Progress, "seq": ev.Seq, "detail": detail}
		_ = s.mcp.SendNotificationToClient(ctx, UpdatedMethod, params)
		if token != nil {
			value, message := progressNote(ev)
			last = max(last, value) // never backwards: a parallel step may be less far along
			_ = s.mcp.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
				"progressToken": token, "progress": last, "total": ev.Progress.Total, "message": message})
		}
		if terminal {
			return
		}
	}
}

// progressNote is the value and message of the progress notification of ev: the run's
// completed step instances, plus, for a step_progress event with a total, the fraction of the
// running step that is done (so "2 of 5 steps, export 37/120" is 2.31 of 5), and a message such
// as "step_progress export 37/120 caching frames…".
func progressNote(ev run.Event) (float64, string) {
	value := float64(ev.Progress.Completed)
	message := strings.TrimSpace(ev.Type + " " + ev.StepKey)
	if ev.Type != run.EventStepProgress {
		return value, message
	}
	var p run.StepProgress
	if json.Unmarshal(ev.Detail, &p) != nil {
		return value, message
	}
	message += " " + strconv.FormatFloat(p.Done, 'f', -1, 64)
	if p.Total != nil {
		message += "/" + strconv.FormatFloat(*p.Total, 'f', -1, 64)
		if *p.Total > 0 {
			value += min(max(p.Done / *p.Total, 0), 0.99)
		}
	}
	if p.Message != "" {
		message += " " + p.Message
	}
	return value, message
}

func (s *Server) toolStatus(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, err := req.RequireString("workflow_id")
	if err != nil {
		return toolError(run.Errorf(run.CodeInvalidRequest, "workflow_id is required")), nil
	}
	info, err := s.e.Status(ctx, id)
	if err != nil {
		return toolError(err), nil
	}
	out := map[string]any{"workflow_id": info.ID, "name": info.Name, "status": info.Status, "terminal": info.Terminal,
		"progress": info.Progress, "steps": info.Steps, "approvals": info.Approvals, "error": info.Error,
		"created_at": info.CreatedAt}
	if info.Terminal {
		out["outputs"] = info.Outputs
	}
	// Sub-workflows (docs/reference/spec.md, "workflow"): the child runs of its workflow steps, and the
	// parent of a child run; absent otherwise.
	if len(info.Children) > 0 {
		out["children"] = info.Children
	}
	if info.ParentRunID != "" {
		out["parent_workflow_id"], out["parent_step_key"] = info.ParentRunID, info.ParentStepKey
	}
	// The resume history (docs/reference/cli/inspecting.md "show"); each step's attempt_history is in steps.
	if len(info.Resumes) > 0 {
		out["resumes"] = info.Resumes
	}
	return structured(out), nil
}

func (s *Server) toolCancel(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, err := req.RequireString("workflow_id")
	if err != nil {
		return toolError(run.Errorf(run.CodeInvalidRequest, "workflow_id is required")), nil
	}
	if err := s.e.Cancel(ctx, id, req.GetString("reason", "cancelled over MCP")); err != nil {
		return toolError(err), nil
	}
	info, err := s.e.Wait(ctx, id, 5*time.Second)
	if err != nil {
		return toolError(err), nil
	}
	return structured(map[string]any{"workflow_id": id, "status": info.Status, "terminal": info.Terminal}), nil
}

func (s *Server) toolLookup(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	entries := s.e.Lookup(req.GetString("query", ""))
	if entries == nil {
		entries = []engine.CatalogEntry{}
	}
	return structured(map[string]any{"workflows": entries}), nil
}

func (s *Server) toolResume(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, err := req.RequireString("workflow_id")
	if err != nil {
		return toolError(run.Errorf(run.CodeInvalidRequest, "workflow_id is required")), nil
	}
	opts := engine.ResumeOptions{ExpectedSpecHash: req.GetString("expected_spec_hash", ""), ForceSteps: req.GetStringSlice("force_steps", nil), By: "mcp"}
	if _, err := s.e.Resume(ctx, id, opts); err != nil {
		return toolError(err), nil
	}
	info, err := s.e.Status(ctx, id)
	if err != nil {
		return toolError(err), nil
	}
	return structured(map[string]any{"workflow_id": id, "status": info.Status, "terminal": info.Terminal}), nil
}

func (s *Server) toolApprove(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, err1 := req.RequireString("workflow_id")
	step, err2 := req.RequireString("step")
	approved, err3 := req.RequireBool("approved")
	if err := errors.Join(err1, err2, err3); err != nil {
		return toolError(run.Errorf(run.CodeInvalidRequest, "workflow_id, step and approved are required: %v", err)), nil
	}
	by := req.GetString("by", "mcp")
	if err := s.e.Approve(ctx, id, step, approved, req.GetString("reason", ""), by); err != nil {
		return toolError(err), nil
	}
	return structured(map[string]any{"workflow_id": id, "step": step, "approved": approved}), nil
}

func (s *Server) addResources() {
	s.mcp.AddResource(mcp.NewResource(catalogURI, "workflow catalog",
		mcp.WithResourceDescription("Every workflow the engine can run by name."), mcp.WithMIMEType("application/json")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			b, err := json.Marshal(map[string]any{"workflows": s.e.Lookup("")})
			if err != nil {
				return nil, err
			}
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: catalogURI, MIMEType: "application/json", Text: string(b)}}, nil
		})
	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(runURIPrefix+"{workflow_id}", "workflow run",
		mcp.WithTemplateDescription("A run's status, steps and recent events. Subscribe to it for notifications/resources/updated as the run changes."), mcp.WithTemplateMIMEType("application/json")),
		func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			id := strings.TrimPrefix(req.Params.URI, runURIPrefix)
			info, err := s.e.Status(ctx, id)
			if err != nil {
				// mcp-go answers every resource handler error with -32603 (it has no way to
				// send -32002, resource not found): the message says what happened.
				if run.CodeOf(err) == run.CodeNotFound {
					return nil, runNotFound(req.Params.URI, id)
				}
				return nil, err
			}
			evs, _ := s.e.PollEvents(ctx, engine.EventQuery{RunID: id, Max: 200}, 0)
			b, err := json.Marshal(map[string]any{"run": info, "events": evs})
			if err != nil {
				return nil, err
			}
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}, nil
		})
	s.addScheduleResources()
	s.addAssetResources()
}

// limiter is a token bucket per client session.
type limiter struct {
	rate  float64 // tokens per second; ≤ 0 = unlimited
	burst float64
	mu    sync.Mutex
	bkts  map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLimiter(perSecond float64, burst int) *limiter {
	return &limiter{rate: perSecond, burst: float64(max(burst, 1)), bkts: map[string]*bucket{}}
}

// forget drops the bucket of a session that ended.
func (l *limiter) forget(session string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.bkts, session)
}

// allow takes a token for session; when none is left it returns how long until one is.
func (l *limiter) allow(session string) (time.Duration, bool) {
	if l.rate <= 0 {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	b := l.bkts[session]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.bkts[session] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
}

// priorityArg is workflows_run's priority: a whole number (the engine checks its range,
// spec.MinPriority to spec.MaxPriority, as for every other way of starting a run).
func priorityArg(raw any) (int, error) {
	f, ok := raw.(float64)
	if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<31 {
		return 0, run.Errorf(run.CodeInvalidRequest,
			"priority must be a whole number from %d to %d (higher is served first; leave it out for the spec's); got %s",
			spec.MinPriority, spec.MaxPriority, describeArg(raw))
	}
	return int(f), nil
}

// describeArg is a tool argument for an error message: its JSON.
func describeArg(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// refuseRoundedIntegers fails when a member of args holds an integer of magnitude ≥ 2^53. The
// MCP library decodes JSON-RPC numbers as float64 (as JavaScript clients hold them), so such a
// number may already have been rounded (2^53+1 arrives as 2^53): refuse it with a clear error
// rather than start a run with a silently changed asset id. Send such numbers as strings.
func refuseRoundedIntegers(args map[string]any, members ...string) error {
	for _, m := range members {
		if path, f, ok := findRoundedInteger(args[m], m); ok {
			return run.Errorf(run.CodeInvalidInput,
				"%s: %s is too large for an exact JSON-RPC number (MCP carries numbers as doubles, exact only below 2^53 = 9007199254740992); send it as a string",
				path, strconv.FormatFloat(f, 'f', -1, 64))
		}
	}
	return nil
}

func findRoundedInteger(v any, path string) (string, float64, bool) {
	switch v := v.(type) {
	case float64:
		if math.Abs(v) >= 1<<53 && v == math.Trunc(v) {
			return path, v, true
		}
	case map[string]any:
		for k, e := range v {
			if p, f, ok := findRoundedInteger(e, path+"."+k); ok {
				return p, f, true
			}
		}
	case []any:
		for i, e := range v {
			if p, f, ok := findRoundedInteger(e, fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, f, true
			}
		}
	}
	return "", 0, false
}
