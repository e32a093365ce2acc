package template

import (
	"slices"
	"strconv"
)

// ValueError reports a malformed template found inside a nested JSON value.
type ValueError struct {
	// Path locates the offending string relative to the value passed in:
	// "" for the value itself, "scene", "list[2]", "a.b", "[0].x".
	// Map keys are written as is, without quoting.
	Path string
	// Err is the template's syntax error; its Offset is within that string.
	Err *SyntaxError
}

// Error returns, e.g., `scene: malformed template at offset 0: unclosed "{{"`,
// or only the syntax error when Path is "".
func (e *ValueError) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

// Unwrap returns the *SyntaxError.
func (e *ValueError) Unwrap() error { return e.Err }

// RefsIn parses every string inside v, recursing through map[string]any and
// []any (map keys are not templates), and returns all refs in a
// deterministic order: maps are walked in sorted key order, slices in index
// order. It returns nil refs for a value without placeholders. On the first
// malformed string in that order it stops and returns a *ValueError.
func RefsIn(v any) ([]Ref, error) {
	var refs []Ref
	err := walkRefs(v, "", &refs)
	if err != nil {
		return nil, err
	}
	return refs, nil
}

func walkRefs(v any, path string, refs *[]Ref) error {
	switch v := v.(type) {
	case string:
		if !ContainsPlaceholder(v) {
			return nil
		}
		t, err := Parse(v)
		if err != nil {
			return &ValueError{Path: path, Err: err.(*SyntaxError)}
		}
		*refs = append(*refs, t.refs...)
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := walkRefs(v[k], joinKey(path, k), refs); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := walkRefs(e, joinIndex(path, i), refs); err != nil {
				return err
			}
		}
	}
	return nil
}

// RenderValue returns a deep copy of v in which every string is rendered as a
// template (see [Template.Render]); map[string]any and []any are copied,
// other values are returned as is, and a nil map or slice stays nil. A string that is one whole placeholder is
// replaced by the resolved value itself (type kept, not copied); strings
// without "{{" are kept without parsing. Rendered output is never parsed
// again. A nil v returns nil.
//
// On a malformed string RenderValue returns nil and the same *ValueError as
// RefsIn(v), so the error is deterministic whatever the map order.
func RenderValue(v any, resolve func(Ref) any) (any, error) {
	out, ok := render(v, resolve)
	if !ok {
		_, err := RefsIn(v)
		return nil, err
	}
	return out, nil
}

func render(v any, resolve func(Ref) any) (any, bool) {
	switch v := v.(type) {
	case string:
		if !ContainsPlaceholder(v) {
			return v, true
		}
		t, err := Parse(v)
		if err != nil {
			return nil, false
		}
		return t.Render(resolve), true
	case map[string]any:
		if v == nil {
			return v, true
		}
		m := make(map[string]any, len(v))
		for k, e := range v {
			r, ok := render(e, resolve)
			if !ok {
				return nil, false
			}
			m[k] = r
		}
		return m, true
	case []any:
		if v == nil {
			return v, true
		}
		a := make([]any, len(v))
		for i, e := range v {
			r, ok := render(e, resolve)
			if !ok {
				return nil, false
			}
			a[i] = r
		}
		return a, true
	}
	return v, true
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func joinIndex(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}
