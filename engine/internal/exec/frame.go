package exec

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/dcc-flow/dcc-flow/engine/internal/template"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// result is the in-memory record of a finished step instance, as the run document shows it.
// It is immutable once published in a frame slot, except for the lazy decoding of raw.
type result struct {
	status   run.StepStatus
	fileRefs []any
	attempts int
	// raw is the output as JSON (nil for steps without output). output is its decoded value;
	// when lazy, it is decoded from raw on first use (large foreach outputs are only decoded
	// when a template or JSONPath reads them).
	raw    []byte
	lazy   bool
	once   sync.Once
	output any
}

func (r *result) value() any {
	if r.lazy {
		r.once.Do(func() { r.output, _ = spec.DecodeValue(r.raw) })
	}
	return r.output
}

// view is the steps.<id> object of the run document.
func (r *result) view() map[string]any {
	if r == nil {
		return nil
	}
	var refs any
	if r.fileRefs != nil {
		refs = r.fileRefs
	}
	return map[string]any{"output": r.value(), "file_refs": refs, "status": string(r.status), "attempts": float64(r.attempts)}
}

func (r *result) field(name string) any {
	if r == nil {
		return nil
	}
	switch name {
	case "output":
		return r.value()
	case "file_refs":
		if r.fileRefs == nil {
			return nil
		}
		return r.fileRefs
	case "status":
		return string(r.status)
	case "attempts":
		return float64(r.attempts)
	}
	return nil
}

// frame is the scope of step instances: the run (root frame) or one foreach iteration. Inside
// an iteration, the ids of the body's steps resolve to that iteration's instances.
type frame struct {
	r      *runner
	parent *frame
	plan   *framePlan
	slots  []atomic.Pointer[result]
	// iteration frames only:
	as     string // the foreach `as` name
	item   any
	prefix string // instance key prefix, e.g. "per_file[3]."
}

func newRootFrame(r *runner, fp *framePlan) *frame {
	return &frame{r: r, plan: fp, slots: make([]atomic.Pointer[result], len(fp.owned))}
}

// onFailure returns the frame of the on_failure steps: a child of the root frame f, so their
// templates see the run's steps, with keys "on_failure.<id>".
func (f *frame) onFailure(fp *framePlan) *frame {
	return &frame{r: f.r, parent: f, plan: fp, slots: make([]atomic.Pointer[result], len(fp.owned)), prefix: OnFailurePrefix}
}

func (f *frame) iteration(sp *stepPlan, i int, item any) *frame {
	return &frame{
		r: f.r, parent: f, plan: sp.bodyFrame, slots: make([]atomic.Pointer[result], len(sp.bodyFrame.owned)),
		as: sp.st.As, item: item, prefix: f.prefix + sp.id + "[" + strconv.Itoa(i) + "].",
	}
}

func (f *frame) key(sp *stepPlan) string {
	if f.prefix == "" {
		return sp.id
	}
	return f.prefix + sp.id
}

func (f *frame) publish(sp *stepPlan, res *result) { f.slots[sp.slot].Store(res) }

// lookup returns the result of step id as seen from f: the instance in the nearest enclosing
// frame that owns the step, nil when it has not finished (or is not in scope).
func (f *frame) lookup(id string) *result {
	sp := f.r.plan.byID[id]
	if sp == nil {
		return nil
	}
	for fr := f; fr != nil; fr = fr.parent {
		if fr.plan == sp.frame {
			return fr.slots[sp.slot].Load()
		}
	}
	return nil
}

// appendObject appends the iteration's entry of a foreach output as JSON: the output of every
// completed step of the body list, by id.
func (f *frame) appendObject(b []byte) []byte {
	b = append(b, '{')
	first := true
	for _, sp := range f.plan.sortedBody {
		res := f.slots[sp.slot].Load()
		if res == nil || res.status != run.StepCompleted || res.raw == nil {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, sp.id)
		b = append(b, ':')
		b = append(b, res.raw...)
	}
	return append(b, '}')
}

// resolve evaluates a template reference against the run document as seen from f.
func (f *frame) resolve(ref template.Ref) any {
	var v any
	path := ref.Path
	switch ref.Root {
	case "inputs":
		v = f.r.inputs
	case "steps":
		if len(path) == 0 {
			v = f.stepsView()
			break
		}
		if path[0].IsIndex {
			return nil
		}
		res := f.lookup(path[0].Name)
		if len(path) == 1 {
			return res.view()
		}
		if path[1].IsIndex {
			return nil
		}
		v, path = res.field(path[1].Name), path[2:]
	case "item":
		for fr := f; fr != nil; fr = fr.parent {
			if fr.parent != nil && fr.as != "" {
				v = fr.item
				break
			}
		}
	case "env":
		v = f.r.envMap()
	case "trigger":
		v = f.r.trigger
	case "run":
		v = f.r.runDoc
	default:
		v = f.root(ref.Root)
	}
	return walk(v, path)
}

// root resolves a root that is a foreach `as` name, a step id or an input name.
func (f *frame) root(name string) any {
	for fr := f; fr.parent != nil; fr = fr.parent {
		if fr.as == name {
			return fr.item
		}
	}
	if _, ok := f.r.plan.byID[name]; ok {
		if res := f.lookup(name); res != nil {
			return res.value()
		}
		return nil
	}
	return f.r.inputs[name]
}

func walk(v any, path []template.Segment) any {
	for _, s := range path {
		if s.IsIndex {
			a, ok := v.([]any)
			if !ok || s.Index >= len(a) {
				return nil
			}
			v = a[s.Index]
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		if v, ok = m[s.Name]; !ok {
			return nil
		}
	}
	return v
}

// stepsView returns the "steps" object: every step in scope that has finished.
func (f *frame) stepsView() map[string]any {
	out := map[string]any{}
	for fr := f; fr != nil; fr = fr.parent {
		for _, sp := range fr.plan.owned {
			if _, shadowed := out[sp.id]; shadowed {
				continue
			}
			if res := fr.slots[sp.slot].Load(); res != nil {
				out[sp.id] = res.view()
			}
		}
	}
	return out
}

// document materialises the run document for JSONPath: inputs, steps, item and the `as` names,
// env, trigger, run, every step id in scope (its output) and every input name.
func (f *frame) document() map[string]any {
	r := f.r
	doc := map[string]any{
		"inputs": r.inputs, "env": r.envMap(), "trigger": r.trigger, "run": r.runDoc,
	}
	for name, v := range r.inputs {
		doc[name] = v
	}
	steps := f.stepsView()
	doc["steps"] = steps
	for id, v := range steps {
		doc[id] = v.(map[string]any)["output"]
	}
	var item any
	found := false
	for fr := f; fr.parent != nil; fr = fr.parent {
		if fr.as == "" {
			continue // the on_failure frame: no item
		}
		if !found {
			item, found = fr.item, true
		}
		if _, shadowed := doc[fr.as]; !shadowed {
			doc[fr.as] = fr.item
		}
	}
	doc["item"] = item
	return doc
}
