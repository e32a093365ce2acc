// Package template parses and renders the {{ path }} placeholders of workflow
// specs.
//
// A template is a string in which every "{{ path }}" is a placeholder and
// everything else is literal text. Spaces, tabs and newlines are allowed just
// inside the braces. A path is root(.name | [n])*: root and name match
// [A-Za-z_][A-Za-z0-9_-]* and n is a non-negative decimal integer.
// There is no escape for a literal "{{"; a "}}" outside a placeholder is
// literal text.
//
// A string that is exactly one placeholder (a "whole" template) renders to the
// referenced value with its JSON type kept; placeholders embedded in text are
// stringified (see [Stringify]). Rendered output is never parsed again.
//
// Values follow encoding/json's default decoding: map[string]any, []any,
// string, float64, bool and nil; integer types and json.Number are accepted
// too. The package keeps no global state and is safe for concurrent use.
package template

import (
	"strconv"
	"strings"
)

// SyntaxError reports a malformed template.
type SyntaxError struct {
	// Offset is the byte offset, in the template string, of the "{{" that
	// opens the malformed placeholder (0 for a template starting with it).
	Offset int
	// Msg describes the problem, e.g. `unclosed "{{"`.
	Msg string
}

// Error returns, e.g., `malformed template at offset 4: unclosed "{{"`.
func (e *SyntaxError) Error() string {
	return "malformed template at offset " + strconv.Itoa(e.Offset) + ": " + e.Msg
}

// Template is a parsed template. It is immutable and safe for concurrent use.
// The zero value is the empty literal template.
type Template struct {
	src   string
	parts []part // literal text and placeholders in source order; empty text is omitted
	refs  []Ref  // the placeholders' refs in source order
	size  int    // total length of the literal text, a hint for Render
}

// part is either literal text (ref < 0) or the placeholder refs[ref].
type part struct {
	text string
	ref  int
}

// Parse parses s. The error, if any, is a *SyntaxError naming the first
// malformed placeholder: an unclosed "{{", an empty "{{ }}", a nested "{{"
// inside a placeholder, or a bad path such as "a..b", "a[x]", "1a" or "a b".
// The empty string is a valid literal template.
func Parse(s string) (*Template, error) {
	t := &Template{src: s}
	if n := strings.Count(s, "{{"); n > 0 {
		t.parts = make([]part, 0, 2*n+1)
		t.refs = make([]Ref, 0, n)
	}
	rest, off := s, 0
	for {
		open := strings.Index(rest, "{{")
		if open < 0 {
			t.addText(rest)
			return t, nil
		}
		t.addText(rest[:open])
		start := off + open
		body := rest[open+2:]
		end := strings.Index(body, "}}")
		if end < 0 {
			return nil, &SyntaxError{Offset: start, Msg: `unclosed "{{"`}
		}
		inner := body[:end]
		if strings.Contains(inner, "{{") {
			return nil, &SyntaxError{Offset: start, Msg: `nested "{{" inside a placeholder`}
		}
		ref, err := parseRef(trimBlank(inner))
		if err != nil {
			return nil, &SyntaxError{Offset: start, Msg: err.Error()}
		}
		t.parts = append(t.parts, part{ref: len(t.refs)})
		t.refs = append(t.refs, ref)
		consumed := open + 2 + end + 2
		rest, off = rest[consumed:], off+consumed
	}
}

func (t *Template) addText(s string) {
	if s == "" {
		return
	}
	t.parts = append(t.parts, part{text: s, ref: -1})
	t.size += len(s)
}

// Source returns the string the template was parsed from.
func (t *Template) Source() string { return t.src }

// Refs returns the placeholders' refs in source order, one per placeholder
// (a path used twice appears twice). It returns nil for a literal template.
// The returned slice is a copy; the Refs' Path slices are shared and must
// not be modified.
func (t *Template) Refs() []Ref {
	if len(t.refs) == 0 {
		return nil
	}
	out := make([]Ref, len(t.refs))
	copy(out, t.refs)
	return out
}

// IsLiteral reports whether the template has no placeholder.
func (t *Template) IsLiteral() bool { return len(t.refs) == 0 }

// IsWhole reports whether the template is exactly one placeholder with no
// text around it. Blanks inside the braces are allowed ("{{ a }}" is whole);
// blanks outside are text (" {{a}}" is not whole).
func (t *Template) IsWhole() bool { return len(t.parts) == 1 && t.parts[0].ref >= 0 }

// Render evaluates the template, calling resolve once per placeholder (a nil
// resolve resolves every ref to nil).
//
// A literal template returns its source string. A whole template returns
// resolve's value unchanged, so its JSON type is kept (nil for a missing
// value). Otherwise the result is a string in which every placeholder is
// replaced by [Stringify] of its value (nil becomes "").
func (t *Template) Render(resolve func(Ref) any) any {
	switch {
	case len(t.refs) == 0:
		return t.src
	case t.IsWhole():
		if resolve == nil {
			return nil
		}
		return resolve(t.refs[0])
	}
	var b strings.Builder
	b.Grow(t.size + 16*len(t.refs))
	var scratch [64]byte
	for _, p := range t.parts {
		switch {
		case p.ref < 0:
			b.WriteString(p.text)
		case resolve == nil:
		default:
			v := resolve(t.refs[p.ref])
			if s, ok := v.(string); ok {
				b.WriteString(s)
			} else {
				b.Write(AppendText(scratch[:0], v))
			}
		}
	}
	return b.String()
}

// ContainsPlaceholder reports whether s contains "{{". It is a cheap
// pre-check: a string without "{{" is a literal template.
func ContainsPlaceholder(s string) bool { return strings.Contains(s, "{{") }

// trimBlank trims the blanks allowed just inside the braces.
func trimBlank(s string) string { return strings.Trim(s, " \t\r\n") }
