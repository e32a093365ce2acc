package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
	"gopkg.in/yaml.v3"
)

// Format is the text format of a spec.
type Format string

// Formats accepted by Parse.
const (
	FormatAuto Format = "auto" // JSON when the first non-space byte is '{', else YAML
	FormatYAML Format = "yaml"
	FormatJSON Format = "json"
)

// Limits on untrusted input. Exceeding one is a "too_large" problem, never a crash.
const (
	// MaxDocumentBytes is the largest spec text accepted (4 MiB).
	MaxDocumentBytes = 4 << 20
	// MaxDepth is the deepest nesting of mappings and sequences accepted, counting the document
	// root as depth 1 (step nesting, args and literal values all count).
	MaxDepth = 64
	// MaxSteps is the largest number of steps in one spec's tree.
	MaxSteps = 10000
	// maxNodes bounds the values produced while expanding YAML aliases ("billion laughs").
	maxNodes = 1 << 20
)

// Options control Parse.
type Options struct {
	Format Format // "" means FormatAuto
	Source string // a label for messages, usually the file name; may be empty
}

// Parse decodes and validates a spec.
//
// When the text cannot be turned into a spec (malformed YAML/JSON, unknown fields, wrong types,
// unknown kinds, a limit exceeded), Parse returns a nil *Spec and a *ValidationError that lists
// every problem found, structural and semantic. Otherwise it returns the spec; semantic problems
// (cycles, unknown template variables, bad policies, …) are then reported by Spec.Validate and
// Spec.Problems so that a spec with mistakes can still be inspected.
func Parse(data []byte, opts Options) (*Spec, error) {
	fail := func(code string, ps ...Problem) (*Spec, error) {
		for i := range ps {
			if ps[i].Severity == "" {
				ps[i].Severity = SeverityError
			}
		}
		return nil, &ValidationError{Code: code, Problems: ps, Source: opts.Source}
	}
	if len(data) > MaxDocumentBytes {
		return fail(CodeTooLarge, Problem{Code: CodeTooLarge, Message: fmt.Sprintf(
			"the spec is %d bytes; the limit is %d bytes (%d MiB)", len(data), MaxDocumentBytes, MaxDocumentBytes>>20)})
	}
	if !utf8.Valid(data) {
		off := yamltext.InvalidUTF8Offset(data)
		line, col := yamltext.LineCol(data, off)
		return fail(CodeParseError, Problem{Code: CodeParseError, Line: line, Column: col, Message: fmt.Sprintf(
			"the spec is not valid UTF-8 (bad byte 0x%02x at offset %d); save the file as UTF-8", data[off], off)})
	}
	format := opts.Format
	if format == "" {
		format = FormatAuto
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	switch format {
	case FormatAuto:
		if len(trimmed) > 0 && trimmed[0] == '{' {
			format = FormatJSON
		} else {
			format = FormatYAML
		}
	case FormatYAML, FormatJSON:
	default:
		return fail(CodeParseError, Problem{Code: CodeParseError, Message: fmt.Sprintf(
			"unknown spec format %q; use \"yaml\", \"json\" or \"auto\"", format)})
	}
	if len(bytes.TrimSpace(trimmed)) == 0 {
		return fail(CodeNotAMapping, Problem{Code: CodeNotAMapping, Line: 1, Column: 1,
			Message: "the spec is empty; it must be a mapping with at least `steps`"})
	}
	if format == FormatJSON {
		if err := checkJSON(data); err != nil {
			return fail(CodeParseError, *err)
		}
	}
	if d := yamltext.FlowDepth(data); d > MaxDepth {
		return fail(CodeTooLarge, Problem{Code: CodeTooLarge, Message: fmt.Sprintf(
			"the spec nests %d levels deep; the limit is %d", d, MaxDepth)})
	}
	var root *yaml.Node
	if format == FormatJSON {
		n, err := jsonNodes(data)
		if err != nil {
			return fail(CodeTooLarge, Problem{Code: CodeTooLarge, Message: err.Error()})
		}
		root = n
	} else {
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return fail(CodeParseError, yamlProblem(err))
		}
		root = &doc
		if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
			root = root.Content[0]
		}
	}
	if root.Kind != yaml.MappingNode {
		return fail(CodeNotAMapping, Problem{Code: CodeNotAMapping, Line: root.Line, Column: root.Column,
			Message: fmt.Sprintf("the spec must be a mapping with at least `steps`; got %s", yamltext.DescribeNode(root))})
	}

	d := &decoder{}
	s := d.spec(root)
	s.source = opts.Source
	if d.tooLarge {
		return fail(CodeTooLarge, d.structural.errs...)
	}
	structural := d.structural.errs
	v := validate(s)
	if len(structural) > 0 {
		all := append(append([]Problem(nil), structural...), v.errs...)
		sortProblems(all)
		return fail(CodeValidationFailed, all...)
	}
	s.problems = v.errs
	sortProblems(s.problems)
	s.warnings = append(d.structural.warns, v.warns...)
	sortProblems(s.warnings)
	s.canonical = canonicalJSON(s)
	s.hash = hashBytes(s.canonical)
	return s, nil
}

// ParseString is Parse with FormatAuto and no source label.
func ParseString(text string) (*Spec, error) { return Parse([]byte(text), Options{}) }

func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}

// decoder turns a yaml.Node tree into a Spec, collecting structural problems.
type decoder struct {
	structural problems
	nodes      int
	steps      int
	tooLarge   bool
}

func (d *decoder) add(code string, n *yaml.Node, path, stepID, msg string) {
	d.structural.add(problemAt(code, nodePos(n), path, stepID, msg))
}

func nodePos(n *yaml.Node) Pos {
	if n == nil {
		return Pos{}
	}
	return Pos{Line: n.Line, Column: n.Column}
}

// field is one key/value pair of a mapping.
type field struct {
	key   string
	keyN  *yaml.Node
	value *yaml.Node
}

// mapping returns the fields of a mapping node in document order, reporting duplicate keys.
func (d *decoder) mapping(n *yaml.Node, path, stepID string) []field {
	n = yamltext.ResolveAlias(n)
	fields := make([]field, 0, len(n.Content)/2)
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := yamltext.ResolveAlias(n.Content[i]), n.Content[i+1]
		key := k.Value
		if k.Kind != yaml.ScalarNode {
			d.add(CodeWrongType, k, path, stepID, "mapping keys must be strings")
			continue
		}
		if seen[key] {
			d.add(CodeParseError, k, join(path, key), stepID, fmt.Sprintf("duplicate key %q", key))
			continue
		}
		seen[key] = true
		fields = append(fields, field{key: key, keyN: k, value: v})
	}
	return fields
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var topFields = []string{"name", "description", "inputs", "steps"}

func (d *decoder) spec(root *yaml.Node) *Spec {
	s := &Spec{}
	var stepsNode *yaml.Node
	for _, f := range d.mapping(root, "", "") {
		switch f.key {
		case "name":
			s.Name, _ = d.str(f.value, "name", "")
		case "description":
			s.Description, _ = d.str(f.value, "description", "")
		case "inputs":
			s.Inputs = d.inputs(f.value)
		case "steps":
			stepsNode = f.value
			s.Steps = d.stepList(f.value, "steps", 2)
		default:
			d.unknownField(f, "", "", topFields, "")
		}
	}
	if stepsNode == nil {
		// Reported by validation as no_steps; nothing structural is wrong.
		s.Steps = nil
	}
	return s
}

func (d *decoder) unknownField(f field, path, stepID string, allowed []string, elsewhere string) {
	msg := fmt.Sprintf("unknown field %q", f.key)
	hint := ""
	if sug := yamltext.Suggest(f.key, allowed); sug != "" {
		hint = fmt.Sprintf("did you mean %q?", sug)
	} else if elsewhere != "" {
		hint = elsewhere
	} else {
		hint = "allowed fields: " + strings.Join(allowed, ", ")
	}
	p := problemAt(CodeUnknownField, nodePos(f.keyN), join(path, f.key), stepID, msg+"; "+hint)
	p.Hint = hint
	d.structural.add(p)
}

func (d *decoder) inputs(n *yaml.Node) []Input {
	n = yamltext.ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.add(CodeWrongType, n, "inputs", "", fmt.Sprintf("`inputs` must be a mapping of input name to declaration; got %s", yamltext.DescribeNode(n)))
		return nil
	}
	var out []Input
	for _, f := range d.mapping(n, "inputs", "") {
		in := Input{Name: f.key, Type: "any", Pos: nodePos(f.keyN)}
		path := "inputs." + f.key
		v := yamltext.ResolveAlias(f.value)
		switch {
		case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		case v.Kind == yaml.ScalarNode && v.Tag == "!!str":
			in.Type = v.Value // shorthand: `date: string`
		case v.Kind == yaml.MappingNode:
			for _, g := range d.mapping(v, path, "") {
				fp := join(path, g.key)
				switch g.key {
				case "type":
					in.Type, _ = d.str(g.value, fp, "")
				case "format":
					in.Format, _ = d.str(g.value, fp, "")
				case "description":
					in.Description, _ = d.str(g.value, fp, "")
				case "required":
					in.Required, _ = d.boolean(g.value, fp, "")
				case "default":
					in.Default, in.HasDefault = d.value(g.value, fp, "", 3), true
				case "enum":
					ev := yamltext.ResolveAlias(g.value)
					if ev.Kind != yaml.SequenceNode {
						d.add(CodeWrongType, ev, fp, "", fmt.Sprintf("`%s` must be a list of allowed values; got %s", fp, yamltext.DescribeNode(ev)))
						continue
					}
					list, _ := d.value(ev, fp, "", 3).([]any)
					if list == nil {
						list = []any{}
					}
					in.Enum = list
				default:
					d.unknownField(g, path, "", []string{"type", "format", "required", "default", "description", "enum"}, "")
				}
			}
		default:
			d.add(CodeWrongType, v, path, "", fmt.Sprintf("input %q must be a mapping such as `{type: string, required: true}` or a type name; got %s", f.key, yamltext.DescribeNode(v)))
		}
		out = append(out, in)
	}
	return out
}

// stepList decodes a sequence of steps. depth is the node depth of the sequence.
func (d *decoder) stepList(n *yaml.Node, path string, depth int) []*Step {
	n = yamltext.ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.add(CodeWrongType, n, path, "", fmt.Sprintf("`%s` must be a list of steps; got %s", lastKey(path), yamltext.DescribeNode(n)))
		return nil
	}
	steps := make([]*Step, 0, len(n.Content))
	for i, c := range n.Content {
		if d.tooLarge {
			return steps
		}
		d.steps++
		if d.steps > MaxSteps {
			d.tooLarge = true
			d.add(CodeTooLarge, c, path, "", fmt.Sprintf("the spec declares more than %d steps", MaxSteps))
			return steps
		}
		if st := d.step(c, fmt.Sprintf("%s[%d]", path, i), depth+1); st != nil {
			steps = append(steps, st)
		}
	}
	return steps
}

func lastKey(path string) string {
	if i := strings.LastIndex(path, "."); i >= 0 {
		return path[i+1:]
	}
	return path
}

var commonStepFields = []string{"id", "kind", "description", "depends_on", "timeout_secs"}
var policyFields = []string{"retry", "idempotency_key", "idempotency_scope", "idempotency_ttl_secs"}

// kindFields lists the fields each kind accepts besides commonStepFields.
var kindFields = map[Kind][]string{
	KindTool:       append([]string{"tool", "args", "pool"}, policyFields...),
	KindToolRemote: append([]string{"dcc", "tool", "args"}, policyFields...),
	KindForeach:    {"items", "as", "concurrency", "on_any_fail", "steps"},
	KindParallel:   {"steps", "on_any_fail"},
	KindBranch:     {"on", "condition", "then", "else"},
	KindApprove:    {"prompt"},
}

// allStepFields returns every field any step kind accepts.
func allStepFields() []string {
	out := append([]string(nil), commonStepFields...)
	for _, k := range Kinds {
		for _, f := range kindFields[k] {
			if !contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// kindsWithField returns the kinds that accept key, for "only valid on …" hints.
func kindsWithField(key string) []string {
	var out []string
	for _, k := range Kinds {
		for _, f := range kindFields[k] {
			if f == key {
				out = append(out, string(k))
				break
			}
		}
	}
	return out
}

func (d *decoder) step(n *yaml.Node, path string, depth int) *Step {
	n = yamltext.ResolveAlias(n)
	if depth > MaxDepth {
		d.tooLarge = true
		d.add(CodeTooLarge, n, path, "", fmt.Sprintf("steps nest deeper than %d levels", MaxDepth))
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.add(CodeWrongType, n, path, "", fmt.Sprintf("a step must be a mapping with `id` and `kind` (or `tool`); got %s", yamltext.DescribeNode(n)))
		return nil
	}
	st := &Step{Pos: nodePos(n), fields: map[string]Pos{}}
	fields := d.mapping(n, path, "")
	byKey := make(map[string]field, len(fields))
	for _, f := range fields {
		byKey[f.key] = f
		st.fields[f.key] = nodePos(f.value)
	}
	if f, ok := byKey["id"]; ok {
		st.ID, _ = d.str(f.value, join(path, "id"), "")
	}
	id := st.ID

	// Kind: explicit, or inferred from the shorthand `tool:` (and `dcc:` + `tool:`).
	if f, ok := byKey["kind"]; ok {
		k, _ := d.str(f.value, join(path, "kind"), id)
		st.Kind = Kind(k)
		if _, known := kindFields[st.Kind]; !known {
			names := make([]string, len(Kinds))
			for i, k := range Kinds {
				names[i] = string(k)
			}
			hint := "use one of: " + strings.Join(names, ", ")
			if sug := yamltext.Suggest(k, names); sug != "" {
				hint = fmt.Sprintf("did you mean %q?", sug)
			}
			p := problemAt(CodeUnknownKind, nodePos(f.value), join(path, "kind"), id, fmt.Sprintf("unknown step kind %q; %s", k, hint))
			p.Hint = hint
			d.structural.add(p)
			st.Kind = ""
		}
	} else {
		_, hasTool := byKey["tool"]
		_, hasDCC := byKey["dcc"]
		switch {
		case hasTool && hasDCC:
			st.Kind = KindToolRemote
		case hasTool:
			st.Kind = KindTool
		default:
			hint := "add `kind: tool | tool_remote | foreach | parallel | branch | approve`, or `tool: <name>` for a tool call"
			p := problemAt(CodeMissingField, nodePos(n), join(path, "kind"), id, "missing field `kind`; "+hint)
			p.Hint = hint
			d.structural.add(p)
		}
	}

	// A step whose kind is unknown stays in the tree (so ids, dependencies and templates are still
	// checked) with an empty Kind; its fields are checked against every kind's fields.
	allowed := append(append([]string(nil), commonStepFields...), kindFields[st.Kind]...)
	if st.Kind == "" {
		allowed = allStepFields()
	}
	for _, f := range fields {
		fp := join(path, f.key)
		switch f.key {
		case "id", "kind":
		case "description":
			st.Description, _ = d.str(f.value, fp, id)
		case "depends_on":
			st.DependsOn, st.HasDependsOn = d.strList(f.value, fp, id), true
			if st.DependsOn == nil {
				st.DependsOn = []string{}
			}
		case "timeout_secs":
			if v, ok := d.number(f.value, fp, id); ok {
				st.Policy.TimeoutSecs = v
				st.keepText("timeout_secs", f.value)
			}
		default:
			if !contains(allowed, f.key) {
				elsewhere := ""
				if ks := kindsWithField(f.key); len(ks) > 0 {
					elsewhere = fmt.Sprintf("`%s` is only valid on %s steps", f.key, strings.Join(ks, "/"))
				}
				d.unknownField(f, path, id, allowed, elsewhere)
				continue
			}
			d.kindField(st, f, fp, depth)
		}
	}
	d.applyDefaults(st, byKey)
	return st
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// kindField decodes one kind-specific or policy field.
func (d *decoder) kindField(st *Step, f field, fp string, depth int) {
	id := st.ID
	switch f.key {
	case "tool":
		st.Tool, _ = d.str(f.value, fp, id)
	case "dcc":
		st.DCC, _ = d.str(f.value, fp, id)
	case "pool":
		st.Pool, _ = d.str(f.value, fp, id)
	case "args":
		v := yamltext.ResolveAlias(f.value)
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return
		}
		if v.Kind != yaml.MappingNode {
			d.add(CodeWrongType, v, fp, id, fmt.Sprintf("`args` must be a mapping of argument name to value; got %s", yamltext.DescribeNode(v)))
			return
		}
		st.Args, _ = d.value(v, fp, id, depth+1).(map[string]any)
	case "items":
		st.Items = d.value(f.value, fp, id, depth+1)
	case "as":
		st.As, _ = d.str(f.value, fp, id)
	case "concurrency":
		st.Concurrency = 1 // a wrong type is reported once, as wrong_type
		if v, ok := d.integer(f.value, fp, id); ok {
			st.Concurrency = clampInt(v) // the range is checked by validation, on the text as written
			st.keepText("concurrency", f.value)
		}
	case "on_any_fail":
		s, _ := d.str(f.value, fp, id)
		st.OnAnyFail = OnAnyFail(s)
	case "steps":
		st.Steps = d.stepList(f.value, fp, depth+1)
	case "on", "condition":
		if _, dup := st.fields["on"]; dup && f.key == "condition" {
			d.add(CodeInvalidValue, f.keyN, fp, id, "give the branch condition once, as `on` or as `condition`, not both")
			return
		}
		st.On = d.value(f.value, fp, id, depth+1)
		st.fields["on"] = nodePos(f.value)
	case "then":
		st.Then = d.stepList(f.value, fp, depth+1)
	case "else":
		st.Else = d.stepList(f.value, fp, depth+1)
	case "prompt":
		st.Prompt, _ = d.str(f.value, fp, id)
	case "retry":
		st.Policy.Retry = d.retry(f.value, fp, st)
	case "idempotency_key":
		st.Policy.IdempotencyKey, _ = d.str(f.value, fp, id)
	case "idempotency_scope":
		s, _ := d.str(f.value, fp, id)
		st.Policy.IdempotencyScope = Scope(s)
	case "idempotency_ttl_secs":
		if v, ok := d.integer(f.value, fp, id); ok {
			st.Policy.IdempotencyTTLSecs = v
			st.keepText("idempotency_ttl_secs", f.value)
		}
	}
}

func (d *decoder) applyDefaults(st *Step, byKey map[string]field) {
	switch st.Kind {
	case KindTool, KindToolRemote:
		if st.Args == nil {
			st.Args = map[string]any{}
		}
		if st.Policy.IdempotencyKey != "" && st.Policy.IdempotencyScope == "" {
			st.Policy.IdempotencyScope = ScopeWorkflow
		}
	case KindForeach:
		if st.As == "" {
			st.As = "item"
		}
		if _, ok := byKey["concurrency"]; !ok {
			st.Concurrency = 1
		}
		if st.OnAnyFail == "" {
			st.OnAnyFail = Abort
		}
	case KindParallel:
		if st.OnAnyFail == "" {
			st.OnAnyFail = Abort
		}
	}
}

func (d *decoder) retry(n *yaml.Node, path string, st *Step) *RetryPolicy {
	id := st.ID
	n = yamltext.ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.add(CodeWrongType, n, path, id, fmt.Sprintf("`retry` must be a mapping such as `{max_attempts: 3}`; got %s", yamltext.DescribeNode(n)))
		return nil
	}
	r := DefaultRetryPolicy()
	allowed := []string{"max_attempts", "backoff", "initial_delay_ms", "max_delay_ms", "jitter", "retry_on"}
	hasMax := false
	for _, f := range d.mapping(n, path, id) {
		fp := join(path, f.key)
		st.fields["retry."+f.key] = nodePos(f.value)
		switch f.key {
		case "max_attempts":
			hasMax = true // a wrong type is reported once, as wrong_type
			if v, ok := d.integer(f.value, fp, id); ok {
				r.MaxAttempts = clampInt(v)
				st.keepText("retry.max_attempts", f.value)
			}
		case "backoff":
			s, _ := d.str(f.value, fp, id)
			r.Backoff = Backoff(s)
		case "initial_delay_ms":
			if v, ok := d.integer(f.value, fp, id); ok {
				r.InitialDelayMs = v
				st.keepText("retry.initial_delay_ms", f.value)
			}
		case "max_delay_ms":
			if v, ok := d.integer(f.value, fp, id); ok {
				r.MaxDelayMs = v
				st.keepText("retry.max_delay_ms", f.value)
			}
		case "jitter":
			if v, ok := d.number(f.value, fp, id); ok {
				r.Jitter = v
			}
		case "retry_on":
			v := yamltext.ResolveAlias(f.value)
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				continue
			}
			r.RetryOn = d.strList(v, fp, id)
			if r.RetryOn == nil {
				r.RetryOn = []string{}
			}
		default:
			d.unknownField(f, path, id, allowed, "")
		}
	}
	if !hasMax {
		hint := "add `max_attempts: 3` (1 = no retry)"
		p := problemAt(CodeMissingField, nodePos(n), join(path, "max_attempts"), id, "`retry` needs `max_attempts`; "+hint)
		p.Hint = hint
		d.structural.add(p)
	}
	return &r
}

// keepText records the text a numeric field was written with, for range messages.
func (st *Step) keepText(key string, n *yaml.Node) {
	if st.texts == nil {
		st.texts = map[string]string{}
	}
	st.texts[key] = yamltext.ResolveAlias(n).Value
}

func clampInt(v int64) int {
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	if v < math.MinInt32 {
		return math.MinInt32
	}
	return int(v)
}

// ---- scalars ---------------------------------------------------------------------------------

func (d *decoder) str(n *yaml.Node, path, stepID string) (string, bool) {
	n = yamltext.ResolveAlias(n)
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
		hint = fmt.Sprintf("; quote it: %s: \"%s\"", lastKey(path), n.Value)
	}
	d.add(CodeWrongType, n, path, stepID, fmt.Sprintf("`%s` must be a string; got %s%s", lastKey(path), yamltext.DescribeNode(n), hint))
	return "", false
}

func (d *decoder) boolean(n *yaml.Node, path, stepID string) (bool, bool) {
	n = yamltext.ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	d.add(CodeWrongType, n, path, stepID, fmt.Sprintf("`%s` must be true or false; got %s", lastKey(path), yamltext.DescribeNode(n)))
	return false, false
}

func (d *decoder) number(n *yaml.Node, path, stepID string) (float64, bool) {
	n = yamltext.ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		if f, ok := nodeFloat(n); ok {
			return f, true
		}
	}
	d.add(CodeWrongType, n, path, stepID, fmt.Sprintf("`%s` must be a number; got %s", lastKey(path), yamltext.DescribeNode(n)))
	return 0, false
}

// integer returns a whole number; one beyond int64 saturates at its bound (ranges are checked by
// validation, which quotes the number as written).
func (d *decoder) integer(n *yaml.Node, path, stepID string) (int64, bool) {
	n = yamltext.ResolveAlias(n)
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
	d.add(CodeWrongType, n, path, stepID, fmt.Sprintf("`%s` must be a whole number; got %s", lastKey(path), yamltext.DescribeNode(n)))
	return 0, false
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

func (d *decoder) strList(n *yaml.Node, path, stepID string) []string {
	n = yamltext.ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.add(CodeWrongType, n, path, stepID, fmt.Sprintf("`%s` must be a list of strings; got %s", lastKey(path), yamltext.DescribeNode(n)))
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, c := range n.Content {
		if s, ok := d.str(c, fmt.Sprintf("%s[%d]", path, i), stepID); ok {
			out = append(out, s)
		}
	}
	return out
}

// value converts any node into a JSON value (map[string]any, []any, string, float64, bool, nil,
// and json.Number for an integer beyond ±2^53: see DecodeValue).
func (d *decoder) value(n *yaml.Node, path, stepID string, depth int) any {
	d.nodes++
	if d.nodes > maxNodes {
		if !d.tooLarge {
			d.tooLarge = true
			d.add(CodeTooLarge, n, path, stepID, fmt.Sprintf("the spec expands to more than %d values (YAML aliases?)", maxNodes))
		}
		return nil
	}
	if depth > MaxDepth {
		if !d.tooLarge {
			d.tooLarge = true
			d.add(CodeTooLarge, n, path, stepID, fmt.Sprintf("values nest deeper than %d levels", MaxDepth))
		}
		return nil
	}
	if n.Kind == yaml.AliasNode {
		return d.value(yamltext.ResolveAlias(n), path, stepID, depth)
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
				d.add(CodeWrongType, n, path, stepID, fmt.Sprintf("`%s`: %q is not a JSON number (NaN and infinities are not allowed); quote it to pass a string", lastKey(path), n.Value))
				return nil
			}
			return f
		default:
			return n.Value
		}
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			out = append(out, d.value(c, fmt.Sprintf("%s[%d]", path, i), stepID, depth+1))
		}
		return out
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := yamltext.ResolveAlias(n.Content[i]), n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				// `<<: *anchor` merges the anchored mapping(s); explicit keys win.
				for _, src := range yamltext.MergeSources(v) {
					if m, ok := d.value(src, path, stepID, depth).(map[string]any); ok {
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
				d.add(CodeWrongType, k, path, stepID, "mapping keys must be strings")
				continue
			}
			out[k.Value] = d.value(v, join(path, k.Value), stepID, depth+1)
		}
		return out
	}
	return nil
}

// ---- text-level checks -----------------------------------------------------------------------

func yamlProblem(err error) Problem {
	line, col, msg := yamltext.ErrorPosition(err)
	return Problem{Code: CodeParseError, Severity: SeverityError, Line: line, Column: col, Message: "malformed YAML: " + msg}
}

func checkJSON(data []byte) *Problem {
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	err := dec.Decode(&v)
	if err == nil {
		if _, err2 := dec.Token(); err2 == nil {
			off := int(dec.InputOffset())
			line, col := yamltext.LineCol(data, off)
			return &Problem{Code: CodeParseError, Severity: SeverityError, Line: line, Column: col,
				Message: "malformed JSON: unexpected data after the top-level value"}
		}
		return nil
	}
	off := len(data)
	if se, ok := err.(*json.SyntaxError); ok {
		off = int(se.Offset)
	}
	line, col := yamltext.LineCol(data, off)
	return &Problem{Code: CodeParseError, Severity: SeverityError, Line: line, Column: col,
		Message: "malformed JSON: " + err.Error()}
}
