// Package expr evaluates the JSONPath expressions of workflow specs (foreach
// items, branch conditions) over the run document, and defines how values
// are tested for truth and iterated.
//
// Paths follow RFC 9535, implemented by github.com/theory/jsonpath. Values
// follow encoding/json's default decoding (map[string]any, []any, string,
// float64, bool, nil); other integer types and json.Number are accepted.
// Evaluation is bounded (Limits: nodes held and work done), whatever the
// path and the document, and a query inside a filter may multiply the
// nodes it visits at most once (Compile refuses more).
// Everything here is safe for concurrent use and never panics.
package expr

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/theory/jsonpath"
	"github.com/theory/jsonpath/spec"
)

// SyntaxError reports a JSONPath that does not compile.
type SyntaxError struct {
	// Expr is the expression as given to Compile.
	Expr string
	// Pos is the 1-based byte position of the problem in Expr, or 0 when the
	// parser does not give one (e.g. for an unexpected end of input).
	Pos int
	// Msg describes the problem, e.g. "unexpected eof".
	Msg string
	err error // the parser's error, if any
}

// Error returns, e.g., `invalid JSONPath "$.a[": unexpected eof at position 5`.
func (e *SyntaxError) Error() string {
	s := "invalid JSONPath " + strconv.Quote(e.Expr) + ": " + e.Msg
	if e.Pos > 0 {
		s += " at position " + strconv.Itoa(e.Pos)
	}
	return s
}

// Unwrap returns the parser's error (which matches jsonpath.ErrPathParse),
// or nil when Compile rejected the expression itself.
func (e *SyntaxError) Unwrap() error { return e.err }

// Path is a compiled JSONPath. It is immutable and safe for concurrent use.
type Path struct {
	src     string
	q       *jsonpath.Path
	filters map[*spec.FilterSelector]filterCost // the filters of the path's segments
}

// blank is the set of blank characters RFC 9535 allows between tokens.
const blank = " \t\n\r"

// Compile compiles s, an RFC 9535 JSONPath. Blanks around s are ignored; the
// rest must start with "$" (the empty string and "@.x" are errors). Errors
// are *SyntaxError with the position, relative to s, when the parser gives
// one. Compile never panics.
func Compile(s string) (p *Path, err error) {
	trimmed := strings.TrimLeft(s, blank)
	lead := len(s) - len(trimmed)
	trimmed = strings.TrimRight(trimmed, blank)
	if !strings.HasPrefix(trimmed, "$") {
		pos := lead + 1
		if trimmed == "" {
			pos = 0
		}
		return nil, &SyntaxError{Expr: s, Pos: pos, Msg: `must start with "$"`}
	}
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, &SyntaxError{Expr: s, Msg: fmt.Sprint("internal parser error: ", r)}
		}
	}()
	q, err := pathParser().Parse(trimmed)
	if err != nil {
		return nil, newSyntaxError(s, lead, err)
	}
	p = &Path{src: trimmed, q: q}
	if err := p.checkFilters(); err != nil {
		return nil, &SyntaxError{Expr: s, Msg: err.Error()}
	}
	return p, nil
}

// newSyntaxError turns the parser's "jsonpath: <msg> at position <n>" into a
// SyntaxError whose Pos counts from the start of the untrimmed expression.
func newSyntaxError(expr string, lead int, err error) *SyntaxError {
	msg := strings.TrimPrefix(err.Error(), jsonpath.ErrPathParse.Error()+": ")
	pos := 0
	if i := strings.LastIndex(msg, " at position "); i >= 0 {
		if n, convErr := strconv.Atoi(msg[i+len(" at position "):]); convErr == nil && n > 0 {
			msg, pos = msg[:i], n+lead
		}
	}
	return &SyntaxError{Expr: expr, Pos: pos, Msg: msg, err: err}
}

// String returns the expression as compiled, without surrounding blanks.
func (p *Path) String() string { return p.src }

// Select evaluates p against doc (normally the run document) and returns
// nil when p selects no node, the node's value when it selects exactly one,
// and a []any of the values, in document order, when it selects several.
// A single selected array is returned as is, not wrapped: "$.list.files"
// gives the files array, while "$.list.files[*].path" gives a string when
// there is one file. Array elements come in array order; members of an
// object selected by "*", ".." or a filter come in an unspecified order
// that changes from call to call (RFC 9535 leaves it open; Go maps are
// unordered). Select evaluates within the default Limits and never panics:
// past a limit, or should the JSONPath library panic on some input, Select
// returns nil. SelectLimited tells those cases apart.
func (p *Path) Select(doc any) any {
	v, _ := p.SelectLimited(doc, Limits{})
	return v
}

// RootName returns the first member name when p starts with a child segment
// holding a single name selector: "list" for "$.list.files", "$['list']"
// and `$["list"][0]`. It returns ok=false for "$", "$[0]", "$..x", "$.*",
// "$['a','b']" and filters.
func (p *Path) RootName() (name string, ok bool) {
	segs := p.q.Query().Segments()
	if len(segs) == 0 || segs[0].IsDescendant() {
		return "", false
	}
	sels := segs[0].Selectors()
	if len(sels) != 1 {
		return "", false
	}
	n, ok := sels[0].(spec.Name)
	return string(n), ok
}

// IsPath reports whether s looks like a JSONPath: its first character that
// is not a space, tab, CR or LF is '$'. It does not check the syntax.
func IsPath(s string) bool {
	return strings.HasPrefix(strings.TrimLeft(s, blank), "$")
}
