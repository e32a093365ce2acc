// Package spec is the workflow spec of dcc-flow (docs/reference/spec.md): the model, decoding from YAML or
// JSON with line:column for every node, validation that reports every problem at once, the
// canonical JSON form and the spec hash.
//
// A *Spec is immutable once Parse returns it and is safe for concurrent use.
package spec

import (
	"strings"
)

// Kind is the kind of a step.
type Kind string

// Step kinds.
const (
	KindTool       Kind = "tool"
	KindToolRemote Kind = "tool_remote"
	KindForeach    Kind = "foreach"
	KindParallel   Kind = "parallel"
	KindBranch     Kind = "branch"
	KindApprove    Kind = "approve"
	// KindWorkflow runs a catalog workflow as a child run and outputs its outputs (docs/reference/spec.md,
	// "workflow").
	KindWorkflow Kind = "workflow"
)

// Kinds lists every step kind, in documentation order.
var Kinds = []Kind{KindTool, KindToolRemote, KindForeach, KindParallel, KindBranch, KindApprove, KindWorkflow}

// OnAnyFail says what a foreach or parallel step does when one of its iterations or branches fails.
type OnAnyFail string

const (
	// Abort (the default) cancels the siblings still running and fails the step.
	Abort OnAnyFail = "abort"
	// Continue lets the others finish; the step fails at the end if any failed.
	Continue OnAnyFail = "continue"
)

// Scope is the scope of an idempotency key.
type Scope string

const (
	// ScopeWorkflow (the default) keys are unique within one run (and survive its resume).
	ScopeWorkflow Scope = "workflow"
	// ScopeGlobal keys are unique across every run of the engine's store.
	ScopeGlobal Scope = "global"
)

// AutoIdempotencyKey as an idempotency_key means "the hash of the tool name and rendered args".
const AutoIdempotencyKey = "auto"

// Reserved template roots. They cannot be step ids, input names or foreach `as` names.
var ReservedRoots = []string{"inputs", "steps", "item", "env", "trigger", "run"}

// IsReservedRoot reports whether name is a reserved template root.
func IsReservedRoot(name string) bool {
	for _, r := range ReservedRoots {
		if r == name {
			return true
		}
	}
	return false
}

// Spec is a parsed workflow spec.
type Spec struct {
	Name        string
	Description string
	Inputs      []Input // in declaration order; names are unique
	Steps       []*Step // top-level step list
	// Defaults are the spec's policy defaults for its tool and tool_remote steps (docs/reference/spec.md,
	// "Defaults"); the zero value sets none.
	Defaults Defaults
	// OnFailure is the failure handler: steps run once when the run fails (docs/reference/spec.md,
	// "on_failure"); nil = none. Their ids are unique with the other steps' ids.
	OnFailure []*Step
	// Priority is the priority of the spec's runs when they wait for a scarce resource
	// (docs/guide/resources.md): MinPriority to MaxPriority, higher served first; 0 (the default)
	// when not given. A run started with a priority of its own uses that one.
	Priority int
	// FairShare is the template of the key the spec's runs share a round-robin turn by when
	// their steps wait for a scarce resource (docs/guide/resources.md), rendered when a run
	// starts from its inputs, trigger, run and env ("{{inputs.show}}"); "" = each run tree is a
	// key of its own.
	FairShare string

	fairShareAt  Pos    // the position of `fair_share`, for problems
	priorityAt   Pos    // the position of `priority`, for problems; zero when not given
	priorityText string // `priority` as written, for range messages

	defaultsAt *Step // positions and texts of the defaults fields, for problems
	canonical  []byte
	hash       string
	problems   []Problem // semantic problems found by Parse (errors only)
	warnings   []Problem
	source     string
}

// Defaults are policy defaults for tool and tool_remote steps: a step's own field comes first,
// then the spec's Defaults, then the engine config's (engine.Config.Defaults), then none.
// Each field is taken whole: a step's `retry` replaces the default retry, it is not merged.
type Defaults struct {
	// TimeoutSecs is the per-attempt deadline of a step without `timeout_secs`; 0 = none.
	TimeoutSecs float64
	// Retry is the retry policy of a step without `retry`; nil = none.
	Retry *RetryPolicy
}

// IsEmpty reports whether d sets nothing.
func (d Defaults) IsEmpty() bool { return d.TimeoutSecs == 0 && d.Retry == nil }

// Apply returns the timeout and retry policy step st runs with under the spec defaults d and,
// after them, the engine defaults engine: st's own fields first. Only tool and tool_remote steps
// take defaults; for other kinds it returns st's own.
func (d Defaults) Apply(st *Step, engine Defaults) (timeoutSecs float64, retry *RetryPolicy) {
	timeoutSecs, retry = st.Policy.TimeoutSecs, st.Policy.Retry
	if st.Kind != KindTool && st.Kind != KindToolRemote {
		return timeoutSecs, retry
	}
	for _, def := range []Defaults{d, engine} {
		if timeoutSecs == 0 {
			timeoutSecs = def.TimeoutSecs
		}
		if retry == nil {
			retry = def.Retry
		}
	}
	return timeoutSecs, retry
}

// Input declares one workflow input.
type Input struct {
	Name        string
	Type        string // string, number, integer, boolean, object, array or any (the default)
	Required    bool
	Default     any // nil when HasDefault is false
	HasDefault  bool
	Format      string // free-form hint such as "date"; "date" and "date-time" are checked at start
	Description string
	Enum        []any // nil = any value
	Pos         Pos
}

// InputTypes lists the accepted input types.
var InputTypes = []string{"string", "number", "integer", "boolean", "object", "array", "any"}

// Step is one step of a spec. Fields that do not apply to its Kind are zero.
type Step struct {
	ID          string
	Kind        Kind
	Description string

	// DependsOn replaces the implicit "after the previous sibling" edge when HasDependsOn is true.
	// An empty DependsOn with HasDependsOn means "start at once".
	DependsOn    []string
	HasDependsOn bool

	// tool and tool_remote.
	Tool string
	DCC  string // tool_remote only: a remote named in the engine config
	// Pool (tool only) runs the call on the engine's worker pool of that name when the engine
	// config has a remote so named, else on another engine's attached to the same PostgreSQL
	// database that has one, and in-process when none has (docs/guide/pools.md, "Routing"); "" =
	// the engine's tool_pools mapping decides.
	Pool string
	Args map[string]any // never nil for tool kinds
	// Reads and Writes (tool and tool_remote) are the files the step reads and writes besides
	// those its tool reports (docs/guide/assets.md): templates of paths or glob patterns
	// (`*`, `?`, `[…]`, `**`), relative to the engine's working directory; nil when not given.
	Reads, Writes []string
	// Resources (tool and tool_remote) are the amounts of the engine's scarce resources
	// (licences, GPUs; engine.Config.Resources, docs/guide/resources.md) one attempt holds while
	// its tool runs, by resource name: 1 to MaxResourceAmount each; nil when not given.
	Resources map[string]int

	// foreach.
	Items       any    // JSONPath string ("$…"), template string or a literal JSON value
	As          string // default "item"
	Concurrency int    // ≥ 1, default 1
	// foreach and parallel.
	OnAnyFail OnAnyFail
	Steps     []*Step // foreach body or parallel branches

	// branch.
	On   any // JSONPath string, template string or literal
	Then []*Step
	Else []*Step

	// approve.
	Prompt string

	// workflow: the catalog name of the child workflow and its inputs (templates, like args;
	// never nil for a workflow step).
	Workflow string
	Inputs   map[string]any

	Policy Policy

	Pos    Pos               // the step's mapping node
	fields map[string]Pos    // position of each field's value, by key
	texts  map[string]string // the text of each numeric policy field as written, by key
}

// Policy is the execution policy of a step. The zero value means no timeout, no retry and no
// idempotency.
type Policy struct {
	// TimeoutSecs is the per-attempt deadline in seconds; 0 means none (a spec cannot say 0).
	TimeoutSecs float64
	// Retry is nil when the step is not retried.
	Retry *RetryPolicy
	// IdempotencyKey is a template, AutoIdempotencyKey, or "" for none.
	IdempotencyKey   string
	IdempotencyScope Scope // ScopeWorkflow when a key is set and no scope is given
	// IdempotencyTTLSecs bounds how long a cached output is used; 0 means no expiry.
	IdempotencyTTLSecs int64
	// Cache is the content cache of the step (`cache: true` or a mapping; docs/guide/assets.md,
	// "Caching"); nil when off.
	Cache *CachePolicy
}

// CachePolicy is a step's `cache`: the step is skipped when a completed attempt had the same
// key (its tool, Version, rendered args, the hashes of the files it read, the environment and
// Key) and the files it wrote still have their recorded hashes.
type CachePolicy struct {
	// Version is the tool's version as the spec gives it; "" = the tool's own (a @task's source
	// hash), or none.
	Version string
	// TTLSecs bounds how long an entry is used; 0 means no expiry.
	TTLSecs int64
	// Key is an extra part of the key (a template, or any JSON value holding templates:
	// `key: ["{{inputs.show}}", "lut-v3"]`); nil when not given.
	Key any
}

// IsEmpty reports whether the policy sets nothing.
func (p Policy) IsEmpty() bool {
	return p.TimeoutSecs == 0 && p.Retry == nil && p.IdempotencyKey == "" && p.IdempotencyTTLSecs == 0
}

// Pos is a 1-based line and column in the spec text; zero when unknown.
type Pos struct {
	Line   int
	Column int
}

// FieldPos returns the position of the value of field key on the step, or the step's position.
func (s *Step) FieldPos(key string) Pos {
	if p, ok := s.fields[key]; ok {
		return p
	}
	return s.Pos
}

// Children returns the nested step lists of s: foreach/parallel Steps, branch Then and Else.
func (s *Step) Children() [][]*Step {
	switch s.Kind {
	case KindForeach, KindParallel:
		return [][]*Step{s.Steps}
	case KindBranch:
		return [][]*Step{s.Then, s.Else}
	}
	return nil
}

// Walk calls fn for every step of the tree, depth-first in document order, with the chain of
// enclosing steps (outermost first): the steps, then the on_failure steps. Returning false stops
// the walk.
func (s *Spec) Walk(fn func(step *Step, parents []*Step) bool) {
	if walkSteps(s.Steps, nil, fn) {
		walkSteps(s.OnFailure, nil, fn)
	}
}

func walkSteps(steps []*Step, parents []*Step, fn func(*Step, []*Step) bool) bool {
	for _, st := range steps {
		if !fn(st, parents) {
			return false
		}
		inner := append(parents[:len(parents):len(parents)], st)
		for _, list := range st.Children() {
			if !walkSteps(list, inner, fn) {
				return false
			}
		}
	}
	return true
}

// StepCount returns the number of steps declared in the whole tree.
func (s *Spec) StepCount() int {
	n := 0
	s.Walk(func(*Step, []*Step) bool { n++; return true })
	return n
}

// Find returns the step with the given id anywhere in the tree, or nil.
func (s *Spec) Find(id string) *Step {
	var found *Step
	s.Walk(func(st *Step, _ []*Step) bool {
		if st.ID == id {
			found = st
			return false
		}
		return true
	})
	return found
}

// Input returns the declared input with the given name.
func (s *Spec) Input(name string) (Input, bool) {
	for _, in := range s.Inputs {
		if in.Name == name {
			return in, true
		}
	}
	return Input{}, false
}

// Canonical returns the canonical JSON form (see docs/reference/c-abi/README.md). The slice must not be modified.
func (s *Spec) Canonical() []byte { return s.canonical }

// Hash returns the lowercase hex sha256 of the canonical JSON.
func (s *Spec) Hash() string { return s.hash }

// Problems returns the semantic validation problems (errors) found when the spec was parsed.
func (s *Spec) Problems() []Problem { return append([]Problem(nil), s.problems...) }

// Warnings returns non-fatal problems, such as a clamped jitter.
func (s *Spec) Warnings() []Problem { return append([]Problem(nil), s.warnings...) }

// Source returns the label given to Parse (usually a file name), or "".
func (s *Spec) Source() string { return s.source }

// Validate returns nil if the spec has no problems, else a *ValidationError with every problem.
func (s *Spec) Validate() error {
	if len(s.problems) == 0 {
		return nil
	}
	return &ValidationError{Code: CodeValidationFailed, Problems: s.Problems(), Source: s.source}
}

// String returns the spec's name, or "(unnamed workflow)".
func (s *Spec) String() string {
	if strings.TrimSpace(s.Name) == "" {
		return "(unnamed workflow)"
	}
	return s.Name
}
