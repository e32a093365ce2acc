package template

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Ref is one placeholder's path, e.g. steps.list.files[0].
type Ref struct {
	// Root is the first identifier, e.g. "inputs", "steps", "file", "list".
	Root string
	// Path is the rest of the path; empty for a bare root such as {{item}}.
	Path []Segment
	// Raw is the path text as written, trimmed of the blanks inside the
	// braces, e.g. "inputs.date". It differs from String only in leading
	// zeros of indexes ("a[007]" is String "a[7]").
	Raw string
}

// Segment is one step of a Ref's path after the root: a member name
// (.name) or an array index ([n]).
type Segment struct {
	// Name is the member name; empty when IsIndex.
	Name string
	// Index is the array index, always >= 0; 0 when !IsIndex.
	Index int
	// IsIndex reports an [n] segment.
	IsIndex bool
}

// String returns the canonical text of r, e.g. `steps.list.files[0]`.
func (r Ref) String() string {
	if len(r.Path) == 0 {
		return r.Root
	}
	var b strings.Builder
	b.WriteString(r.Root)
	for _, s := range r.Path {
		if s.IsIndex {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.Index))
			b.WriteByte(']')
		} else {
			b.WriteByte('.')
			b.WriteString(s.Name)
		}
	}
	return b.String()
}

// Lookup resolves r against a run document: doc[r.Root], then each segment
// in turn. A name selects a member of a map[string]any and an index an
// element of a []any. A nil doc, a missing key, an out-of-range index, or a
// segment applied to a value of the wrong kind (a name on an array, an index
// on an object or a scalar) gives nil. Lookup never panics.
func Lookup(doc map[string]any, r Ref) any {
	v, ok := doc[r.Root]
	if !ok {
		return nil
	}
	for _, s := range r.Path {
		if s.IsIndex {
			a, ok := v.([]any)
			if !ok || s.Index >= len(a) {
				return nil
			}
			v = a[s.Index]
		} else {
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			if v, ok = m[s.Name]; !ok {
				return nil
			}
		}
	}
	return v
}

// parseRef parses the trimmed text inside the braces.
func parseRef(raw string) (Ref, error) {
	if raw == "" {
		return Ref{}, errors.New("empty placeholder")
	}
	fail := func(msg string) (Ref, error) {
		return Ref{}, errors.New("invalid path " + strconv.Quote(raw) + ": " + msg)
	}
	n := identLen(raw)
	if n == 0 {
		return fail(`must start with a letter or "_"`)
	}
	r := Ref{Root: raw[:n], Raw: raw}
	if k := strings.Count(raw[n:], ".") + strings.Count(raw[n:], "["); k > 0 {
		r.Path = make([]Segment, 0, k)
	}
	for i := n; i < len(raw); {
		switch raw[i] {
		case '.':
			n := identLen(raw[i+1:])
			if n == 0 {
				return fail(`expected a name after "."`)
			}
			r.Path = append(r.Path, Segment{Name: raw[i+1 : i+1+n]})
			i += 1 + n
		case '[':
			j := i + 1
			for j < len(raw) && raw[j] >= '0' && raw[j] <= '9' {
				j++
			}
			if j == i+1 || j == len(raw) || raw[j] != ']' {
				return fail(`expected a non-negative integer index in "[...]"`)
			}
			idx, err := strconv.Atoi(raw[i+1 : j])
			if err != nil {
				return fail("index " + raw[i+1:j] + " is too large")
			}
			r.Path = append(r.Path, Segment{Index: idx, IsIndex: true})
			i = j + 1
		default:
			c, _ := utf8.DecodeRuneInString(raw[i:])
			return fail("unexpected " + strconv.QuoteRune(c) + ` (expected "." or "[")`)
		}
	}
	return r, nil
}

// identLen returns the length of the identifier [A-Za-z_][A-Za-z0-9_-]* at
// the start of s, or 0 if there is none.
func identLen(s string) int {
	if s == "" || !(isLetter(s[0]) || s[0] == '_') {
		return 0
	}
	i := 1
	for i < len(s) && (isLetter(s[i]) || s[i] == '_' || s[i] == '-' || (s[i] >= '0' && s[i] <= '9')) {
		i++
	}
	return i
}

func isLetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }
