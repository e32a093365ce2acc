package yamltext

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/problem"
	"gopkg.in/yaml.v3"
)

// Decoder reads the nodes of one YAML (or JSON) document into Go values and appends a
// problem.Problem for every value of the wrong shape instead of stopping at the first: the
// workflow spec parser and the schedule file parser both decode through it, so a wrong type,
// an unknown field or a duplicate key reads the same in both. The zero value is ready to use
// and has no limits.
type Decoder struct {
	// File is copied into every problem (a schedule file's name); "" for none.
	File string
	// Prefix returns the start of the message that names where the value is, including the
	// trailing ": " (`steps[1] (id "export"): `). nil means at.Owner + ": ", or nothing when
	// at.Owner is "".
	Prefix func(at At) string
	// MaxValues bounds the values Value produces across the document (YAML alias expansion,
	// "billion laughs"); MaxDepth bounds the nesting depth Value accepts. 0 means no bound.
	// Exceeding either adds one too_large problem and sets TooLarge.
	MaxValues, MaxDepth int
	// Visit, when set, is called with every value Value converts (aliases resolved) and its At,
	// whose Name and Path are extended by keys and indexes ("inputs.files[0]").
	Visit func(at At, n *yaml.Node)

	// Problems lists every problem found, in the order found.
	Problems []problem.Problem
	// TooLarge is set once a limit is exceeded; the caller should then report only Problems.
	TooLarge bool

	values int
}

// At locates a value for the problems reported about it.
type At struct {
	// Path is the value's path in the document, e.g. "steps[1].retry.max_attempts"; it becomes
	// the problem's Path.
	Path string
	// Name is the field as messages quote it ("`trigger.kind` must be a string"); "" means the
	// last key of Path ("max_attempts").
	Name string
	// Owner names what the value belongs to at the start of messages (`schedule "nightly"`);
	// "" for none. Decoder.Prefix, when set, decides instead.
	Owner string
	// StepID and ScheduleID are copied into the problem.
	StepID, ScheduleID string
}

// Key returns the At of the field key of the mapping at a.
func (a At) Key(key string) At {
	a.Path = Join(a.Path, key)
	if a.Name != "" {
		a.Name += "." + key
	}
	return a
}

// Index returns the At of item i of the sequence at a.
func (a At) Index(i int) At {
	idx := "[" + strconv.Itoa(i) + "]"
	a.Path += idx
	if a.Name != "" {
		a.Name += idx
	}
	return a
}

// name is the field as messages quote it.
func (a At) name() string {
	if a.Name != "" {
		return a.Name
	}
	return LastKey(a.Path)
}

// Join appends key to a dotted path: Join("", "a") = "a", Join("a", "b") = "a.b".
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// LastKey returns the part of a dotted path after its last dot: "steps[0].retry" → "retry",
// "steps[0].depends_on[1]" → "depends_on[1]".
func LastKey(path string) string {
	if i := strings.LastIndex(path, "."); i >= 0 {
		return path[i+1:]
	}
	return path
}

// Add appends a problem of severity error located at n (no position when n is nil). The
// message is the prefix naming at's owner, then msg, then "; " and hint when hint is not "";
// the problem's Hint is hint.
func (d *Decoder) Add(code string, n *yaml.Node, at At, msg, hint string) {
	p := problem.Problem{Code: code, Severity: problem.SeverityError, File: d.File, StepID: at.StepID,
		ScheduleID: at.ScheduleID, Path: at.Path, Hint: hint}
	switch {
	case d.Prefix != nil:
		p.Message = d.Prefix(at)
	case at.Owner != "":
		p.Message = at.Owner + ": "
	}
	p.Message += msg
	if hint != "" {
		p.Message += "; " + hint
	}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.Problems = append(d.Problems, p)
}

// Field is one key/value pair of a mapping.
type Field struct {
	Key     string
	KeyNode *yaml.Node
	Value   *yaml.Node
}

// Mapping returns the fields of the mapping n (at at) in document order. A key that is not a
// string is a wrong_type problem and a repeated key a parse_error problem; neither is returned.
// A merge key (`<<`) is returned as any other: Mapping is for the fixed fields of a document
// format, whose keys the caller checks (see UnknownField).
func (d *Decoder) Mapping(n *yaml.Node, at At) []Field {
	n = ResolveAlias(n)
	fields := make([]Field, 0, len(n.Content)/2)
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := ResolveAlias(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.Add(problem.CodeWrongType, k, at, "mapping keys must be strings", "")
			continue
		}
		if seen[k.Value] {
			d.Add(problem.CodeParseError, k, at.Key(k.Value), fmt.Sprintf("duplicate key %q", k.Value), "keep one of them")
			continue
		}
		seen[k.Value] = true
		fields = append(fields, Field{Key: k.Value, KeyNode: k, Value: v})
	}
	return fields
}

// UnknownField reports f, a field of the mapping at at, as unknown. The hint is the closest
// allowed field when f.Key looks like a typo of one ("did you mean …?"), else elsewhere when
// not "" (`x` is only valid on … steps), else the list of allowed fields.
func (d *Decoder) UnknownField(f Field, at At, allowed []string, elsewhere string) {
	var hint string
	switch sug := Suggest(f.Key, allowed); {
	case sug != "":
		hint = fmt.Sprintf("did you mean %q?", sug)
	case elsewhere != "":
		hint = elsewhere
	default:
		hint = "allowed fields: " + strings.Join(allowed, ", ")
	}
	d.Add(problem.CodeUnknownField, f.KeyNode, at.Key(f.Key), fmt.Sprintf("unknown field %q", f.Key), hint)
}

// IsNull reports whether n is null (`~`, `null`, or nothing after the colon).
func IsNull(n *yaml.Node) bool {
	n = ResolveAlias(n)
	return n != nil && n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// Str returns the string n holds; null is "". Any other value is a wrong_type problem whose
// hint, for a scalar, shows the value quoted (`quote it: id: "12"`), and ok is false.
func (d *Decoder) Str(n *yaml.Node, at At) (s string, ok bool) {
	n = ResolveAlias(n)
	if n.Kind == yaml.ScalarNode {
		switch n.Tag {
		case "!!str", "!!timestamp", "!!binary":
			return n.Value, true
		case "!!null":
			return "", true
		}
	}
	hint := ""
	if n.Kind == yaml.ScalarNode {
		if key := LastKey(at.Path); key != "" && !strings.HasSuffix(key, "]") {
			hint = fmt.Sprintf("quote it: %s: %q", key, n.Value)
		} else {
			hint = fmt.Sprintf("quote it: %q", n.Value)
		}
	}
	d.Add(problem.CodeWrongType, n, at, fmt.Sprintf("`%s` must be a string; got %s", at.name(), DescribeNode(n)), hint)
	return "", false
}

// Bool returns the boolean n holds. Any other value (null included) is a wrong_type problem,
// and ok is false.
func (d *Decoder) Bool(n *yaml.Node, at At) (b bool, ok bool) {
	n = ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	hint := ""
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		hint = "write true or false, unquoted" // "yes", "on" and "true" in quotes are strings
	}
	d.Add(problem.CodeWrongType, n, at, fmt.Sprintf("`%s` must be true or false; got %s", at.name(), DescribeNode(n)), hint)
	return false, false
}

// Number returns the finite number n holds. Any other value is a wrong_type problem, and ok is
// false.
func (d *Decoder) Number(n *yaml.Node, at At) (float64, bool) {
	n = ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		if f, ok := nodeFloat(n); ok {
			return f, true
		}
	}
	d.Add(problem.CodeWrongType, n, at, fmt.Sprintf("`%s` must be a number; got %s", at.name(), DescribeNode(n)), "")
	return 0, false
}

// Int returns the whole number n holds (3 and 3.0 alike). One beyond int64 saturates at its
// bound, so that the caller's range check quotes it as written rather than calling it a wrong
// type. Any other value (3.5, a string, null) is a wrong_type problem, and ok is false.
func (d *Decoder) Int(n *yaml.Node, at At) (int64, bool) {
	n = ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		if f, ok := nodeFloat(n); ok && f == math.Trunc(f) {
			switch {
			case f >= math.MaxInt64:
				return math.MaxInt64, true
			case f <= math.MinInt64:
				return math.MinInt64, true
			}
			return int64(f), true
		}
	}
	d.Add(problem.CodeWrongType, n, at, fmt.Sprintf("`%s` must be a whole number; got %s", at.name(), DescribeNode(n)), "")
	return 0, false
}

// StrList returns the strings of the sequence n; null is nil. A value that is not a sequence is
// a wrong_type problem (nil), and so is each item that is not a string (left out).
func (d *Decoder) StrList(n *yaml.Node, at At) []string {
	n = ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.Add(problem.CodeWrongType, n, at, fmt.Sprintf("`%s` must be a list of strings; got %s", at.name(), DescribeNode(n)), "")
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, c := range n.Content {
		if s, ok := d.Str(c, at.Index(i)); ok {
			out = append(out, s)
		}
	}
	return out
}

// Value converts n into a JSON value as the engine holds it: map[string]any, []any, string,
// bool, nil, float64, and json.Number for an integer beyond ±2^53 written in decimal (see
// NumberValue). Merge keys (`<<: *anchor`) merge the anchored mappings, explicit keys winning.
// depth is the nesting depth of n in the document (the root is 1), checked against MaxDepth.
// NaN and infinities, and mapping keys that are not strings, are wrong_type problems (nil, or
// the key left out); a limit exceeded is one too_large problem for the whole document.
func (d *Decoder) Value(n *yaml.Node, at At, depth int) any {
	return d.value(n, at, at.name(), depth)
}

func (d *Decoder) value(n *yaml.Node, at At, root string, depth int) any {
	d.values++
	if (d.MaxValues > 0 && d.values > d.MaxValues) || (d.MaxDepth > 0 && depth > d.MaxDepth) {
		if !d.TooLarge {
			d.TooLarge = true
			msg := fmt.Sprintf("`%s` expands to more than %d values (YAML aliases?)", root, d.MaxValues)
			if d.MaxDepth > 0 && depth > d.MaxDepth {
				msg = fmt.Sprintf("`%s` nests deeper than %d levels", root, d.MaxDepth)
			}
			d.Add(problem.CodeTooLarge, n, at, msg, "")
		}
		return nil
	}
	n = ResolveAlias(n)
	if d.Visit != nil {
		d.Visit(at, n)
	}
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil
		case "!!bool":
			var b bool
			_ = n.Decode(&b)
			return b
		case "!!int", "!!float":
			if v, ok := NumberValue(n.Value); ok { // decimal text: a large integer stays exact
				return v
			}
			f, ok := nodeFloat(n)
			if !ok {
				d.Add(problem.CodeWrongType, n, at, fmt.Sprintf("`%s`: %q is not a JSON number (NaN and infinities are not allowed)", at.name(), n.Value),
					"quote it to pass a string")
				return nil
			}
			return f
		}
		return n.Value
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			out = append(out, d.value(c, at.Index(i), root, depth+1))
		}
		return out
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := ResolveAlias(n.Content[i]), n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				for _, src := range MergeSources(v) {
					if m, ok := d.value(src, at, root, depth).(map[string]any); ok {
						for mk, mv := range m {
							if _, exists := out[mk]; !exists {
								out[mk] = mv
							}
						}
					}
				}
				continue
			}
			if k.Kind != yaml.ScalarNode {
				d.Add(problem.CodeWrongType, k, at, fmt.Sprintf("`%s`: mapping keys must be strings", at.name()), "")
				continue
			}
			out[k.Value] = d.value(v, at.Key(k.Value), root, depth+1)
		}
		return out
	}
	return nil
}

// nodeFloat returns the value of a numeric scalar as a float64. Plain decimal text (all JSON
// numbers, integers beyond int64 included) is read with strconv; YAML-only forms (0x1F, 0o17,
// 1_000) through yaml.v3. NaN and infinities are refused: they are not JSON numbers.
func nodeFloat(n *yaml.Node) (float64, bool) {
	f, err := strconv.ParseFloat(n.Value, 64)
	if err != nil {
		if err := n.Decode(&f); err != nil {
			return 0, false
		}
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// MaxExactInt is 2^53: every integer of at most this magnitude is exact in a float64.
const MaxExactInt = 1 << 53

// NumberValue returns the engine's value of the JSON or YAML number text s: an integer beyond
// ±2^53 as json.Number (its canonical decimal text), anything else as float64. ok is false for
// text that is not a finite decimal number (YAML-only forms such as 0x1F included).
func NumberValue(s string) (v any, ok bool) {
	if isIntegerText(s) && len(s) >= 16 {
		if n, ok := new(big.Int).SetString(s, 10); ok && n.CmpAbs(big.NewInt(MaxExactInt)) > 0 {
			return json.Number(n.String()), true
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, false
	}
	return f, true
}

// isIntegerText reports whether s is an optionally signed run of decimal digits.
func isIntegerText(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
