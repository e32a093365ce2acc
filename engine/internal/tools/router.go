package tools

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// BuiltinPrefix starts the names of the built-in tools; hosts cannot register such names.
const BuiltinPrefix = "flow__"

// ToolInfo describes a tool (flowtype.ToolInfo). Its Schema is checked before every call
// (schema.go): a call whose args do not conform fails with kind invalid_input and is not
// retried; its OutputSchema after every successful call.
type ToolInfo = flowtype.ToolInfo

type route struct {
	info ToolInfo
	// fn runs a built-in tool; nil for host tools.
	fn func(ctx context.Context, call Call) (Result, error)
	// blocking built-ins may ignore ctx, so they run in their own goroutine and are abandoned
	// when ctx ends.
	blocking bool
	sem      chan struct{} // nil = unlimited
	schemas  *toolSchemas  // nil = no schema to check
}

// Router maps tool names to the code that runs them: built-in Go tools, host tools (queued on
// the Host for the host process to pull) and, for tool_remote steps, a RemoteCaller. It is safe
// for concurrent use; the call path takes no lock.
type Router struct {
	host   *Host
	remote RemoteCaller
	// dry, when set (NewDryRouter), takes every call, tool and tool_remote alike: nothing
	// registered is called.
	dry    Caller
	mu     sync.Mutex // serialises registrations
	routes atomic.Pointer[map[string]*route]
	// queue, when set (SetQueue), takes the calls of tools not registered here that another
	// engine hosts, and of remotes this engine does not have that another engine has (the
	// durable queue of a shared database, docs/operations/cluster.md).
	queue atomic.Pointer[queueRoute]
	// local names the remotes RemoteCaller serves (SetRemoteNames); nil (a Router on which
	// SetRemoteNames was never called: one built directly, as in tests) = every name.
	local map[string]bool
}

type queueRoute struct {
	caller  Caller
	hosts   func(tool string) bool
	remotes func(remote string) bool
}

// Adopter is a queue Caller (SetQueue) that can take over a call left in flight on the queue
// (Call.Adopt): Adopt waits for the outcome of such a call and reports true, or reports false
// at once when there is none (then the call is made as usual).
type Adopter interface {
	Adopt(ctx context.Context, call Call) (Result, bool, error)
}

// adopt runs call.Adopt: the outcome of the queued call it takes over, if any.
func (r *Router) adopt(ctx context.Context, call Call) (Result, bool, error) {
	if !call.Adopt || call.Queued {
		return Result{}, false, nil
	}
	q := r.queue.Load()
	if q == nil {
		return Result{}, false, nil
	}
	a, ok := q.caller.(Adopter)
	if !ok {
		return Result{}, false, nil
	}
	return a.Adopt(ctx, call)
}

// SetQueue makes the router send a call of a tool not registered here to caller when hosts
// says another engine hosts it, and a tool_remote or pooled call of a remote not named by
// SetRemoteNames to caller when remotes says another engine has it (with Call.DCC the remote;
// the tool-call queue of a shared database, docs/operations/cluster.md). A call with Call.Queued set
// (claimed from that queue) is never sent to it again.
func (r *Router) SetQueue(caller Caller, hosts func(tool string) bool, remotes func(remote string) bool) {
	r.queue.Store(&queueRoute{caller: caller, hosts: hosts, remotes: remotes})
}

// SetRemoteNames names the remotes the RemoteCaller serves, before any call: a call of
// another remote goes to the queue (SetQueue) when another engine has it, else, PoolOptional,
// in-process; any other call of it still goes to the RemoteCaller, which refuses a name it
// does not serve. engine.Open always calls it, with the names of its config's remotes (none:
// an empty list, so then HasRemoteNamed is false for every name). On a Router where it was
// never called (one built directly, as in tests) the RemoteCaller serves every name.
func (r *Router) SetRemoteNames(names []string) {
	r.local = make(map[string]bool, len(names))
	for _, n := range names {
		r.local[n] = true
	}
}

// HasRemoteNamed reports whether this engine's RemoteCaller serves the remote name: there is
// a RemoteCaller, and SetRemoteNames named name or was never called.
func (r *Router) HasRemoteNamed(name string) bool {
	return r.remote != nil && (r.local == nil || r.local[name])
}

// NewRouter returns a router with the built-in tools, a fresh Host, and remote (may be nil: then
// tool_remote calls fail). c is the clock flow__sleep sleeps on.
func NewRouter(c clock.Clock, remote RemoteCaller) *Router {
	r := &Router{host: NewHost(), remote: remote}
	r.host.clock = c
	routes := map[string]*route{}
	for _, b := range builtins(c) {
		routes[b.info.Name] = b
	}
	r.routes.Store(&routes)
	return r
}

// NewDryRouter returns a router for a dry run: every tool and tool_remote call, of any name,
// known or not, goes to dry, which must answer at once without side effects (a fixture). No
// built-in, host or remote tool is ever called through it; its Host is never pulled from.
func NewDryRouter(dry Caller) *Router {
	r := &Router{host: NewHost(), dry: dry}
	routes := map[string]*route{}
	r.routes.Store(&routes)
	return r
}

// Host returns the queue host tools are pulled from.
func (r *Router) Host() *Host { return r.host }

// HasRemote reports whether a RemoteCaller is configured.
func (r *Router) HasRemote() bool { return r.remote != nil }

// RegisterHost registers (or replaces) a host tool. The name must match ^[A-Za-z0-9_-]{1,64}$
// and not start with "flow__"; the lane is "main" or "worker" ("" means "main");
// MaxConcurrent ≥ 0 (0 = no limit); Schema and OutputSchema, when set, must be JSON Schema
// documents (schema.go), compiled here once. Errors have code invalid_request.
func (r *Router) RegisterHost(info ToolInfo) error {
	if !validToolName(info.Name) {
		return run.Errorf(run.CodeInvalidRequest, "tool name %q is not valid: it must match ^[A-Za-z0-9_-]{1,64}$", info.Name)
	}
	if strings.HasPrefix(info.Name, BuiltinPrefix) {
		return run.Errorf(run.CodeInvalidRequest, "tool name %q: the %s prefix is reserved for built-in tools", info.Name, BuiltinPrefix)
	}
	if info.Lane == "" {
		info.Lane = LaneMain
	}
	if !IsLane(info.Lane) {
		return run.Errorf(run.CodeInvalidRequest, "tool %s: lane must be %q or %q; got %q", info.Name, LaneMain, LaneWorker, info.Lane)
	}
	if info.MaxConcurrent < 0 {
		return run.Errorf(run.CodeInvalidRequest, "tool %s: max_concurrent must be ≥ 0 (0 = no limit); got %d", info.Name, info.MaxConcurrent)
	}
	schemas, err := compileToolSchemas(info)
	if err != nil {
		return err
	}
	info.Builtin = false
	rt := &route{info: info, schemas: schemas}
	if info.MaxConcurrent > 0 {
		rt.sem = make(chan struct{}, info.MaxConcurrent)
	}
	r.update(func(m map[string]*route) { m[info.Name] = rt })
	return nil
}

// UnregisterHost removes a host tool and reports whether it was registered. Calls already
// queued stay queued.
func (r *Router) UnregisterHost(name string) bool {
	found := false
	r.update(func(m map[string]*route) {
		if rt, ok := m[name]; ok && !rt.info.Builtin {
			delete(m, name)
			found = true
		}
	})
	return found
}

func (r *Router) update(fn func(map[string]*route)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make(map[string]*route, len(*r.routes.Load())+1)
	for k, v := range *r.routes.Load() {
		next[k] = v
	}
	fn(next)
	r.routes.Store(&next)
}

// Resources returns the resources each call of the tool registered under name holds
// (ToolInfo.Resources), nil when none or no such tool. The map is the registration's: read it only.
func (r *Router) Resources(name string) map[string]int {
	if rt, ok := (*r.routes.Load())[name]; ok {
		return rt.info.Resources
	}
	return nil
}

// Lookup returns the tool registered under name.
func (r *Router) Lookup(name string) (ToolInfo, bool) {
	rt, ok := (*r.routes.Load())[name]
	if !ok {
		return ToolInfo{}, false
	}
	return rt.info, true
}

// Tools lists every registered tool, sorted by name.
func (r *Router) Tools() []ToolInfo {
	m := *r.routes.Load()
	out := make([]ToolInfo, 0, len(m))
	for _, rt := range m {
		out = append(out, rt.info)
	}
	slices.SortFunc(out, func(a, b ToolInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Inline reports whether a call of the named tool runs to its end in the caller's goroutine
// without waiting for anything: a built-in that does not block (flow__echo, flow__fail). Host
// tools, blocking built-ins and unknown names are not inline. Every call of a dry router
// (NewDryRouter) is inline.
func (r *Router) Inline(name string) bool {
	if r.dry != nil {
		return true
	}
	rt, ok := (*r.routes.Load())[name]
	return ok && rt.fn != nil && !rt.blocking && rt.sem == nil
}

// ToHost reports whether calls of the named tool go to the Host (a registered host tool): the
// Host times their attempts from when a host thread pulls them (Call.Timeout) and calls
// Call.Started then.
func (r *Router) ToHost(name string) bool {
	if r.dry != nil {
		return false
	}
	rt, ok := (*r.routes.Load())[name]
	return ok && rt.fn == nil
}

// Call runs a tool step attempt: a built-in in this goroutine (blocking built-ins in their own
// goroutine, abandoned when ctx ends), a host tool through the Host. A per-tool max_concurrent
// limit is waited for first (the wait ends with ctx). An unknown tool is ErrUnknownTool. When
// ctx ends first, the error is ctx.Err() (context.Cause(ctx) says why); it is not the cause
// itself because context.Cause takes a lock every call of a cancelled run would contend for.
//
// A host tool registered with a schema has its args checked first (a call that does not
// conform is never made: a Final invalid_input failure), and with an output_schema its output
// checked after (invalid_output).
func (r *Router) Call(ctx context.Context, call Call) (Result, error) {
	if r.dry != nil {
		return r.dry.Call(ctx, call)
	}
	rt, ok := (*r.routes.Load())[call.Tool]
	if !ok || rt.fn == nil { // a built-in is never queued: nothing to adopt
		if res, adopted, err := r.adopt(ctx, call); adopted || err != nil {
			return res, err
		}
	}
	if !ok {
		if q := r.queue.Load(); q != nil && !call.Queued && q.hosts(call.Tool) {
			return q.caller.Call(ctx, call)
		}
		return Result{}, fmt.Errorf("%w %q", ErrUnknownTool, call.Tool)
	}
	if rt.schemas != nil {
		if res, ok := rt.schemas.checkArgs(call); !ok {
			return res, nil
		}
		res, err := r.call(ctx, rt, call)
		if err != nil {
			return res, err
		}
		return rt.schemas.checkOutput(call, res), nil
	}
	return r.call(ctx, rt, call)
}

func (r *Router) call(ctx context.Context, rt *route, call Call) (Result, error) {
	if rt.sem != nil {
		select {
		case rt.sem <- struct{}{}:
			defer func() { <-rt.sem }()
		case <-ctx.Done():
			return Result{NotStarted: true}, ctx.Err() // waited for a max_concurrent slot: never began
		}
	}
	switch {
	case rt.fn == nil:
		return r.host.Call(ctx, rt.info.Lane, call)
	case rt.blocking:
		return abandonable(ctx, func() (Result, error) { return rt.fn(ctx, call) })
	default:
		return rt.fn(ctx, call)
	}
}

// CallRemote runs a tool_remote attempt through the RemoteCaller. The call is abandoned when
// ctx ends, whether or not the caller honours it. A pooled call (Call.Pooled) of a tool also
// registered here as a host tool with schemas is checked against them, as Call does: the pool
// serves the same tool.
//
// A call of a remote this engine does not have goes to the queue when another attached engine
// has it (SetQueue); else a PoolOptional call runs in-process (Call), as when no pool exists.
// Any other such call goes to the RemoteCaller, which refuses it (code not_found); on a shared
// database (SetQueue) the refusal says that no engine attached to it has the remote either,
// and how to give it one (nowhere).
func (r *Router) CallRemote(ctx context.Context, call Call) (Result, error) {
	if r.dry != nil {
		return r.dry.Call(ctx, call)
	}
	if res, ok, err := r.adopt(ctx, call); ok || err != nil {
		return res, err
	}
	var queue Caller
	nowhere := false // a shared database where no engine, this one included, has the remote
	if !r.HasRemoteNamed(call.DCC) {
		q := r.queue.Load()
		shared := q != nil && !call.Queued && q.remotes != nil
		if shared && q.remotes(call.DCC) {
			queue = q.caller
		} else if call.PoolOptional {
			call.DCC, call.Pooled, call.PoolOptional, call.Adopt = "", false, false, false // adopt looked already
			return r.Call(ctx, call)
		}
		nowhere = queue == nil && shared
	}
	if queue == nil && r.remote == nil {
		err := fmt.Errorf("%w: tool_remote %s/%s", ErrNoRemote, call.DCC, call.Tool)
		if nowhere {
			err = fmt.Errorf("%w: %s", err, r.nowhere(call.DCC))
		}
		return Result{}, err
	}
	if call.Reporter != nil {
		ctx = WithReporter(ctx, call.Reporter)
	}
	var schemas *toolSchemas
	if call.Pooled {
		if rt, ok := (*r.routes.Load())[call.Tool]; ok {
			schemas = rt.schemas
		}
	}
	if res, ok := schemas.checkArgs(call); !ok {
		return res, nil
	}
	var res Result
	var err error
	if queue != nil {
		res, err = queue.Call(ctx, call)
	} else {
		res, err = abandonable(ctx, func() (Result, error) { return r.remote.CallRemote(ctx, call.DCC, call.Tool, call.Args) })
		var re *run.Error
		if nowhere && errors.As(err, &re) && re.Code == run.CodeNotFound {
			err = &run.Error{Code: re.Code, Message: r.nowhere(call.DCC), Details: re.Details, Err: err}
		}
	}
	if err != nil {
		return res, err
	}
	return schemas.checkOutput(call, res), nil
}

// nowhere is the message of a call of remote name on a shared database when neither this
// engine nor any engine attached to it has that remote (the one that had it when the run was
// submitted may have stopped since).
func (r *Router) nowhere(name string) string {
	mine := "no remotes"
	if len(r.local) > 0 {
		mine = "remotes: " + strings.Join(slices.Sorted(maps.Keys(r.local)), ", ")
	}
	return fmt.Sprintf("neither this engine (%s) nor any engine attached to the database has remote %q now; "+
		"add %q to the remotes of an engine's config, or start a worker that has it: "+
		"dcc-flow worker --db <database URL> --remotes FILE", mine, name, name)
}

// abandonable runs fn in its own goroutine and returns its result, or ctx.Err() as soon as ctx
// ends; fn then finishes on its own and its result is dropped. A panic in fn
// becomes a ToolError of kind "internal".
func abandonable(ctx context.Context, fn func() (Result, error)) (Result, error) {
	type out struct {
		res Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- out{res: Result{Error: &ToolError{Kind: KindInternal, Message: fmt.Sprintf("the tool panicked: %v", p),
					Trace: string(debug.Stack())}}}
			}
		}()
		res, err := fn()
		ch <- out{res, err}
	}()
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

func validToolName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
