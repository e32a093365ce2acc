package expr

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/theory/jsonpath/spec"
)

// Default limits of one JSONPath evaluation (Limits with zero fields). A spec that selects
// files, shots or QC errors stays far below them: $.list.files over 100,000 files costs 2 units
// of work and gives one node (the array).
const (
	// DefaultMaxResults bounds the nodes an evaluation holds at once: the selection, and the
	// nodes between two segments ("$..*..*" holds, after its first segment, every node of the
	// document). 1,000,000 nodes take about 16 MB.
	DefaultMaxResults = 1_000_000
	// DefaultMaxWork bounds the work of an evaluation, counted in nodes visited by a
	// descendant segment, candidates tested by a filter (plus the nodes a query with "..", "*",
	// a slice or a list inside the filter may visit), and nodes selected. 10,000,000 units take
	// well under a second.
	DefaultMaxWork = 10_000_000
	// MaxResultsCeiling and MaxWorkCeiling are the largest limits the engine config accepts.
	MaxResultsCeiling = 100_000_000
	MaxWorkCeiling    = 1_000_000_000
)

// Limits bound one evaluation of a Path. A zero field means its default; negative fields are
// treated as zero. Evaluation stops as soon as one is exceeded, so memory stays in proportion
// to MaxResults and time to MaxWork whatever the path and the document.
type Limits struct {
	// MaxResults is the most nodes held at once (DefaultMaxResults when 0).
	MaxResults int
	// MaxWork is the most units of work (DefaultMaxWork when 0).
	MaxWork int
}

func (l Limits) withDefaults() Limits {
	if l.MaxResults <= 0 {
		l.MaxResults = DefaultMaxResults
	}
	if l.MaxWork <= 0 {
		l.MaxWork = DefaultMaxWork
	}
	return l
}

// LimitError reports an evaluation stopped by its Limits.
type LimitError struct {
	// Expr is the path as compiled.
	Expr string
	// Limit is "results" (Limits.MaxResults) or "work" (Limits.MaxWork).
	Limit string
	// Max is the value of the limit exceeded.
	Max int
}

// Error returns, e.g., `JSONPath "$..*..*" selects more than 1,000,000 nodes`.
func (e *LimitError) Error() string {
	if e.Limit == "results" {
		return "JSONPath " + strconv.Quote(e.Expr) + " selects more than " + Thousands(e.Max) + " nodes"
	}
	return "JSONPath " + strconv.Quote(e.Expr) + " needs more than " + Thousands(e.Max) + " units of work (nodes visited, tested or selected)"
}

// Thousands formats n with commas: 1000000 → "1,000,000".
func Thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// SelectLimited is Select within lim: it returns the same value, or a *LimitError once the
// evaluation exceeds lim (and the nodes found so far are dropped). A panic of the JSONPath
// library gives an error too.
func (p *Path) SelectLimited(doc any, lim Limits) (any, error) {
	nodes, err := p.nodes(doc, lim)
	if err != nil {
		return nil, err
	}
	switch len(nodes) {
	case 0:
		return nil, nil
	case 1:
		return nodes[0], nil
	}
	return nodes, nil
}

// nodes returns the selected nodes.
func (p *Path) nodes(doc any, lim Limits) (nodes []any, err error) {
	defer func() {
		if r := recover(); r != nil {
			nodes, err = nil, fmt.Errorf("evaluating %s: panic: %v", p.src, r)
		}
	}()
	ev := &evaluator{p: p, root: doc, lim: lim.withDefaults(), rootSize: -1}
	nodes = ev.query()
	if ev.err != nil {
		return nil, ev.err
	}
	return nodes, nil
}

// evaluator evaluates the segments of a path itself, with the library's selectors, so that it
// can count: a descendant segment visits nodes one at a time and a filter tests candidates
// one at a time. The subqueries inside a filter are run by the library; Compile allows at most
// one multiplying segment in each (filterCheck), so a candidate's test costs at most the size
// of the candidate (relative queries) or of the document (absolute ones), which is charged
// before the test.
type evaluator struct {
	p        *Path
	root     any
	lim      Limits
	work     int
	held     int // nodes of the segment being built
	rootSize int // nodes of root, counted once when an absolute filter query needs it; -1 = not yet
	err      error
}

func (ev *evaluator) charge(n int) bool {
	ev.work += n
	if ev.work > ev.lim.MaxWork {
		ev.fail("work", ev.lim.MaxWork)
		return false
	}
	return true
}

func (ev *evaluator) fail(limit string, max int) {
	if ev.err == nil {
		ev.err = &LimitError{Expr: ev.p.src, Limit: limit, Max: max}
	}
}

func (ev *evaluator) query() []any {
	res := []any{ev.root}
	for _, seg := range ev.p.q.Query().Segments() {
		next := make([]any, 0, len(res))
		ev.held = 0
		for _, v := range res {
			if seg.IsDescendant() {
				next = ev.descend(seg, v, next)
			} else {
				next = ev.apply(seg, v, next)
			}
			if ev.err != nil {
				return nil
			}
		}
		res = next
	}
	return res
}

// add appends selected nodes to out, within the limits.
func (ev *evaluator) add(out []any, nodes []any) []any {
	if len(nodes) == 0 {
		return out
	}
	ev.held += len(nodes)
	if ev.held > ev.lim.MaxResults {
		ev.fail("results", ev.lim.MaxResults)
		return out
	}
	if !ev.charge(len(nodes)) {
		return out
	}
	return append(out, nodes...)
}

// apply applies the selectors of seg to v.
func (ev *evaluator) apply(seg *spec.Segment, v any, out []any) []any {
	for _, sel := range seg.Selectors() {
		if !ev.charge(1) {
			return out
		}
		if f, ok := sel.(*spec.FilterSelector); ok {
			out = ev.filter(f, v, out)
		} else {
			out = ev.add(out, sel.Select(v, ev.root))
		}
		if ev.err != nil {
			return out
		}
	}
	return out
}

// filter tests the children of v one at a time, charging each test its cost first.
func (ev *evaluator) filter(f *spec.FilterSelector, v any, out []any) []any {
	cost := ev.p.filterCost(f)
	eachChild(v, func(c any) bool {
		n := cost.static
		if cost.relative != walkNone {
			n += ev.size(c, cost.relative == walkDeep, ev.lim.MaxWork-ev.work)
		}
		if cost.absolute != walkNone {
			if ev.rootSize < 0 {
				ev.rootSize = ev.size(ev.root, cost.absolute == walkDeep, ev.lim.MaxWork)
			}
			n += ev.rootSize
		}
		if !ev.charge(n) {
			return false
		}
		if f.Eval(c, ev.root) {
			out = ev.add(out, []any{c})
		}
		return ev.err == nil
	})
	return out
}

// descend applies seg's selectors to v and to each of its descendants, parents first, as
// RFC 9535 (and the library) order them.
func (ev *evaluator) descend(seg *spec.Segment, v any, out []any) []any {
	if !ev.charge(1) {
		return out
	}
	out = ev.apply(seg, v, out)
	if ev.err != nil {
		return out
	}
	eachChild(v, func(c any) bool {
		if isContainer(c) {
			out = ev.descend(seg, c, out)
		}
		return ev.err == nil
	})
	return out
}

// size counts the nodes of v (v included), stopping once the count passes max. When deep,
// each node counts its depth below v plus one: the library's descendant segment copies a
// node's results once per level on its way up.
func (ev *evaluator) size(v any, deep bool, max int) int {
	n := 1
	var walk func(v any, depth int) bool
	walk = func(v any, depth int) bool {
		eachChild(v, func(c any) bool {
			n++
			if deep {
				n += depth
			}
			return n <= max && walk(c, depth+1)
		})
		return n <= max
	}
	walk(v, 1)
	return n
}

func isContainer(v any) bool {
	switch v.(type) {
	case []any, map[string]any:
		return true
	case nil, string, float64, bool:
		return false
	}
	k := reflect.ValueOf(v).Kind()
	return k == reflect.Slice || k == reflect.Array || k == reflect.Map
}

// eachChild calls fn with every element of an array or member value of an object (any slice or
// string-keyed map), until fn returns false.
func eachChild(v any, fn func(any) bool) {
	switch v := v.(type) {
	case []any:
		for _, c := range v {
			if !fn(c) {
				return
			}
		}
		return
	case map[string]any:
		for _, c := range v {
			if !fn(c) {
				return
			}
		}
		return
	case nil, string, float64, bool:
		return
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return // []byte is a JSON string
		}
		for i := range rv.Len() {
			if !fn(rv.Index(i).Interface()) {
				return
			}
		}
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return
		}
		it := rv.MapRange()
		for it.Next() {
			if !fn(it.Value().Interface()) {
				return
			}
		}
	}
}

// walk says what a query of a filter may visit below its start: nothing more than a few
// nodes (a singular query such as @.size), each node at most once (with "*", a slice or a
// filter), or each node once per level (with a descendant segment).
type walk uint8

const (
	walkNone walk = iota
	walkOnce
	walkDeep
)

// filterCost is what testing one candidate of a filter is charged: static (its segments and
// selectors), plus what its relative queries may visit below the candidate and its absolute
// ones below the document.
type filterCost struct {
	static             int
	relative, absolute walk
}

// filterCost returns the cost of f, computed by Compile.
func (p *Path) filterCost(f *spec.FilterSelector) filterCost {
	if c, ok := p.filters[f]; ok {
		return c
	}
	return filterCost{static: 1, relative: walkDeep, absolute: walkDeep} // not seen by Compile: the most
}

// checkFilters computes the cost of every filter of the path's segments and checks that no
// query inside a filter multiplies more than once.
func (p *Path) checkFilters() error {
	for _, seg := range p.q.Query().Segments() {
		for _, sel := range seg.Selectors() {
			f, ok := sel.(*spec.FilterSelector)
			if !ok {
				continue
			}
			c := filterCost{static: 1}
			if err := scanFilter(f.String()[1:], 1, false, &c); err != nil {
				return err
			}
			if p.filters == nil {
				p.filters = map[*spec.FilterSelector]filterCost{}
			}
			p.filters[f] = c
		}
	}
	return nil
}

// multiplyError reports a query inside a filter that multiplies more than once.
type multiplyError struct {
	query  string
	nested bool // an absolute query in a filter inside a filter
}

func (e *multiplyError) Error() string {
	if e.nested {
		return "the query " + e.query + " inside a filter inside a filter visits more than one node: there, a " +
			"query from the root ($) must select at most one node, as $.a or $['a'][0] do"
	}
	return "the query " + e.query + " inside a filter multiplies the nodes it visits more than once: it may " +
		"have one descendant segment (\"..\") or one list of several selectors, counting those of the filters " +
		"inside it, not more (a filter runs its queries once per candidate node)"
}

// scanFilter scans the canonical text of a filter expression (after its "?"): each query in it
// ("@…" or "$…") may multiply at most `allowed` times, where a descendant segment or a segment
// with several selectors multiplies once, and the queries of a filter inside a query count with
// it. Wildcards and slices do not multiply (each node is the child of one parent). It adds the
// segments and selectors of the filter to c.static and records in c what its queries walk.
//
// A filter inside a query (nested) runs once per node that query reaches, not once per
// candidate of the outer filter, so its absolute queries must be singular ($.flag, not $..x):
// the document is not walked more than once per candidate.
func scanFilter(s string, allowed int, nested bool, c *filterCost) error {
	for i := 0; i < len(s); {
		switch ch := s[i]; {
		case ch == '"' || ch == '\'':
			i = skipString(s, i)
		case ch == '@' || ch == '$':
			end, w, err := scanQuery(s, i, allowed, c)
			if err != nil {
				return err
			}
			if nested && ch == '$' && w != walkNone {
				return &multiplyError{query: s[i:end], nested: true}
			}
			if ch == '@' {
				c.relative = max(c.relative, w)
			} else {
				c.absolute = max(c.absolute, w)
			}
			i = end
		default:
			i++
		}
	}
	return nil
}

// scanQuery scans the query starting at s[start] ("@" or "$") and returns where it ends and
// what it walks.
func scanQuery(s string, start, allowed int, c *filterCost) (end int, w walk, err error) {
	mult := 0
	i := start + 1
	for i < len(s) {
		if strings.HasPrefix(s[i:], "..") {
			mult++
			w = walkDeep
			i += 2
		}
		if mult > allowed {
			return 0, 0, &multiplyError{query: s[start:i]}
		}
		if i >= len(s) || s[i] != '[' {
			break
		}
		closing := matchBracket(s, i)
		parts := splitTop(s[i+1 : closing])
		c.static += len(parts)
		if len(parts) > 1 {
			mult++
		}
		if mult > allowed {
			return 0, 0, &multiplyError{query: s[start : closing+1]}
		}
		for _, part := range parts {
			part = strings.TrimSpace(part)
			switch {
			case strings.HasPrefix(part, "?"):
				w = max(w, walkOnce)
				if err := scanFilter(part[1:], allowed-mult, true, c); err != nil {
					return 0, 0, err
				}
			case part == "*":
				w = max(w, walkOnce)
			case part != "" && part[0] != '"' && part[0] != '\'' && strings.Contains(part, ":"):
				w = max(w, walkOnce) // a slice
			}
		}
		if len(parts) > 1 {
			w = max(w, walkOnce)
		}
		i = closing + 1
	}
	return i, w, nil
}

// skipString returns the index after the string literal starting at s[i].
func skipString(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j + 1
		}
	}
	return len(s)
}

// matchBracket returns the index of the "]" closing the "[" at s[i] (len(s)-1 if none).
func matchBracket(s string, i int) int {
	depth := 0
	for j := i; j < len(s); {
		switch s[j] {
		case '"', '\'':
			j = skipString(s, j)
			continue
		case '[', '(':
			depth++
		case ']', ')':
			depth--
			if depth == 0 {
				return j
			}
		}
		j++
	}
	return len(s) - 1
}

// splitTop splits a bracket's content at its top-level commas.
func splitTop(s string) []string {
	var parts []string
	depth, from := 0, 0
	for j := 0; j < len(s); {
		switch s[j] {
		case '"', '\'':
			j = skipString(s, j)
			continue
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[from:j])
				from = j + 1
			}
		}
		j++
	}
	return append(parts, s[from:])
}
