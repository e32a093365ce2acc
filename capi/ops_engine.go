package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// engines holds every open engine of the process, with its servers.
var engines = newHandleTable[*engineEntry]()

// maxBlock caps every blocking export: Ctrl-C and shutdown are never stuck for long.
const maxBlock = 60 * time.Second

// closeTimeout bounds how long dccflow_engine_close waits for runs to stop.
const closeTimeout = 30 * time.Second

func millis(ms int64) time.Duration {
	d := time.Duration(ms) * time.Millisecond
	if d > maxBlock {
		return maxBlock
	}
	return d
}

func withEngine[Req any](fn func(e *engine.Engine, req *Req) (any, error)) op {
	return func(h uint64, in []byte) (any, error) {
		ent, err := engines.get(h)
		if err != nil {
			return nil, err
		}
		e := ent.e
		req := new(Req)
		decodeReq := decode
		if d, ok := any(req).(requestDecoder); ok {
			decodeReq = func(in []byte, _ any) error { return d.decodeRequest(in) }
		}
		if err := decodeReq(in, req); err != nil {
			return nil, err
		}
		return fn(e, req)
	}
}

func required(name, value string) error {
	if value == "" {
		return &badRequest{msg: "invalid request: \"" + name + "\" is required"}
	}
	return nil
}

type openRequest struct {
	Config engine.Config `json:"config"`
}

func opEngineOpen(_ uint64, in []byte) (any, error) {
	var req openRequest
	if err := decode(in, &req); err != nil {
		return nil, err
	}
	e, err := engine.Open(context.Background(), req.Config, engine.WithEnviron(liveEnviron))
	if err != nil {
		return nil, err
	}
	return map[string]uint64{"handle": engines.add(&engineEntry{e: e})}, nil
}

// opEngineClose marks the entry closed and stops the servers serve_start started (a
// serve_start running at the same moment either finished first, and its servers are stopped
// here, or finds the entry closed and answers stale_handle), then closes the engine and forgets
// the handle. While the engine closes the handle stays valid: new work is refused with code
// closed by the engine, and the host can still answer the calls it is running (a closing engine
// on a shared database waits for them: docs/operations/cluster.md, "Closing an engine"). A second close
// at the same moment answers closed: false at once.
func opEngineClose(h uint64, _ []byte) (any, error) {
	ent, err := engines.get(h)
	if err != nil {
		return map[string]bool{"closed": false}, nil
	}
	ent.mu.Lock()
	if ent.closed {
		ent.mu.Unlock()
		return map[string]bool{"closed": false}, nil
	}
	ent.closed = true
	ent.stopServersLocked()
	ent.mu.Unlock()
	defer engines.remove(h)
	limit := closeTimeout + ent.e.CloseBudget()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := ent.e.Close(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, &run.Error{Code: run.CodeTimeout, Err: err, Message: fmt.Sprintf(
				"closing the engine: its runs did not stop within %s (a tool that does not return?); "+
					"the handle is closed all the same", limit)}
		}
		return nil, err
	}
	return map[string]bool{"closed": true}, nil
}

// toolRequest is the input of dccflow_tool_register: flowtype.ToolInfo without Builtin, which
// only the engine sets.
type toolRequest struct {
	Name          string          `json:"name"`
	Lane          string          `json:"lane"`
	MaxConcurrent int             `json:"max_concurrent"`
	Description   string          `json:"description"`
	Schema        json.RawMessage `json:"schema"`
	OutputSchema  json.RawMessage `json:"output_schema"`
	// Resources: the units each call holds (flowtype.ToolInfo.Resources).
	Resources map[string]int `json:"resources"`
}

var opToolRegister = withEngine(func(e *engine.Engine, req *toolRequest) (any, error) {
	if err := required("name", req.Name); err != nil {
		return nil, err
	}
	if req.Lane == "" {
		req.Lane = flowtype.LaneMain
	}
	return struct{}{}, e.RegisterTool(flowtype.ToolInfo{Name: req.Name, Lane: req.Lane, MaxConcurrent: req.MaxConcurrent,
		Description: req.Description, Schema: req.Schema, OutputSchema: req.OutputSchema, Resources: req.Resources})
})

var opWorkflowRegister = withEngine(func(e *engine.Engine, req *specRequest) (any, error) {
	s, err := req.spec()
	if err != nil {
		return nil, err
	}
	if err := e.Register(s); err != nil {
		return nil, err
	}
	version := 0
	for _, c := range e.Lookup(s.Name) {
		if c.Name == s.Name {
			version = c.Version
		}
	}
	return map[string]any{"name": s.Name, "spec_hash": s.Hash(), "version": version}, nil
})

// spec parses the text of a request that has one.
func (r *specRequest) spec() (*spec.Spec, error) {
	if r.Text == nil {
		return nil, &badRequest{msg: `invalid request: "text" (the spec's YAML or JSON text) is required`}
	}
	return parsedSpecs.parse([]byte(*r.Text), spec.Options{Format: spec.Format(r.Format), Source: r.Source})
}

type submitRequest struct {
	Spec     *string     `json:"spec"`
	Workflow string      `json:"workflow"`
	Format   string      `json:"format"`
	Source   string      `json:"source"`
	Inputs   spec.Object `json:"inputs"` // large integers stay exact
	// Priority is the run's own priority (engine.StartRequest.Priority); nil = its spec's.
	Priority *int `json:"priority"`
}

var opRunSubmit = withEngine(func(e *engine.Engine, req *submitRequest) (any, error) {
	start := engine.StartRequest{Workflow: req.Workflow, Inputs: req.Inputs, Origin: "local", Priority: req.Priority}
	if req.Spec != nil {
		sr := specRequest{Text: req.Spec, Format: req.Format, Source: req.Source}
		s, err := sr.spec()
		if err != nil {
			return nil, err
		}
		start.Spec = s
	}
	id, err := e.Submit(context.Background(), start)
	if err != nil {
		return nil, err
	}
	return map[string]string{"run_id": id}, nil
})

// dryRequest is a submitRequest with the fixtures and approvals of a dry run.
type dryRequest struct {
	Spec      *string         `json:"spec"`
	Workflow  string          `json:"workflow"`
	Format    string          `json:"format"`
	Source    string          `json:"source"`
	Inputs    spec.Object     `json:"inputs"`   // large integers stay exact
	Fixtures  spec.Object     `json:"fixtures"` // step key, step id or tool name → output
	Approvals map[string]bool `json:"approvals"`
}

var opRunDry = withEngine(func(e *engine.Engine, req *dryRequest) (any, error) {
	dr := engine.DryRunRequest{StartRequest: engine.StartRequest{Workflow: req.Workflow, Inputs: req.Inputs, Origin: "local"},
		Fixtures: req.Fixtures, Approvals: req.Approvals}
	if req.Spec != nil {
		sr := specRequest{Text: req.Spec, Format: req.Format, Source: req.Source}
		s, err := sr.spec()
		if err != nil {
			return nil, err
		}
		dr.Spec = s
	}
	return e.DryRun(context.Background(), dr)
})

type runRequest struct {
	RunID     string `json:"run_id"`
	TimeoutMs int64  `json:"timeout_ms"`
	Reason    string `json:"reason"`
	// AllSteps asks for every step instance, foreach iterations included.
	AllSteps bool `json:"all_steps"`
}

// runResult is a RunInfo plus whether a wait timed out.
type runResult struct {
	*engine.RunInfo
	TimedOut bool `json:"timed_out,omitempty"`
}

func status(e *engine.Engine, req *runRequest, info *engine.RunInfo) (any, error) {
	if req.AllSteps {
		steps, err := e.Steps(engine.WithRawOutputs(context.Background()), req.RunID)
		if err != nil {
			return nil, err
		}
		info.Steps = steps
	}
	// Outputs come as the stored JSON (engine.WithRawOutputs) and are made canonical here without
	// being decoded. A top-level step's output is sent once, in outputs: it may be tens of MB,
	// and every copy of the answer (Go's, C's, Python's bytes, text and objects) would hold it
	// twice.
	for id, out := range info.Outputs {
		if raw, ok := out.(json.RawMessage); ok {
			info.Outputs[id] = canonicalRaw(raw)
		}
	}
	for i := range info.Steps {
		st := &info.Steps[i]
		if _, ok := info.Outputs[st.StepID]; ok && st.Key == st.StepID {
			st.Output = nil
		} else if raw, ok := st.Output.(json.RawMessage); ok {
			st.Output = canonicalRaw(raw)
		}
	}
	return runResult{RunInfo: info, TimedOut: !info.Terminal && req.TimeoutMs > 0}, nil
}

var opRunStatus = withEngine(func(e *engine.Engine, req *runRequest) (any, error) {
	if err := required("run_id", req.RunID); err != nil {
		return nil, err
	}
	info, err := e.Status(engine.WithRawOutputs(context.Background()), req.RunID)
	if err != nil {
		return nil, err
	}
	req.TimeoutMs = 0
	return status(e, req, info)
})

var opRunWait = withEngine(func(e *engine.Engine, req *runRequest) (any, error) {
	if err := required("run_id", req.RunID); err != nil {
		return nil, err
	}
	timeout := millis(req.TimeoutMs)
	if req.TimeoutMs <= 0 {
		timeout = -1 // do not wait
	}
	info, err := e.Wait(engine.WithRawOutputs(context.Background()), req.RunID, timeout)
	if err != nil {
		return nil, err
	}
	return status(e, req, info)
})

type cancelRequest struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
}

var opRunCancel = withEngine(func(e *engine.Engine, req *cancelRequest) (any, error) {
	if err := required("run_id", req.RunID); err != nil {
		return nil, err
	}
	return struct{}{}, e.Cancel(context.Background(), req.RunID, req.Reason)
})

type approveRequest struct {
	RunID    string `json:"run_id"`
	Step     string `json:"step"`
	Approved *bool  `json:"approved"`
	Reason   string `json:"reason"`
	By       string `json:"by"`
}

var opRunApprove = withEngine(func(e *engine.Engine, req *approveRequest) (any, error) {
	if err := required("run_id", req.RunID); err != nil {
		return nil, err
	}
	if err := required("step", req.Step); err != nil {
		return nil, err
	}
	if req.Approved == nil {
		return nil, &badRequest{msg: `invalid request: "approved" (true or false) is required`}
	}
	return struct{}{}, e.Approve(context.Background(), req.RunID, req.Step, *req.Approved, req.Reason, req.By)
})

type runsRequest struct {
	Status []run.Status `json:"status"`
	Name   string       `json:"name"`
	Limit  int          `json:"limit"`
	// The search (docs/reference/cli/inspecting.md "runs"): since and until are an RFC 3339 time or an age ("2h",
	// "7d"); cursor is the next_cursor of the previous page (given only with a limit).
	Since      string            `json:"since"`
	Until      string            `json:"until"`
	Inputs     map[string]string `json:"inputs"`
	Tool       string            `json:"tool"`
	StepStatus []run.StepStatus  `json:"step_status"`
	ErrorKind  string            `json:"error_kind"`
	Worker     string            `json:"worker"`
	ErrorText  string            `json:"error_text"`
	Cursor     string            `json:"cursor"`
}

// opRunsList lists runs newest first ({"runs": […]}); with a limit and more runs after the page,
// also "next_cursor", which a request's "cursor" continues from.
var opRunsList = withEngine(func(e *engine.Engine, req *runsRequest) (any, error) {
	f := engine.RunFilter{Statuses: req.Status, Name: req.Name, Inputs: req.Inputs, Tool: req.Tool,
		StepStatuses: req.StepStatus, ErrorKind: req.ErrorKind, Worker: req.Worker, ErrorText: req.ErrorText}
	now := time.Now()
	var err error
	if req.Since != "" {
		if f.Since, err = engine.ParseTimeBound("since", req.Since, now); err != nil {
			return nil, err
		}
	}
	if req.Until != "" {
		if f.Until, err = engine.ParseTimeBound("until", req.Until, now); err != nil {
			return nil, err
		}
	}
	if req.Cursor != "" {
		c, ok := engine.ParseRunCursor(req.Cursor)
		if !ok {
			return nil, &badRequest{msg: fmt.Sprintf("cursor %.60q is not one a listing gave (its next_cursor)", req.Cursor)}
		}
		f.After = &c
	}
	if req.Limit < 0 {
		return nil, &badRequest{msg: fmt.Sprintf("limit %d: give 0 (all) or more", req.Limit)}
	}
	if req.Limit > 0 {
		f.Limit = req.Limit + 1 // one more tells whether a next page exists
	}
	runs, err := e.Runs(context.Background(), f)
	if err != nil {
		return nil, err
	}
	if runs == nil {
		runs = []engine.RunInfo{}
	}
	out := map[string]any{"runs": runs}
	if req.Limit > 0 && len(runs) > req.Limit {
		runs = runs[:req.Limit]
		last := runs[len(runs)-1]
		out["runs"], out["next_cursor"] = runs, engine.FormatRunCursor(engine.RunCursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	return out, nil
})

// opPoolsList lists the engine's worker pools and their live workers (docs/guide/pools.md).
// With "warm", every worker of every pool is started first (code worker_start when one fails).
var opPoolsList = withEngine(func(e *engine.Engine, req *poolsRequest) (any, error) {
	if req.Warm {
		timeout := 10 * time.Minute
		if req.TimeoutMs > 0 {
			timeout = time.Duration(req.TimeoutMs) * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := e.WarmPools(ctx); err != nil {
			return nil, err
		}
	}
	return map[string]any{"pools": e.Pools()}, nil
})

type poolsRequest struct {
	Warm      bool  `json:"warm"`
	TimeoutMs int64 `json:"timeout_ms"` // bounds warm; 0 = 10 minutes
}

// nextRequest is the input of dccflow_calls_next (and the "next" of dccflow_calls_complete).
type nextRequest struct {
	Puller      uint64   `json:"puller"`
	Lanes       []string `json:"lanes"`
	Max         int      `json:"max"`
	TimeoutMs   int64    `json:"timeout_ms"`
	RunID       string   `json:"run_id"`
	EventsAfter *uint64  `json:"events_after"`
}

// callJSON is a pending call as the C ABI hands it out.
type callJSON struct {
	CallID     uint64         `json:"call_id"`
	Tool       string         `json:"tool"`
	Args       map[string]any `json:"args"`
	RunID      string         `json:"run_id"`
	StepKey    string         `json:"step_key"`
	Attempt    int            `json:"attempt"`
	Lane       string         `json:"lane"`
	DeadlineMs int64          `json:"deadline_ms,omitempty"`
	// Traceparent: the W3C traceparent of the call's span when the engine traces.
	Traceparent string `json:"traceparent,omitempty"`
}

type runSummary struct {
	Status   run.Status `json:"status"`
	Terminal bool       `json:"terminal"`
}

type nextResult struct {
	Accepted *bool       `json:"accepted,omitempty"`
	Calls    []callJSON  `json:"calls"`
	Run      *runSummary `json:"run,omitempty"`
	Events   []run.Event `json:"events,omitempty"`
}

func next(e *engine.Engine, req *nextRequest, res *nextResult) error {
	// Every export is a cgo callback, locked to the calling thread (flowtype.PullRequest.LockedThread).
	pull := flowtype.PullRequest{Lanes: req.Lanes, RunID: req.RunID, Max: req.Max, Timeout: millis(req.TimeoutMs), Puller: req.Puller,
		LockedThread: true}
	if req.RunID != "" {
		pull.Stop = e.RunDone(req.RunID)
	}
	calls, err := e.Host().Pull(context.Background(), pull)
	if err != nil {
		return err
	}
	res.Calls = make([]callJSON, len(calls))
	for i, c := range calls {
		res.Calls[i] = callJSON{CallID: c.ID, Tool: c.Tool, Args: c.Args, RunID: c.RunID, StepKey: c.StepKey, Attempt: c.Attempt, Lane: c.Lane,
			Traceparent: c.Traceparent}
		if !c.Deadline.IsZero() {
			res.Calls[i].DeadlineMs = c.Deadline.UnixMilli()
		}
	}
	if req.RunID != "" {
		// A run that hands out calls is not terminal; otherwise look at its record.
		res.Run = &runSummary{Status: run.StatusRunning}
		if len(calls) == 0 {
			select {
			case <-e.RunDone(req.RunID):
				info, err := e.Status(engine.WithRawOutputs(context.Background()), req.RunID) // only its status is read
				if err != nil {
					return err
				}
				res.Run = &runSummary{Status: info.Status, Terminal: info.Terminal}
				if info.Status == run.StatusPaused && req.TimeoutMs > 0 {
					// Paused and run by no engine (docs/reference/state-machine.md, "Pause"): nothing to
					// pull until an unpause; a caller looping on calls_next must not spin.
					time.Sleep(min(millis(req.TimeoutMs), pausedPoll))
				}
			default:
			}
		}
		if req.EventsAfter != nil {
			evs, err := e.PollEvents(context.Background(), engine.EventQuery{FromSeq: *req.EventsAfter + 1, RunID: req.RunID}, 0)
			if err != nil {
				return err
			}
			res.Events = evs
		}
	}
	return nil
}

var opCallsNext = withEngine(func(e *engine.Engine, req *nextRequest) (any, error) {
	var res nextResult
	if err := next(e, req, &res); err != nil {
		return nil, err
	}
	return res, nil
})

type completeRequest struct {
	CallID uint64          `json:"call_id"`
	Output json.RawMessage `json:"output"`
	Error  *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
		Trace   string `json:"trace"`
	} `json:"error"`
	// Files are the files the call said it read and wrote (current_call().reads and .writes,
	// @task's reads and writes arguments), each {"path": non-empty, "role": "read" | "write"}.
	Files []flowtype.FileUse `json:"files"`
	// Env is the environment of the host process (dcc_flow.set_environment): a JSON object of at
	// most maxEnvBytes; null or absent = none.
	Env  json.RawMessage `json:"env"`
	Next *nextRequest    `json:"next"`
}

// maxEnvBytes bounds a calls_complete's env (64 KiB: dcc_flow.set_environment refuses a larger
// one; a pool worker's answer is bounded alike, engine/internal/remote's MaxEnvBytes).
const maxEnvBytes = 64 << 10

// check refuses files and an env of the wrong shape (the JSON types are the decoder's): a file
// without a path, a role other than "read" and "write", an env that is not a JSON object or is
// over maxEnvBytes. An env of null is none.
func (r *completeRequest) check() error {
	for i, f := range r.Files {
		if f.Path == "" {
			return &badRequest{msg: fmt.Sprintf(`invalid request: files[%d].path is empty; give the file's path`, i)}
		}
		if f.Role != flowtype.FileRead && f.Role != flowtype.FileWrite {
			return &badRequest{msg: fmt.Sprintf(`invalid request: files[%d].role is %q; it must be "read" or "write"`, i, f.Role)}
		}
	}
	env := bytes.TrimSpace(r.Env)
	switch {
	case len(env) == 0 || bytes.Equal(env, []byte("null")):
		r.Env = nil
	case env[0] != '{':
		return &badRequest{msg: `invalid request: "env" must be a JSON object (dcc_flow.set_environment's keywords), not ` + jsonTypeOf(env[0])}
	case len(env) > maxEnvBytes:
		return &badRequest{msg: fmt.Sprintf(`invalid request: "env" is %d bytes of JSON; at most %d (64 KiB)`, len(env), maxEnvBytes)}
	default:
		r.Env = env
	}
	return nil
}

// jsonTypeOf names the JSON type of a value by its first byte.
func jsonTypeOf(first byte) string {
	switch first {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

// decodeRequest decodes a calls_complete request as strictly as decode does, without copying
// the output more than once: the output is a tool's whole result (tens of MB), and decode's
// json.Decoder reads its input into a buffer that it grows by doubling (about 2× the request
// in garbage) before copying the output out of it. json.Unmarshal reads in place, and the
// output's raw bytes, copied once, are what the engine keeps.
// Requests under 64 KiB, the common case, go through decode (a little faster for them).
func (r *completeRequest) decodeRequest(in []byte) error {
	if ok, err := r.decodeQuickNext(in); ok || err != nil {
		return err
	}
	if len(in) < 64<<10 {
		if err := decode(in, r); err != nil {
			return err
		}
		return r.check()
	}
	if err := checkRequestText(in); err != nil {
		return err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(in, &top); err != nil {
		return &badRequest{msg: "invalid request JSON: " + err.Error()}
	}
	for k, raw := range top {
		var err error
		switch strings.ToLower(k) { // encoding/json matches field names without regard to case
		case "call_id":
			if err = json.Unmarshal(raw, &r.CallID); err != nil {
				err = &badRequest{msg: "invalid request JSON: " + err.Error()}
			}
		case "output":
			r.Output = raw
		case "error":
			err = decode(raw, &r.Error)
		case "next":
			err = decode(raw, &r.Next)
		case "files":
			err = decode(raw, &r.Files)
		case "env":
			r.Env = raw
		default:
			err = &badRequest{msg: "invalid request JSON: json: unknown field " + strconv.Quote(k)}
		}
		if err != nil {
			return err
		}
	}
	return r.check()
}

// result is the ToolResult the request answers its call with: its output (null when absent) or
// its error (kind "error" when empty), with its files and env either way (a failed call's
// files are recorded too: what it read and wrote before it failed).
func (r *completeRequest) result() flowtype.ToolResult {
	result := flowtype.ToolResult{OutputJSON: r.Output}
	if len(r.Output) == 0 {
		result.OutputJSON = json.RawMessage("null")
	}
	if r.Error != nil {
		kind := r.Error.Kind
		if kind == "" {
			kind = run.KindError
		}
		result = flowtype.ToolResult{Error: &flowtype.ToolError{Kind: kind, Message: r.Error.Message, Trace: r.Error.Trace}}
	}
	result.Files, result.Env = r.Files, r.Env
	return result
}

// requestDecoder is a request type with its own strict decoding, used instead of decode.
type requestDecoder interface{ decodeRequest(in []byte) error }

var opCallsComplete = withEngine(func(e *engine.Engine, req *completeRequest) (any, error) {
	if req.CallID == 0 {
		return nil, &badRequest{msg: `invalid request: "call_id" is required`}
	}
	accepted := true
	if err := e.Host().Complete(req.CallID, req.result()); err != nil {
		if !errors.Is(err, flowtype.ErrDropped) {
			return nil, err
		}
		accepted = false // a late result: the call timed out or was cancelled
	}
	if req.Next == nil {
		return map[string]bool{"accepted": accepted}, nil // no "calls": null
	}
	res := nextResult{Accepted: &accepted}
	if err := next(e, req.Next, &res); err != nil {
		return nil, err
	}
	return res, nil
})

// pullerOpenRequest opens a puller (dccflow_puller_open); name is its thread's name, shown in
// messages about the calls it runs (an abandoned attempt names its thread).
type pullerOpenRequest struct {
	Name string `json:"name"`
}

var opPullerOpen = withEngine(func(e *engine.Engine, req *pullerOpenRequest) (any, error) {
	id, err := e.Host().OpenPuller(req.Name)
	if err != nil {
		return nil, err
	}
	return map[string]uint64{"puller": id}, nil
})

type pullerRequest struct {
	Puller uint64 `json:"puller"`
}

var opPullerClose = withEngine(func(e *engine.Engine, req *pullerRequest) (any, error) {
	if req.Puller == 0 {
		return nil, &badRequest{msg: `invalid request: "puller" (an id from dccflow_puller_open) is required`}
	}
	return map[string]int{"released": e.Host().ClosePuller(req.Puller)}, nil
})

type releaseRequest struct {
	Puller  uint64   `json:"puller"`
	CallIDs []uint64 `json:"call_ids"`
}

var opCallsRelease = withEngine(func(e *engine.Engine, req *releaseRequest) (any, error) {
	n, err := e.Host().Release(req.Puller, req.CallIDs)
	if err != nil {
		return nil, err
	}
	return map[string]int{"released": n}, nil
})

// cancelledRequest asks whether calls are cancelled (dccflow_call_cancelled): one call_id, or
// several call_ids at once (a host's watchdog over the calls it runs).
type cancelledRequest struct {
	CallID  uint64   `json:"call_id"`
	CallIDs []uint64 `json:"call_ids"`
}

var opCallCancelled = withEngine(func(e *engine.Engine, req *cancelledRequest) (any, error) {
	if req.CallIDs != nil {
		return map[string][]uint64{"cancelled_ids": e.Host().CancelledOf(req.CallIDs)}, nil
	}
	return map[string]bool{"cancelled": e.Host().Cancelled(req.CallID)}, nil
})

// reportRequest is what a running host tool reports (dccflow_call_report): its progress, log
// lines, or both.
type reportRequest struct {
	CallID   uint64          `json:"call_id"`
	Progress *progressReport `json:"progress"`
	Logs     []logReport     `json:"logs"`
	// Dropped counts lines the host logged but did not send (its own throttle).
	Dropped int `json:"dropped"`
}

type progressReport struct {
	Done    *float64 `json:"done"`
	Total   *float64 `json:"total"`
	Message string   `json:"message"`
}

// logReport is one line of a report: a current_call().log line (stream "log", the default),
// or what an in-process tool printed ("stdout", "stderr") or logged with the logging module
// ("log" with level and logger).
type logReport struct {
	Message string          `json:"message"`
	Fields  json.RawMessage `json:"fields"`
	Stream  string          `json:"stream"`
	Level   string          `json:"level"`
	Logger  string          `json:"logger"`
}

var opCallReport = withEngine(func(e *engine.Engine, req *reportRequest) (any, error) {
	var rep flowtype.ToolReport
	if p := req.Progress; p != nil {
		if p.Done == nil {
			return nil, run.Errorf(run.CodeInvalidInput, "progress.done is required (a number ≥ 0)")
		}
		sp := run.StepProgress{Done: *p.Done, Total: p.Total, Message: p.Message}
		if msg := sp.Check(); msg != "" {
			return nil, run.Errorf(run.CodeInvalidInput, "%s", msg)
		}
		rep.Progress = &sp
	}
	for i, l := range req.Logs {
		f := bytes.TrimSpace(l.Fields)
		if len(f) > 0 && f[0] != '{' && string(f) != "null" {
			return nil, run.Errorf(run.CodeInvalidInput, "logs[%d].fields must be a JSON object", i)
		}
		if l.Stream != "" && !run.ValidStream(l.Stream) {
			return nil, run.Errorf(run.CodeInvalidInput, "logs[%d].stream is %q; use \"stdout\", \"stderr\" or \"log\" (the default)", i, l.Stream)
		}
		line := run.LogLineOf(l.Message, f)
		if l.Stream != "" {
			line.Stream = l.Stream
		}
		line.Level = run.Clip(l.Level, run.MaxLogLevelBytes)
		line.Logger = run.Clip(l.Logger, run.MaxLogLoggerBytes)
		rep.Logs = append(rep.Logs, line)
	}
	if req.Dropped < 0 {
		return nil, run.Errorf(run.CodeInvalidInput, "dropped must be ≥ 0")
	}
	rep.Dropped = req.Dropped
	return map[string]bool{"accepted": e.Host().Report(req.CallID, rep)}, nil
})

type eventsRequest struct {
	AfterSeq  uint64 `json:"after_seq"`
	Max       *int   `json:"max"`
	TimeoutMs int64  `json:"timeout_ms"`
	RunID     string `json:"run_id"`
}

var opEventsNext = withEngine(func(e *engine.Engine, req *eventsRequest) (any, error) {
	var evs []run.Event
	if req.Max == nil || *req.Max > 0 {
		max := 256
		if req.Max != nil {
			max = *req.Max
		}
		var err error
		evs, err = e.PollEvents(context.Background(), engine.EventQuery{FromSeq: req.AfterSeq + 1, RunID: req.RunID, Max: max}, millis(req.TimeoutMs))
		if err != nil {
			return nil, err
		}
	}
	last, err := e.LastSeq(context.Background())
	if err != nil {
		return nil, err
	}
	if evs == nil {
		evs = []run.Event{}
	}
	return map[string]any{"events": evs, "last_seq": last}, nil
})

type resumeRequest struct {
	RunID string `json:"run_id"`
	// By names who resumes the run, for its resume history (ResumeOptions.By).
	By string `json:"by"`
	engine.ResumeOptions
}

var opRunResume = withEngine(func(e *engine.Engine, req *resumeRequest) (any, error) {
	if err := required("run_id", req.RunID); err != nil {
		return nil, err
	}
	req.ResumeOptions.By = req.By
	id, err := e.Resume(context.Background(), req.RunID, req.ResumeOptions)
	if err != nil {
		return nil, err
	}
	return map[string]string{"run_id": id}, nil
})
