package exec

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/template"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// plan is the compiled, immutable form of a spec: parsed templates, compiled JSONPaths,
// dependency graphs, and the slot every step's result takes in its frame. It is built once per
// spec hash and shared by every run of that spec.
type plan struct {
	root      *listPlan
	rootFrame *framePlan
	// handler is the on_failure list (nil when the spec has none), in a frame of its own whose
	// parent is the root frame.
	handler      *listPlan
	handlerFrame *framePlan
	byID         map[string]*stepPlan
	tools        []string     // the tools of tool steps, sorted, unique
	remotes      []RemoteTool // the tools of tool_remote steps, sorted, unique
}

// RemoteTool is a tool of a tool_remote step, or of a tool step routed to a pool (DCC is the
// pool).
type RemoteTool struct {
	DCC, Tool string
	// Optional: a step's own `pool:` that runs in-process when no engine has the pool
	// (Config.PoolFor).
	Optional bool
	// Step is the id of a step that calls it (the first in id order).
	Step string
}

// framePlan describes a frame: the run itself, or one iteration of a foreach. A frame owns the
// steps of its list and of the parallel and branch steps inside it, but not the bodies of nested
// foreach steps, which have frames of their own.
type framePlan struct {
	owned []*stepPlan // in document order; a step's slot is its index here
	// body is the frame's step list; sortedBody its steps by id, whose outputs make up an
	// iteration's object in a foreach output.
	body       *listPlan
	sortedBody []*stepPlan
}

type stepPlan struct {
	st      *spec.Step
	id      string
	kind    spec.Kind
	frame   *framePlan // the owning frame
	slot    int
	timeout time.Duration     // the step's, or for tool kinds its defaults' (spec.Defaults.Apply)
	retry   *spec.RetryPolicy // tool kinds: the step's, or its defaults'; nil = no retry

	args    *valueTmpl // tool, tool_remote; workflow: its inputs
	pool    string     // tool: the remote its calls go to (Config.PoolFor), "" = in-process
	poolOpt bool       // pool is optional: in-process when no engine has it
	idem    *template.Template
	auto    bool // idempotency_key: auto
	// reads and writes are the step's declared files (templates of paths and globs);
	// cacheKey its cache's extra key part, nil when none (assets.go).
	reads, writes []*template.Template
	cacheKey      *valueTmpl
	sel           *selector          // foreach items, branch on
	prompt        *template.Template // approve

	body      *listPlan  // foreach body, parallel branches
	bodyFrame *framePlan // foreach
	then, els *listPlan  // branch

	// subtree is the step and every step of its frame nested under it (parallel and branch
	// children, recursively), in document order: what is skipped with it.
	subtree []*stepPlan

	// staticArgs is the attempt record's JSON of args without placeholders (attempt.go),
	// encoded once when the tool's schema marks nothing secret.
	staticArgs atomic.Pointer[[]byte]
}

type listPlan struct {
	steps      []*stepPlan
	deps       [][]int // indexes each step waits for
	dependents [][]int
	linear     bool // every step waits exactly for the one before it: run in order, inline
}

// planCache holds compiled plans by spec hash.
type planCache struct {
	mu       sync.Mutex
	plans    map[string]*plan
	poolFor  func(*spec.Step) (string, bool) // Config.PoolFor
	defaults spec.Defaults                   // Config.Defaults
}

// maxCachedPlans bounds the cache; past it, the cache starts over.
const maxCachedPlans = 256

func (c *planCache) get(s *spec.Spec) (*plan, error) {
	c.mu.Lock()
	p, ok := c.plans[s.Hash()]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := compilePlan(s, c.poolFor, c.defaults)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.plans == nil || len(c.plans) >= maxCachedPlans {
		c.plans = map[string]*plan{}
	}
	c.plans[s.Hash()] = p
	c.mu.Unlock()
	return p, nil
}

type compiler struct {
	byID     map[string]*stepPlan
	spec     *spec.Spec
	defaults spec.Defaults // the engine's
}

func compilePlan(s *spec.Spec, poolFor func(*spec.Step) (string, bool), defaults spec.Defaults) (*plan, error) {
	c := &compiler{byID: map[string]*stepPlan{}, spec: s, defaults: defaults}
	root := &framePlan{}
	lp, err := c.list(s.Steps, root, false)
	if err != nil {
		return nil, err
	}
	root.body = lp
	p := &plan{root: lp, rootFrame: root, byID: c.byID}
	if len(s.OnFailure) > 0 {
		hf := &framePlan{}
		if p.handler, err = c.list(s.OnFailure, hf, false); err != nil {
			return nil, err
		}
		hf.body, p.handlerFrame = p.handler, hf
	}
	for _, sp := range c.byID {
		if sp.kind == spec.KindTool && poolFor != nil {
			sp.pool, sp.poolOpt = poolFor(sp.st)
			sp.poolOpt = sp.poolOpt && sp.pool != ""
		}
		switch {
		case sp.pool != "":
			p.remotes = append(p.remotes, RemoteTool{DCC: sp.pool, Tool: sp.st.Tool, Optional: sp.poolOpt, Step: sp.id})
		case sp.kind == spec.KindTool:
			p.tools = append(p.tools, sp.st.Tool)
		case sp.kind == spec.KindToolRemote:
			p.remotes = append(p.remotes, RemoteTool{DCC: sp.st.DCC, Tool: sp.st.Tool, Step: sp.id})
		}
	}
	slices.Sort(p.tools)
	p.tools = slices.Compact(p.tools)
	slices.SortFunc(p.remotes, func(a, b RemoteTool) int {
		if c := strings.Compare(a.DCC, b.DCC); c != 0 {
			return c
		}
		if c := strings.Compare(a.Tool, b.Tool); c != 0 {
			return c
		}
		if a.Optional != b.Optional {
			if a.Optional {
				return 1
			}
			return -1
		}
		return strings.Compare(a.Step, b.Step)
	})
	p.remotes = slices.CompactFunc(p.remotes, func(a, b RemoteTool) bool {
		return a.DCC == b.DCC && a.Tool == b.Tool && a.Optional == b.Optional
	})
	return p, nil
}

func (c *compiler) list(steps []*spec.Step, fp *framePlan, parallel bool) (*listPlan, error) {
	lp := &listPlan{steps: make([]*stepPlan, len(steps))}
	for i, st := range steps {
		sp, err := c.step(st, fp)
		if err != nil {
			return nil, err
		}
		lp.steps[i] = sp
	}
	if parallel {
		lp.deps = explicitDependencies(steps)
	} else {
		lp.deps = spec.Dependencies(steps)
	}
	lp.dependents = make([][]int, len(steps))
	lp.linear = !parallel || len(steps) <= 1
	for i, ds := range lp.deps {
		for _, d := range ds {
			lp.dependents[d] = append(lp.dependents[d], i)
		}
		if i == 0 && len(ds) != 0 || i > 0 && (len(ds) != 1 || ds[0] != i-1) {
			lp.linear = false
		}
	}
	if parallel && len(steps) > 1 {
		lp.linear = false
	}
	return lp, nil
}

// explicitDependencies is spec.Dependencies for the children of a parallel step, which all start
// at once unless they declare depends_on.
func explicitDependencies(steps []*spec.Step) [][]int {
	deps := spec.Dependencies(steps)
	for i, st := range steps {
		if !st.HasDependsOn {
			deps[i] = nil
		}
	}
	return deps
}

func (c *compiler) step(st *spec.Step, fp *framePlan) (*stepPlan, error) {
	sp := &stepPlan{st: st, id: st.ID, kind: st.Kind, frame: fp, slot: len(fp.owned)}
	fp.owned = append(fp.owned, sp)
	c.byID[st.ID] = sp
	timeoutSecs, retry := c.spec.Defaults.Apply(st, c.defaults)
	if timeoutSecs > 0 {
		sp.timeout = time.Duration(timeoutSecs * float64(time.Second))
	}
	sp.retry = retry
	fail := func(field string, err error) (*stepPlan, error) {
		return nil, fmt.Errorf("step %q: %s: %w", st.ID, field, err)
	}
	var err error
	switch st.Kind {
	case spec.KindTool, spec.KindToolRemote:
		args := map[string]any(st.Args)
		if args == nil {
			args = map[string]any{}
		}
		if sp.args, err = compileValue(args); err != nil {
			return fail("args", err)
		}
		switch key := st.Policy.IdempotencyKey; key {
		case "":
		case spec.AutoIdempotencyKey:
			sp.auto = true
		default:
			if sp.idem, err = template.Parse(key); err != nil {
				return fail("idempotency_key", err)
			}
		}
		for _, p := range st.Reads {
			t, err := template.Parse(p)
			if err != nil {
				return fail("reads", err)
			}
			sp.reads = append(sp.reads, t)
		}
		for _, p := range st.Writes {
			t, err := template.Parse(p)
			if err != nil {
				return fail("writes", err)
			}
			sp.writes = append(sp.writes, t)
		}
		if c := st.Policy.Cache; c != nil && c.Key != nil {
			if sp.cacheKey, err = compileValue(c.Key); err != nil {
				return fail("cache.key", err)
			}
		}
	case spec.KindForeach:
		if sp.sel, err = compileSelector(st.Items); err != nil {
			return fail("items", err)
		}
		sp.bodyFrame = &framePlan{}
		if sp.body, err = c.list(st.Steps, sp.bodyFrame, false); err != nil {
			return nil, err
		}
		sp.bodyFrame.body = sp.body
		sp.bodyFrame.sortedBody = slices.Clone(sp.body.steps)
		slices.SortFunc(sp.bodyFrame.sortedBody, func(a, b *stepPlan) int { return strings.Compare(a.id, b.id) })
	case spec.KindParallel:
		if sp.body, err = c.list(st.Steps, fp, true); err != nil {
			return nil, err
		}
	case spec.KindBranch:
		if sp.sel, err = compileSelector(st.On); err != nil {
			return fail("on", err)
		}
		if sp.then, err = c.list(st.Then, fp, false); err != nil {
			return nil, err
		}
		if sp.els, err = c.list(st.Else, fp, false); err != nil {
			return nil, err
		}
	case spec.KindWorkflow:
		inputs := map[string]any(st.Inputs)
		if inputs == nil {
			inputs = map[string]any{}
		}
		if sp.args, err = compileValue(inputs); err != nil {
			return fail("inputs", err)
		}
	case spec.KindApprove:
		if sp.prompt, err = template.Parse(st.Prompt); err != nil {
			return fail("prompt", err)
		}
	default:
		return nil, fmt.Errorf("step %q: unknown kind %q", st.ID, st.Kind)
	}
	sp.subtree = append(sp.subtree, sp)
	for _, l := range []*listPlan{sp.body, sp.then, sp.els} {
		if l == nil || sp.kind == spec.KindForeach {
			continue
		}
		for _, child := range l.steps {
			sp.subtree = append(sp.subtree, child.subtree...)
		}
	}
	return sp, nil
}
