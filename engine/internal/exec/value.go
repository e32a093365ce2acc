package exec

import (
	"fmt"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/expr"
	"github.com/dcc-flow/dcc-flow/engine/internal/template"
)

// valueTmpl is a JSON value with templates inside, parsed once per spec. Rendering copies only
// the parts that hold placeholders; literal parts are shared, read-only.
type valueTmpl struct {
	static bool
	lit    any                // the value itself when static
	str    *template.Template // a string with placeholders
	keys   []string           // an object with placeholders somewhere below
	vals   []*valueTmpl
	elems  []*valueTmpl // an array with placeholders somewhere below; nil for objects
	isArr  bool
}

// compileValue parses every template string in v.
func compileValue(v any) (*valueTmpl, error) {
	switch v := v.(type) {
	case string:
		if !template.ContainsPlaceholder(v) {
			return &valueTmpl{static: true, lit: v}, nil
		}
		t, err := template.Parse(v)
		if err != nil {
			return nil, err
		}
		return &valueTmpl{str: t}, nil
	case map[string]any:
		vt := &valueTmpl{static: true, lit: v}
		for k, e := range v {
			c, err := compileValue(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			vt.keys, vt.vals = append(vt.keys, k), append(vt.vals, c)
			if !c.static {
				vt.static = false
			}
		}
		if vt.static {
			vt.keys, vt.vals = nil, nil
		}
		return vt, nil
	case []any:
		vt := &valueTmpl{static: true, lit: v, isArr: true}
		for i, e := range v {
			c, err := compileValue(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			vt.elems = append(vt.elems, c)
			if !c.static {
				vt.static = false
			}
		}
		if vt.static {
			vt.elems = nil
		}
		return vt, nil
	}
	return &valueTmpl{static: true, lit: v}, nil
}

// render evaluates the value against a resolver.
func (vt *valueTmpl) render(resolve func(template.Ref) any) any {
	switch {
	case vt.static:
		return vt.lit
	case vt.str != nil:
		return vt.str.Render(resolve)
	case vt.isArr:
		out := make([]any, len(vt.elems))
		for i, e := range vt.elems {
			out[i] = e.render(resolve)
		}
		return out
	}
	out := make(map[string]any, len(vt.keys))
	for i, k := range vt.keys {
		out[k] = vt.vals[i].render(resolve)
	}
	return out
}

// selector is a foreach `items` or branch `on` value: a JSONPath over the run document, a
// template, or a literal.
type selector struct {
	path *expr.Path
	val  *valueTmpl
}

func compileSelector(v any) (*selector, error) {
	if s, ok := v.(string); ok && expr.IsPath(s) {
		p, err := expr.Compile(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		return &selector{path: p}, nil
	}
	vt, err := compileValue(v)
	if err != nil {
		return nil, err
	}
	return &selector{val: vt}, nil
}

// eval evaluates the selector as seen from f. A JSONPath is evaluated within the executor's
// limits: past one, eval returns a *limitError for the step to fail with.
func (s *selector) eval(f *frame) (any, error) {
	if s.path != nil {
		return s.path.SelectLimited(f.document(), f.r.x.cfg.Limits.JSONPath)
	}
	return s.val.render(f.resolve), nil
}
