package spec

import (
	"errors"
	"fmt"
	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
	"regexp"
	"sort"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/expr"
	"github.com/dcc-flow/dcc-flow/engine/internal/template"
)

var (
	toolNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	// Step ids, input names and foreach `as` names are template roots.
	identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)
)

// IsValidToolName reports whether name matches ^[A-Za-z0-9_-]{1,64}$.
func IsValidToolName(name string) bool { return toolNameRe.MatchString(name) }

// validator checks the semantic rules of a decoded spec.
type validator struct {
	s         *Spec
	ps        problems
	stepIDs   map[string]*Step // every step id in the tree → its first declaration
	handlers  map[string]bool  // the ids of the on_failure steps
	inputs    map[string]bool
	stepNames []string // the step ids, sorted; built at the first unknown name
	// suggestWork is what is left of the "did you mean" budget: a spec with thousands of unknown
	// names is still validated in time linear in its size.
	suggestWork int
}

// maxSuggestWork bounds the work of "did you mean" in one validation: each candidate looked at
// costs 1, each edit distance computed the product of the two lengths (about 20 ms in all).
// Past it, problems carry no hint.
const maxSuggestWork = 5_000_000

// scope is the template scope of a step: the foreach `as` names of its enclosing foreach steps.
type scope struct {
	asNames []string
	handler bool // inside on_failure: on_failure step ids may be referred to
}

func validate(s *Spec) *problems {
	v := &validator{s: s, stepIDs: map[string]*Step{}, handlers: map[string]bool{}, inputs: map[string]bool{}, suggestWork: maxSuggestWork}
	for _, in := range s.Inputs {
		v.inputs[in.Name] = true
		v.checkInput(in)
	}
	if len(s.Steps) == 0 {
		v.ps.add(Problem{Code: CodeNoSteps, Line: 1, Column: 1, Path: "steps",
			Message: "the spec has no steps; add a `steps:` list with at least one step"})
	}
	v.checkDefaults(s)
	v.checkPriority(s)
	v.checkFairShare(s)
	v.collectIDs(s.Steps, "steps")
	v.collectIDs(s.OnFailure, "on_failure")
	walkSteps(s.OnFailure, nil, func(st *Step, _ []*Step) bool {
		v.handlers[st.ID] = true
		if st.Kind == KindApprove {
			v.add(CodeInvalidValue, st, "kind", "on_failure", "an on_failure step cannot be an approve step: the failure handler of a failed run does not wait for a person; notify them with a tool step instead")
		}
		return true
	})
	v.stepList(s.Steps, "steps", scope{})
	v.stepList(s.OnFailure, "on_failure", scope{handler: true})
	return &v.ps
}

// checkDefaults checks the top-level `defaults` as the same fields of a step are checked.
func (v *validator) checkDefaults(s *Spec) {
	h := s.defaultsAt
	if h == nil {
		h = &Step{fields: map[string]Pos{}}
	}
	if _, set := h.texts["timeout_secs"]; set || s.Defaults.TimeoutSecs != 0 {
		v.checkRange(h, CodeInvalidPolicy, "timeout_secs", "defaults.timeout_secs", s.Defaults.TimeoutSecs, MinTimeoutSecs, MaxTimeoutSecs,
			"seconds, 1 ms to 365 days; remove it for no default timeout")
	}
	if r := s.Defaults.Retry; r != nil {
		v.retry(h, "defaults.retry", r)
	}
}

func (v *validator) add(code string, st *Step, field, path, msg string) {
	pos := st.Pos
	if field != "" {
		pos = st.FieldPos(field)
	}
	v.ps.add(problemAt(code, pos, path, st.ID, msg))
}

func (v *validator) checkInput(in Input) {
	path := "inputs." + in.Name
	pre := fmt.Sprintf("input %q: ", in.Name)
	switch {
	case !identRe.MatchString(in.Name):
		v.ps.add(Problem{Code: CodeInvalidValue, Path: path, Line: in.Pos.Line, Column: in.Pos.Column,
			Message: pre + "input names must start with a letter or _ and contain only letters, digits, _ and - (at most 64)"})
	case IsReservedRoot(in.Name):
		v.ps.add(Problem{Code: CodeReservedStepID, Path: path, Line: in.Pos.Line, Column: in.Pos.Column,
			Message: pre + fmt.Sprintf("%q is a reserved template root (%s); rename the input", in.Name, strings.Join(ReservedRoots, ", "))})
	}
	if !contains(InputTypes, in.Type) {
		hint := "use one of: " + strings.Join(InputTypes, ", ")
		if sug := yamltext.Suggest(in.Type, InputTypes); sug != "" {
			hint = fmt.Sprintf("did you mean %q?", sug)
		}
		v.ps.add(Problem{Code: CodeInvalidValue, Path: path + ".type", Line: in.Pos.Line, Column: in.Pos.Column, Hint: hint,
			Message: pre + fmt.Sprintf("unknown type %q; %s", in.Type, hint)})
		return
	}
	if in.HasDefault && in.Default != nil {
		if err := CheckInputValue(in, in.Default); err != nil {
			v.ps.add(Problem{Code: CodeInvalidValue, Path: path + ".default", Line: in.Pos.Line, Column: in.Pos.Column,
				Message: pre + "the default " + err.Error()})
		}
	}
}

// collectIDs checks every step id of the tree and records the first declaration of each.
func (v *validator) collectIDs(steps []*Step, path string) {
	for i, st := range steps {
		p := fmt.Sprintf("%s[%d]", path, i)
		_, hasID := st.fields["id"]
		switch {
		case !hasID:
			hint := "add `id: <name>`; ids name the step in templates, events and the run record"
			pr := problemAt(CodeMissingField, st.Pos, p+".id", "", p+": missing field `id`; "+hint)
			pr.Hint = hint
			v.ps.add(pr)
		case st.ID == "":
			v.add(CodeEmptyStepID, st, "id", p+".id", "the step id is empty; give the step a name such as `export_fbx`")
		case !identRe.MatchString(st.ID):
			v.add(CodeInvalidStepID, st, "id", p+".id", fmt.Sprintf("step id %q is not valid: it must start with a letter or _ and contain only letters, digits, _ and - (at most 64), so templates can refer to it", st.ID))
		case IsReservedRoot(st.ID):
			v.add(CodeReservedStepID, st, "id", p+".id", fmt.Sprintf("step id %q is a reserved template root (%s); rename the step", st.ID, strings.Join(ReservedRoots, ", ")))
		case v.inputs[st.ID]:
			v.add(CodeReservedStepID, st, "id", p+".id", fmt.Sprintf("step id %q is also an input name; templates could not tell them apart, so rename one", st.ID))
		default:
			if first, dup := v.stepIDs[st.ID]; dup {
				v.add(CodeDuplicateStepID, st, "id", p+".id", fmt.Sprintf("duplicate step id %q (first declared at line %d); step ids must be unique across the whole spec", st.ID, first.Pos.Line))
			} else {
				v.stepIDs[st.ID] = st
			}
		}
		for _, child := range childLists(st, p) {
			v.collectIDs(child.steps, child.path)
		}
	}
}

type childList struct {
	steps []*Step
	path  string
}

func childLists(st *Step, path string) []childList {
	switch st.Kind {
	case KindForeach, KindParallel:
		return []childList{{st.Steps, path + ".steps"}}
	case KindBranch:
		return []childList{{st.Then, path + ".then"}, {st.Else, path + ".else"}}
	}
	return nil
}

func (v *validator) stepList(steps []*Step, path string, sc scope) {
	v.steps(steps, path, sc, Dependencies(steps))
}

// steps checks a step list whose dependency edges are deps (Dependencies or BranchDependencies).
func (v *validator) steps(steps []*Step, path string, sc scope, deps [][]int) {
	for i, st := range steps {
		v.step(st, fmt.Sprintf("%s[%d]", path, i), sc)
	}
	v.dependencies(steps, path, deps)
}

func (v *validator) step(st *Step, path string, sc scope) {
	switch st.Kind {
	case KindTool, KindToolRemote:
		if st.Kind == KindToolRemote {
			if _, ok := st.fields["dcc"]; !ok {
				v.missing(st, path, "dcc", "add `dcc: <remote name>` naming a remote MCP server of the engine config")
			} else if !identRe.MatchString(st.DCC) {
				v.add(CodeInvalidValue, st, "dcc", path+".dcc", fmt.Sprintf("`dcc` %q is not a valid remote name (letters, digits, _ and -)", st.DCC))
			}
		}
		if _, ok := st.fields["pool"]; ok && !identRe.MatchString(st.Pool) {
			v.add(CodeInvalidValue, st, "pool", path+".pool", fmt.Sprintf("`pool` %q is not a valid remote name (letters, digits, _ and -)", st.Pool))
		}
		if _, ok := st.fields["tool"]; !ok {
			v.missing(st, path, "tool", "add `tool: <tool name>`")
		} else if !IsValidToolName(st.Tool) {
			v.add(CodeInvalidToolName, st, "tool", path+".tool", fmt.Sprintf("tool name %q is not valid: it must match ^[A-Za-z0-9_-]{1,64}$ (e.g. maya__export_fbx)", st.Tool))
		}
		v.templatesIn(st, "args", path+".args", st.Args, sc)
		v.policy(st, path, sc)
	case KindForeach:
		if _, ok := st.fields["items"]; !ok {
			v.missing(st, path, "items", "add `items:` with a JSONPath such as \"$.list.files\", a template or a list")
		} else {
			v.selector(st, "items", path+".items", st.Items, sc)
		}
		if st.As != "item" {
			switch {
			case !identRe.MatchString(st.As):
				v.add(CodeInvalidValue, st, "as", path+".as", fmt.Sprintf("`as` name %q is not valid: it must start with a letter or _ and contain only letters, digits, _ and -", st.As))
			case IsReservedRoot(st.As):
				v.add(CodeReservedStepID, st, "as", path+".as", fmt.Sprintf("`as` name %q is a reserved template root; choose another name", st.As))
			case v.stepIDs[st.As] != nil:
				v.add(CodeReservedStepID, st, "as", path+".as", fmt.Sprintf("`as` name %q is also a step id; templates could not tell them apart, so rename one", st.As))
			case v.inputs[st.As]:
				v.add(CodeReservedStepID, st, "as", path+".as", fmt.Sprintf("`as` name %q is also an input name; rename one", st.As))
			}
		}
		v.checkRange(st, CodeInvalidValue, "concurrency", path+".concurrency", float64(st.Concurrency), 1, MaxConcurrency,
			"1 = one item at a time")
		v.onAnyFail(st, path)
		if len(st.Steps) == 0 {
			v.add(CodeNoSteps, st, "steps", path+".steps", "a foreach step needs a `steps:` list with at least one step to run per item")
		}
		inner := scope{asNames: append(sc.asNames[:len(sc.asNames):len(sc.asNames)], st.As)}
		v.stepList(st.Steps, path+".steps", inner)
	case KindParallel:
		v.onAnyFail(st, path)
		if len(st.Steps) == 0 {
			v.add(CodeNoSteps, st, "steps", path+".steps", "a parallel step needs a `steps:` list with at least one branch")
		}
		v.steps(st.Steps, path+".steps", sc, BranchDependencies(st.Steps))
	case KindBranch:
		if _, ok := st.fields["on"]; !ok {
			v.missing(st, path, "on", "add `on:` (or `condition:`) with a JSONPath such as \"$.qc.passed\" or a template")
		} else {
			v.selector(st, "on", path+".on", st.On, sc)
		}
		v.stepList(st.Then, path+".then", sc)
		v.stepList(st.Else, path+".else", sc)
	case KindApprove:
		v.templatesIn(st, "prompt", path+".prompt", st.Prompt, sc)
	case KindWorkflow:
		if _, ok := st.fields["workflow"]; !ok {
			v.missing(st, path, "workflow", "add `workflow: <name>` naming a workflow of the catalog")
		} else if strings.TrimSpace(st.Workflow) == "" {
			v.add(CodeInvalidValue, st, "workflow", path+".workflow", "`workflow` must name a workflow of the catalog; got an empty name")
		}
		v.templatesIn(st, "inputs", path+".inputs", st.Inputs, sc)
		v.policy(st, path, sc)
	}
	v.timeout(st, path)
}

func (v *validator) missing(st *Step, path, field, hint string) {
	p := problemAt(CodeMissingField, st.Pos, path+"."+field, st.ID, fmt.Sprintf("a %s step needs `%s`; %s", st.Kind, field, hint))
	p.Hint = hint
	v.ps.add(p)
}

func (v *validator) onAnyFail(st *Step, path string) {
	if st.OnAnyFail != Abort && st.OnAnyFail != Continue {
		v.add(CodeInvalidValue, st, "on_any_fail", path+".on_any_fail", fmt.Sprintf("`on_any_fail` must be \"abort\" or \"continue\"; got %q", st.OnAnyFail))
	}
}

func (v *validator) timeout(st *Step, path string) {
	if _, set := st.texts["timeout_secs"]; set || st.Policy.TimeoutSecs != 0 {
		v.checkRange(st, CodeInvalidPolicy, "timeout_secs", path+".timeout_secs", st.Policy.TimeoutSecs, MinTimeoutSecs, MaxTimeoutSecs,
			"seconds, 1 ms to 365 days; remove it for no timeout")
	}
}

func (v *validator) policy(st *Step, path string, sc scope) {
	p := &st.Policy
	if r := p.Retry; r != nil {
		v.retry(st, path+".retry", r)
	}
	v.idempotency(st, path, sc)
	v.assets(st, path, sc)
	v.resources(st, path)
}

// checkPriority checks the top-level `priority`: MinPriority to MaxPriority.
func (v *validator) checkPriority(s *Spec) {
	if s.Priority >= MinPriority && s.Priority <= MaxPriority {
		return
	}
	text := s.priorityText
	if text == "" {
		text = fmt.Sprint(s.Priority)
	}
	v.ps.add(Problem{Code: CodeInvalidValue, Path: "priority", Line: s.priorityAt.Line, Column: s.priorityAt.Column,
		Message: fmt.Sprintf("priority: `priority` must be a whole number between %d and %d (higher is served first; 0 = the default); got %s", MinPriority, MaxPriority, text)})
}

// fairShareRoots are the template roots `fair_share` may use: what a run has when it starts.
var fairShareRoots = []string{"inputs", "trigger", "run", "env"}

// checkFairShare checks the top-level `fair_share`: a template whose references are to the
// run's inputs (declared ones, when the spec declares inputs), trigger, run and env only.
func (v *validator) checkFairShare(s *Spec) {
	if s.FairShare == "" {
		return
	}
	at := func(msg string) {
		v.ps.add(Problem{Code: CodeInvalidTemplate, Path: "fair_share", Line: s.fairShareAt.Line, Column: s.fairShareAt.Column,
			Message: "fair_share: " + msg})
	}
	t, err := template.Parse(s.FairShare)
	if err != nil {
		at(fmt.Sprintf("`fair_share` is a malformed template: %v", err))
		return
	}
	for _, r := range t.Refs() {
		switch {
		case !contains(fairShareRoots, r.Root):
			at(fmt.Sprintf("`fair_share` may refer to %s only (it is rendered when the run starts, before any step); got {{%s}}",
				strings.Join(fairShareRoots, ", "), r.Raw))
		case r.Root == "inputs" && len(v.s.Inputs) > 0 && len(r.Path) > 0 && !r.Path[0].IsIndex && !v.inputs[r.Path[0].Name]:
			at(fmt.Sprintf("`fair_share` refers to {{%s}}, but no input named %q is declared", r.Raw, r.Path[0].Name))
		}
	}
}

// resources checks the names and amounts of a tool step's `resources`, in name order. Whether
// the engine declares the names is checked when a run starts (Spec.CheckResources).
func (v *validator) resources(st *Step, path string) {
	for _, name := range sortedKeys(st.Resources) {
		key := "resources." + name
		if !identRe.MatchString(name) {
			v.add(CodeInvalidValue, st, key, path+"."+key, fmt.Sprintf("resource name %q is not valid: it must start with a letter or _ and contain only letters, digits, _ and - (at most 64), as the engine's `resources` names (e.g. houdini)", name))
			continue
		}
		v.checkRange(st, CodeInvalidValue, key, path+"."+key, float64(st.Resources[name]), 1, MaxResourceAmount,
			"the units one attempt holds while its tool runs; remove the resource to ask for none")
	}
}

// sortedKeys returns the keys of m in byte order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// assets checks `reads`, `writes` and `cache` of a tool step.
func (v *validator) assets(st *Step, path string, sc scope) {
	for _, f := range []struct {
		key   string
		paths []string
	}{{"reads", st.Reads}, {"writes", st.Writes}} {
		for i, p := range f.paths {
			if strings.TrimSpace(p) == "" {
				v.add(CodeInvalidValue, st, f.key, fmt.Sprintf("%s.%s[%d]", path, f.key, i), fmt.Sprintf("`%s` entries must be non-empty paths or glob patterns", f.key))
			}
		}
		if f.paths != nil {
			list := make([]any, len(f.paths))
			for i, p := range f.paths {
				list[i] = p
			}
			v.templatesIn(st, f.key, path+"."+f.key, list, sc)
		}
	}
	c := st.Policy.Cache
	if c == nil {
		return
	}
	if st.Policy.IdempotencyKey != "" {
		v.add(CodeInvalidPolicy, st, "cache", path+".cache", "a step takes `cache` (skipped when its inputs' content is unchanged) or `idempotency_key` (skipped when a key was seen), not both: remove one")
	}
	v.checkRange(st, CodeInvalidPolicy, "cache.ttl_secs", path+".cache.ttl_secs", float64(c.TTLSecs), 0, MaxIdempotencyTTLSecs,
		"seconds, up to 10 years; 0 = no expiry")
	if c.Key != nil {
		v.templatesIn(st, "cache.key", path+".cache.key", c.Key, sc)
	}
}

// retry checks a retry policy; st holds the positions of its fields, rp is its path.
func (v *validator) retry(st *Step, rp string, r *RetryPolicy) {
	v.checkRange(st, CodeInvalidPolicy, "retry.max_attempts", rp+".max_attempts", float64(r.MaxAttempts), 1, MaxRetryAttempts,
		"1 = no retry")
	switch r.Backoff {
	case BackoffFixed, BackoffLinear, BackoffExponential:
	default:
		v.add(CodeInvalidPolicy, st, "retry.backoff", rp+".backoff", fmt.Sprintf("`retry.backoff` must be fixed, linear or exponential; got %q", r.Backoff))
	}
	if _, set := st.texts["retry.multiplier"]; set || r.Multiplier != 0 {
		if v.checkRange(st, CodeInvalidPolicy, "retry.multiplier", rp+".multiplier", r.Multiplier, MinMultiplier, MaxMultiplier,
			"the growth factor of exponential backoff; remove it for the default 2") && r.Backoff != BackoffExponential {
			v.add(CodeInvalidPolicy, st, "retry.multiplier", rp+".multiplier", fmt.Sprintf("`retry.multiplier` applies to exponential backoff only; this retry has backoff %q: remove the multiplier or use `backoff: exponential`", r.Backoff))
		}
	}
	delayOK := func(key string, ms int64) bool {
		return v.checkRange(st, CodeInvalidPolicy, key, rp+strings.TrimPrefix(key, "retry"), float64(ms), 0, MaxRetryDelayMs,
			"milliseconds, up to 24 hours")
	}
	initialOK, maxOK := delayOK("retry.initial_delay_ms", r.InitialDelayMs), delayOK("retry.max_delay_ms", r.MaxDelayMs)
	if initialOK && maxOK && r.InitialDelayMs > r.MaxDelayMs {
		v.add(CodeInvalidPolicy, st, "retry.initial_delay_ms", rp+".initial_delay_ms", fmt.Sprintf("`retry.initial_delay_ms` (%d) must be ≤ `retry.max_delay_ms` (%d)", r.InitialDelayMs, r.MaxDelayMs))
	}
	if r.Jitter < 0 || r.Jitter > 1 {
		clamped := min(max(r.Jitter, 0), 1)
		pr := problemAt(CodeJitterClamped, st.FieldPos("retry.jitter"), rp+".jitter", st.ID, fmt.Sprintf("`retry.jitter` %v is outside [0, 1]; using %v", r.Jitter, clamped))
		pr.Severity = SeverityWarning
		v.ps.add(pr)
		r.Jitter = clamped
	}
	for i, k := range r.RetryOn {
		if strings.TrimSpace(k) == "" {
			v.add(CodeInvalidPolicy, st, "retry.retry_on", fmt.Sprintf("%s.retry_on[%d]", rp, i), "`retry.retry_on` entries must be non-empty error kinds such as \"transient\" or \"timeout\"")
		}
	}
}

// idempotency checks the idempotency fields of a tool step.
func (v *validator) idempotency(st *Step, path string, sc scope) {
	p := &st.Policy
	if p.IdempotencyKey != "" && p.IdempotencyKey != AutoIdempotencyKey {
		t, err := template.Parse(p.IdempotencyKey)
		if err != nil {
			v.add(CodeInvalidPolicy, st, "idempotency_key", path+".idempotency_key", fmt.Sprintf("`idempotency_key` is a malformed template: %v", err))
		} else {
			v.refs(st, "idempotency_key", path+".idempotency_key", t.Refs(), sc)
		}
	}
	if p.IdempotencyKey == "" {
		for _, f := range []string{"idempotency_scope", "idempotency_ttl_secs"} {
			if _, ok := st.fields[f]; ok {
				v.add(CodeInvalidPolicy, st, f, path+"."+f, fmt.Sprintf("`%s` needs an `idempotency_key` (a template, or \"auto\")", f))
			}
		}
	}
	if p.IdempotencyKey != "" && p.IdempotencyScope != ScopeWorkflow && p.IdempotencyScope != ScopeGlobal {
		v.add(CodeInvalidPolicy, st, "idempotency_scope", path+".idempotency_scope", fmt.Sprintf("`idempotency_scope` must be \"workflow\" or \"global\"; got %q", p.IdempotencyScope))
	}
	v.checkRange(st, CodeInvalidPolicy, "idempotency_ttl_secs", path+".idempotency_ttl_secs", float64(p.IdempotencyTTLSecs), 0, MaxIdempotencyTTLSecs,
		"seconds, up to 10 years; 0 = no expiry")
}

// selector checks a foreach `items` or branch `on` value: a JSONPath, a template or a literal.
func (v *validator) selector(st *Step, field, path string, val any, sc scope) {
	s, ok := val.(string)
	if !ok || !expr.IsPath(s) {
		v.templatesIn(st, field, path, val, sc)
		return
	}
	p, err := expr.Compile(strings.TrimSpace(s))
	if err != nil {
		v.add(CodeInvalidJSONPath, st, field, path, fmt.Sprintf("`%s` is not a valid JSONPath: %v", field, err))
		return
	}
	if root, ok := p.RootName(); ok {
		v.checkRoot(st, field, path, template.Ref{Root: root, Raw: s}, s, sc)
	}
}

// templatesIn checks every template string inside val.
func (v *validator) templatesIn(st *Step, field, path string, val any, sc scope) {
	refs, err := template.RefsIn(val)
	if err != nil {
		where := path
		var ve *template.ValueError
		if errors.As(err, &ve) && ve.Path != "" {
			where = path + "." + ve.Path
		}
		v.add(CodeInvalidTemplate, st, field, where, fmt.Sprintf("malformed template in `%s`: %v", strings.TrimPrefix(where, stepPathPrefix(where)+"."), errMsg(err)))
		return
	}
	v.refs(st, field, path, refs, sc)
}

func errMsg(err error) string {
	var ve *template.ValueError
	if errors.As(err, &ve) && ve.Err != nil {
		return ve.Err.Error()
	}
	return err.Error()
}

func (v *validator) refs(st *Step, field, path string, refs []template.Ref, sc scope) {
	for _, r := range refs {
		v.checkRoot(st, field, path, r, "{{"+r.Raw+"}}", sc)
	}
}

// checkRoot reports a template or JSONPath whose root is not known in scope.
func (v *validator) checkRoot(st *Step, field, path string, r template.Ref, text string, sc scope) {
	root := r.Root
	switch {
	case root == "steps":
		if len(r.Path) > 0 && !r.Path[0].IsIndex {
			if v.stepIDs[r.Path[0].Name] == nil {
				v.unknownVar(st, field, path, text, fmt.Sprintf("no step has id %q", r.Path[0].Name), r.Path[0].Name, v.sortedStepIDs())
			} else {
				v.handlerRef(st, field, path, text, r.Path[0].Name, sc)
			}
		}
		return
	case v.stepIDs[root] != nil && v.handlers[root] && !sc.handler:
		v.handlerRef(st, field, path, text, root, sc)
		return
	case root == "inputs":
		if len(v.s.Inputs) > 0 && len(r.Path) > 0 && !r.Path[0].IsIndex && !v.inputs[r.Path[0].Name] {
			v.unknownVar(st, field, path, text, fmt.Sprintf("no input named %q is declared", r.Path[0].Name), r.Path[0].Name, v.inputNames())
		}
		return
	case IsReservedRoot(root), v.stepIDs[root] != nil, v.inputs[root], contains(sc.asNames, root):
		return
	}
	v.unknownVar(st, field, path, text, fmt.Sprintf("%q is not an input, a step id, a foreach variable in scope or one of %s", root, strings.Join(ReservedRoots, ", ")), root,
		ReservedRoots, sc.asNames, v.sortedStepIDs(), v.inputNames())
}

// handlerRef reports a reference to on_failure step id from outside on_failure: those steps run
// only after every other step has ended, so their outputs never exist for the others.
func (v *validator) handlerRef(st *Step, field, path, text, id string, sc scope) {
	if sc.handler || !v.handlers[id] {
		return
	}
	msg := fmt.Sprintf("unknown template variable in `%s`: %s: step %q is an on_failure step, which runs only once the run has failed; only other on_failure steps can use its output", field, text, id)
	v.ps.add(problemAt(CodeUnknownTemplateVar, st.FieldPos(field), path, st.ID, msg))
}

func (v *validator) unknownVar(st *Step, field, path, text, why, name string, known ...[]string) {
	msg := fmt.Sprintf("unknown template variable in `%s`: %s: %s", field, text, why)
	hint := ""
	if sug := v.suggest(name, known...); sug != "" {
		hint = fmt.Sprintf("did you mean %q?", sug)
		msg += "; " + hint
	}
	p := problemAt(CodeUnknownTemplateVar, st.FieldPos(field), path, st.ID, msg)
	p.Hint = hint
	v.ps.add(p)
}

// suggest is yamltext.Suggest over the candidate lists in order, within the validator's budget.
func (v *validator) suggest(name string, lists ...[]string) string {
	best, bestD := "", 3
	for _, list := range lists {
		for _, c := range list {
			if v.suggestWork <= 0 {
				return best
			}
			v.suggestWork--
			if len(c)-len(name) > 2 || len(name)-len(c) > 2 { // the distance is at least 3
				continue
			}
			v.suggestWork -= min(len(c), 64) * min(len(name), 64)
			if d := yamltext.EditDistance(name, c); d < bestD && d*2 < len(name)+1 {
				best, bestD = c, d
			}
		}
	}
	return best
}

// sortedStepIDs returns every step id of the spec, sorted (computed once).
func (v *validator) sortedStepIDs() []string {
	if v.stepNames == nil {
		v.stepNames = make([]string, 0, len(v.stepIDs))
		for id := range v.stepIDs {
			v.stepNames = append(v.stepNames, id)
		}
		sort.Strings(v.stepNames)
	}
	return v.stepNames
}

func (v *validator) inputNames() []string {
	out := make([]string, 0, len(v.s.Inputs))
	for _, in := range v.s.Inputs {
		out = append(out, in.Name)
	}
	return out
}

// dependencies checks depends_on within one step list and looks for cycles (Kahn's algorithm).
func (v *validator) dependencies(steps []*Step, path string, deps [][]int) {
	var siblings []string // sorted, built at the first unknown name
	index := make(map[string]int, len(steps))
	for i, st := range steps {
		if _, dup := index[st.ID]; !dup && st.ID != "" {
			index[st.ID] = i
		}
	}
	for i, st := range steps {
		for j, dep := range st.DependsOn {
			if _, ok := index[dep]; ok {
				continue
			}
			dp := fmt.Sprintf("%s[%d].depends_on[%d]", path, i, j)
			msg := fmt.Sprintf("`depends_on` names %q, which is not a step of the same list", dep)
			if v.stepIDs[dep] != nil {
				msg += "; depends_on can only name sibling steps (the enclosing step already orders nested lists)"
			} else {
				if siblings == nil {
					siblings = keys(index)
				}
				if sug := v.suggest(dep, siblings); sug != "" {
					msg += fmt.Sprintf("; did you mean %q?", sug)
				}
			}
			v.add(CodeUnknownDependency, st, "depends_on", dp, msg)
		}
	}
	order := kahn(deps)
	if len(order) == len(steps) {
		return
	}
	cycle := findCycle(deps, order)
	if len(cycle) == 0 {
		return
	}
	names := make([]string, 0, len(cycle)+1)
	implicit := false
	for _, i := range cycle {
		names = append(names, steps[i].ID)
		if !steps[i].HasDependsOn {
			implicit = true
		}
	}
	names = append(names, steps[cycle[0]].ID)
	first := steps[cycle[0]]
	msg := fmt.Sprintf("dependency cycle: %s", strings.Join(names, " → "))
	if implicit {
		msg += " (a step without depends_on runs after the step before it)"
	}
	v.add(CodeCycle, first, "depends_on", fmt.Sprintf("%s[%d].depends_on", path, cycle[0]), msg)
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Dependencies returns, for each step of one step list, the indexes of the siblings it waits for:
// the listed siblings when the step declares depends_on (unknown ids are ignored), else the step
// before it (none for the first). Duplicates are removed; order follows the list.
func Dependencies(steps []*Step) [][]int {
	index := make(map[string]int, len(steps))
	for i, st := range steps {
		if _, dup := index[st.ID]; !dup {
			index[st.ID] = i
		}
	}
	deps := make([][]int, len(steps))
	for i, st := range steps {
		if !st.HasDependsOn {
			if i > 0 {
				deps[i] = []int{i - 1}
			}
			continue
		}
		seen := map[int]bool{}
		for _, d := range st.DependsOn {
			if j, ok := index[d]; ok && !seen[j] {
				seen[j] = true
				deps[i] = append(deps[i], j)
			}
		}
		sort.Ints(deps[i])
	}
	return deps
}

// BranchDependencies is Dependencies for the children of a parallel step: each child is a
// branch that starts at once unless it declares depends_on (there is no implicit edge to the
// previous sibling).
func BranchDependencies(steps []*Step) [][]int {
	deps := Dependencies(steps)
	for i, st := range steps {
		if !st.HasDependsOn {
			deps[i] = nil
		}
	}
	return deps
}

// StepListDependencies returns the dependency edges of the step list held by parent (nil parent
// = the top-level list): BranchDependencies for a parallel step's children, else Dependencies.
func StepListDependencies(parent *Step, steps []*Step) [][]int {
	if parent != nil && parent.Kind == KindParallel {
		return BranchDependencies(steps)
	}
	return Dependencies(steps)
}

// kahn returns a topological order of the nodes it can sort; nodes on or behind a cycle are left out.
func kahn(deps [][]int) []int {
	n := len(deps)
	indeg := make([]int, n)
	dependents := make([][]int, n)
	for i, ds := range deps {
		indeg[i] = len(ds)
		for _, d := range ds {
			dependents[d] = append(dependents[d], i)
		}
	}
	queue := make([]int, 0, n)
	for i := range deps {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	order := make([]int, 0, n)
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		order = append(order, i)
		for _, j := range dependents[i] {
			indeg[j]--
			if indeg[j] == 0 {
				queue = append(queue, j)
			}
		}
	}
	return order
}

// findCycle returns one cycle among the nodes Kahn's algorithm could not order, in execution
// order ("a → b": b waits for a), starting at the step declared first.
func findCycle(deps [][]int, sorted []int) []int {
	done := make([]bool, len(deps))
	for _, i := range sorted {
		done[i] = true
	}
	for start := range deps {
		if done[start] {
			continue
		}
		// Walk dependency edges from an unsorted node; every unsorted node has an unsorted
		// dependency, so the walk must revisit a node: that suffix is a cycle.
		pos := map[int]int{}
		var path []int
		cur := start
		for {
			if p, seen := pos[cur]; seen {
				cyc := path[p:]
				// path follows "depends on" edges; reverse it to read in execution order, then
				// rotate it to start at the step declared first.
				out := make([]int, len(cyc))
				first := 0
				for i := range cyc {
					out[i] = cyc[len(cyc)-1-i]
					if out[i] < out[first] {
						first = i
					}
				}
				return append(out[first:], out[:first]...)
			}
			pos[cur] = len(path)
			path = append(path, cur)
			next := -1
			for _, d := range deps[cur] {
				if !done[d] {
					next = d
					break
				}
			}
			if next < 0 {
				break
			}
			cur = next
		}
		done[start] = true
	}
	return nil
}
