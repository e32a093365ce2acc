package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
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

	d := newDecoder()
	s := d.spec(root)
	s.source = opts.Source
	if d.TooLarge {
		return fail(CodeTooLarge, d.Problems...)
	}
	structural := d.Problems // the decoder reports errors only
	v := validate(s)
	if len(structural) > 0 {
		all := append(append([]Problem(nil), structural...), v.errs...)
		sortProblems(all)
		return fail(CodeValidationFailed, all...)
	}
	s.problems = v.errs
	sortProblems(s.problems)
	s.warnings = v.warns
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

// decoder turns a yaml.Node tree into a Spec, collecting structural problems in the embedded
// yamltext.Decoder (whose TooLarge is also set when the steps exceed a limit).
type decoder struct {
	yamltext.Decoder
	steps int
}

func newDecoder() *decoder {
	return &decoder{Decoder: yamltext.Decoder{
		Prefix:    func(a yamltext.At) string { return describe(a.Path, a.StepID) },
		MaxValues: maxNodes,
		MaxDepth:  MaxDepth,
	}}
}

// at locates a value for problems: path is its field path, stepID the id of its step ("" for
// none); messages start with describe(path, stepID).
func at(path, stepID string) yamltext.At { return yamltext.At{Path: path, StepID: stepID} }

func nodePos(n *yaml.Node) Pos {
	if n == nil {
		return Pos{}
	}
	return Pos{Line: n.Line, Column: n.Column}
}

func join(path, key string) string { return yamltext.Join(path, key) }

var topFields = []string{"name", "description", "inputs", "steps", "defaults", "on_failure", "priority", "fair_share"}

func (d *decoder) spec(root *yaml.Node) *Spec {
	s := &Spec{}
	var stepsNode *yaml.Node
	for _, f := range d.Mapping(root, at("", "")) {
		switch f.Key {
		case "name":
			s.Name, _ = d.Str(f.Value, at("name", ""))
			if why := NameProblem(s.Name); why != "" {
				d.Add(CodeInvalidName, f.Value, at("name", ""), fmt.Sprintf("workflow name %q is not valid: %s; "+
					"use at most %d printable characters without / or \\ (e.g. vendor_intake)", s.Name, why, MaxNameLen), "")
			}
		case "description":
			s.Description, _ = d.Str(f.Value, at("description", ""))
		case "inputs":
			s.Inputs = d.inputs(f.Value)
		case "steps":
			stepsNode = f.Value
			s.Steps = d.stepList(f.Value, "steps", 2)
		case "defaults":
			s.Defaults, s.defaultsAt = d.defaults(f.Value)
		case "on_failure":
			s.OnFailure = d.stepList(f.Value, "on_failure", 2)
		case "fair_share":
			s.fairShareAt = nodePos(f.Value)
			s.FairShare, _ = d.Str(f.Value, at("fair_share", ""))
		case "priority":
			s.priorityAt = nodePos(f.Value)
			if v, ok := d.Int(f.Value, at("priority", "")); ok {
				s.Priority = clampInt(v) // the range is checked by validation, on the text as written
				s.priorityText = yamltext.ResolveAlias(f.Value).Value
			}
		default:
			d.UnknownField(f, at("", ""), topFields, "")
		}
	}
	if stepsNode == nil {
		// Reported by validation as no_steps; nothing structural is wrong.
		s.Steps = nil
	}
	return s
}

// defaultsFields are the fields of the top-level `defaults` mapping.
var defaultsFields = []string{"retry", "timeout_secs"}

// defaults decodes the top-level `defaults` mapping. The returned step holds the positions and
// texts of its fields for validation (its ID is "").
func (d *decoder) defaults(n *yaml.Node) (Defaults, *Step) {
	n = yamltext.ResolveAlias(n)
	holder := &Step{Pos: nodePos(n), fields: map[string]Pos{}}
	var out Defaults
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return out, holder
	}
	if n.Kind != yaml.MappingNode {
		d.Add(CodeWrongType, n, at("defaults", ""), fmt.Sprintf("`defaults` must be a mapping such as `{retry: {max_attempts: 3}, timeout_secs: 600}`; got %s", yamltext.DescribeNode(n)), "")
		return out, holder
	}
	for _, f := range d.Mapping(n, at("defaults", "")) {
		fp := join("defaults", f.Key)
		holder.fields[f.Key] = nodePos(f.Value)
		switch f.Key {
		case "timeout_secs":
			if v, ok := d.Number(f.Value, at(fp, "")); ok {
				out.TimeoutSecs = v
				holder.keepText("timeout_secs", f.Value)
			}
		case "retry":
			out.Retry = d.retry(f.Value, fp, holder)
		default:
			elsewhere := ""
			if contains(policyFields, f.Key) || contains(commonStepFields, f.Key) {
				elsewhere = fmt.Sprintf("only retry and timeout_secs have defaults; set `%s` on each step", f.Key)
			}
			d.UnknownField(f, at("defaults", ""), defaultsFields, elsewhere)
		}
	}
	return out, holder
}

func (d *decoder) inputs(n *yaml.Node) []Input {
	n = yamltext.ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.Add(CodeWrongType, n, at("inputs", ""), fmt.Sprintf("`inputs` must be a mapping of input name to declaration; got %s", yamltext.DescribeNode(n)), "")
		return nil
	}
	var out []Input
	for _, f := range d.Mapping(n, at("inputs", "")) {
		in := Input{Name: f.Key, Type: "any", Pos: nodePos(f.KeyNode)}
		path := "inputs." + f.Key
		v := yamltext.ResolveAlias(f.Value)
		switch {
		case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		case v.Kind == yaml.ScalarNode && v.Tag == "!!str":
			in.Type = v.Value // shorthand: `date: string`
		case v.Kind == yaml.MappingNode:
			for _, g := range d.Mapping(v, at(path, "")) {
				fp := join(path, g.Key)
				switch g.Key {
				case "type":
					in.Type, _ = d.Str(g.Value, at(fp, ""))
				case "format":
					in.Format, _ = d.Str(g.Value, at(fp, ""))
				case "description":
					in.Description, _ = d.Str(g.Value, at(fp, ""))
				case "required":
					in.Required, _ = d.Bool(g.Value, at(fp, ""))
				case "default":
					in.Default, in.HasDefault = d.Value(g.Value, at(fp, ""), 3), true
				case "enum":
					ev := yamltext.ResolveAlias(g.Value)
					if ev.Kind != yaml.SequenceNode {
						d.Add(CodeWrongType, ev, at(fp, ""), fmt.Sprintf("`%s` must be a list of allowed values; got %s", fp, yamltext.DescribeNode(ev)), "")
						continue
					}
					list, _ := d.Value(ev, at(fp, ""), 3).([]any)
					if list == nil {
						list = []any{}
					}
					in.Enum = list
				default:
					d.UnknownField(g, at(path, ""), []string{"type", "format", "required", "default", "description", "enum"}, "")
				}
			}
		default:
			d.Add(CodeWrongType, v, at(path, ""), fmt.Sprintf("input %q must be a mapping such as `{type: string, required: true}` or a type name; got %s", f.Key, yamltext.DescribeNode(v)), "")
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
		d.Add(CodeWrongType, n, at(path, ""), fmt.Sprintf("`%s` must be a list of steps; got %s", yamltext.LastKey(path), yamltext.DescribeNode(n)), "")
		return nil
	}
	steps := make([]*Step, 0, len(n.Content))
	for i, c := range n.Content {
		if d.TooLarge {
			return steps
		}
		d.steps++
		if d.steps > MaxSteps {
			d.TooLarge = true
			d.Add(CodeTooLarge, c, at(path, ""), fmt.Sprintf("the spec declares more than %d steps", MaxSteps), "")
			return steps
		}
		if st := d.step(c, fmt.Sprintf("%s[%d]", path, i), depth+1); st != nil {
			steps = append(steps, st)
		}
	}
	return steps
}

var commonStepFields = []string{"id", "kind", "description", "depends_on", "timeout_secs"}
var policyFields = []string{"retry", "idempotency_key", "idempotency_scope", "idempotency_ttl_secs", "cache", "reads", "writes", "resources"}

// kindFields lists the fields each kind accepts besides commonStepFields.
var kindFields = map[Kind][]string{
	KindTool:       append([]string{"tool", "args", "pool"}, policyFields...),
	KindToolRemote: append([]string{"dcc", "tool", "args"}, policyFields...),
	KindForeach:    {"items", "as", "concurrency", "on_any_fail", "steps"},
	KindParallel:   {"steps", "on_any_fail"},
	KindBranch:     {"on", "condition", "then", "else"},
	KindApprove:    {"prompt"},
	KindWorkflow:   {"workflow", "inputs", "retry"},
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
		d.TooLarge = true
		d.Add(CodeTooLarge, n, at(path, ""), fmt.Sprintf("steps nest deeper than %d levels", MaxDepth), "")
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.Add(CodeWrongType, n, at(path, ""), fmt.Sprintf("a step must be a mapping with `id` and `kind` (or `tool`); got %s", yamltext.DescribeNode(n)), "")
		return nil
	}
	st := &Step{Pos: nodePos(n), fields: map[string]Pos{}}
	fields := d.Mapping(n, at(path, ""))
	byKey := make(map[string]yamltext.Field, len(fields))
	for _, f := range fields {
		byKey[f.Key] = f
		st.fields[f.Key] = nodePos(f.Value)
	}
	if f, ok := byKey["id"]; ok {
		st.ID, _ = d.Str(f.Value, at(join(path, "id"), ""))
	}
	id := st.ID

	// Kind: explicit, or inferred from the shorthand `tool:` (and `dcc:` + `tool:`).
	if f, ok := byKey["kind"]; ok {
		k, _ := d.Str(f.Value, at(join(path, "kind"), id))
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
			d.Add(CodeUnknownKind, f.Value, at(join(path, "kind"), id), fmt.Sprintf("unknown step kind %q", k), hint)
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
			d.Add(CodeMissingField, n, at(join(path, "kind"), id), "missing field `kind`", hint)
		}
	}

	// A step whose kind is unknown stays in the tree (so ids, dependencies and templates are still
	// checked) with an empty Kind; its fields are checked against every kind's fields.
	allowed := append(append([]string(nil), commonStepFields...), kindFields[st.Kind]...)
	if st.Kind == "" {
		allowed = allStepFields()
	}
	for _, f := range fields {
		fp := join(path, f.Key)
		switch f.Key {
		case "id", "kind":
		case "description":
			st.Description, _ = d.Str(f.Value, at(fp, id))
		case "depends_on":
			st.DependsOn, st.HasDependsOn = d.StrList(f.Value, at(fp, id)), true
			if st.DependsOn == nil {
				st.DependsOn = []string{}
			}
		case "timeout_secs":
			if v, ok := d.Number(f.Value, at(fp, id)); ok {
				st.Policy.TimeoutSecs = v
				st.keepText("timeout_secs", f.Value)
			}
		default:
			if !contains(allowed, f.Key) {
				elsewhere := ""
				if ks := kindsWithField(f.Key); len(ks) > 0 {
					elsewhere = fmt.Sprintf("`%s` is only valid on %s steps", f.Key, strings.Join(ks, "/"))
				}
				d.UnknownField(f, at(path, id), allowed, elsewhere)
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
func (d *decoder) kindField(st *Step, f yamltext.Field, fp string, depth int) {
	id := st.ID
	switch f.Key {
	case "tool":
		st.Tool, _ = d.Str(f.Value, at(fp, id))
	case "dcc":
		st.DCC, _ = d.Str(f.Value, at(fp, id))
	case "pool":
		st.Pool, _ = d.Str(f.Value, at(fp, id))
	case "args":
		v := yamltext.ResolveAlias(f.Value)
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return
		}
		if v.Kind != yaml.MappingNode {
			d.Add(CodeWrongType, v, at(fp, id), fmt.Sprintf("`args` must be a mapping of argument name to value; got %s", yamltext.DescribeNode(v)), "")
			return
		}
		st.Args, _ = d.Value(v, at(fp, id), depth+1).(map[string]any)
	case "items":
		st.Items = d.Value(f.Value, at(fp, id), depth+1)
	case "as":
		st.As, _ = d.Str(f.Value, at(fp, id))
	case "concurrency":
		st.Concurrency = 1 // a wrong type is reported once, as wrong_type
		if v, ok := d.Int(f.Value, at(fp, id)); ok {
			st.Concurrency = clampInt(v) // the range is checked by validation, on the text as written
			st.keepText("concurrency", f.Value)
		}
	case "on_any_fail":
		s, _ := d.Str(f.Value, at(fp, id))
		st.OnAnyFail = OnAnyFail(s)
	case "steps":
		st.Steps = d.stepList(f.Value, fp, depth+1)
	case "on", "condition":
		if _, dup := st.fields["on"]; dup && f.Key == "condition" {
			d.Add(CodeInvalidValue, f.KeyNode, at(fp, id), "give the branch condition once, as `on` or as `condition`, not both", "")
			return
		}
		st.On = d.Value(f.Value, at(fp, id), depth+1)
		st.fields["on"] = nodePos(f.Value)
	case "then":
		st.Then = d.stepList(f.Value, fp, depth+1)
	case "else":
		st.Else = d.stepList(f.Value, fp, depth+1)
	case "prompt":
		st.Prompt, _ = d.Str(f.Value, at(fp, id))
	case "workflow":
		st.Workflow, _ = d.Str(f.Value, at(fp, id))
	case "inputs":
		v := yamltext.ResolveAlias(f.Value)
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return
		}
		if v.Kind != yaml.MappingNode {
			d.Add(CodeWrongType, v, at(fp, id), fmt.Sprintf("`inputs` must be a mapping of input name to value; got %s", yamltext.DescribeNode(v)), "")
			return
		}
		st.Inputs, _ = d.Value(v, at(fp, id), depth+1).(map[string]any)
	case "retry":
		st.Policy.Retry = d.retry(f.Value, fp, st)
	case "idempotency_key":
		st.Policy.IdempotencyKey, _ = d.Str(f.Value, at(fp, id))
	case "idempotency_scope":
		s, _ := d.Str(f.Value, at(fp, id))
		st.Policy.IdempotencyScope = Scope(s)
	case "idempotency_ttl_secs":
		if v, ok := d.Int(f.Value, at(fp, id)); ok {
			st.Policy.IdempotencyTTLSecs = v
			st.keepText("idempotency_ttl_secs", f.Value)
		}
	case "reads":
		st.Reads = d.paths(f.Value, fp, id, "reads")
	case "writes":
		st.Writes = d.paths(f.Value, fp, id, "writes")
	case "cache":
		st.Policy.Cache = d.cache(f.Value, fp, st, depth)
	case "resources":
		st.Resources = d.resources(f.Value, fp, st)
	}
}

// resources decodes a step's `resources`: a mapping of resource name to an integer amount. The
// names and ranges are checked by validation; which names exist is the engine's to say
// (Spec.CheckResources).
func (d *decoder) resources(n *yaml.Node, path string, st *Step) map[string]int {
	id := st.ID
	v := yamltext.ResolveAlias(n)
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		return nil
	case v.Kind != yaml.MappingNode:
		d.Add(CodeWrongType, v, at(path, id), fmt.Sprintf("`resources` must be a mapping of resource name to amount such as `{houdini: 1, gpu: 2}`; got %s", yamltext.DescribeNode(v)), "")
		return nil
	}
	out := map[string]int{}
	for _, f := range d.Mapping(v, at(path, id)) {
		key := "resources." + f.Key
		st.fields[key] = nodePos(f.Value)
		if amount, ok := d.Int(f.Value, at(join(path, f.Key), id)); ok {
			out[f.Key] = clampInt(amount)
			st.keepText(key, f.Value)
		}
	}
	return out
}

// paths decodes `reads` or `writes`: a path (template or glob) or a list of them.
func (d *decoder) paths(n *yaml.Node, path, id, key string) []string {
	v := yamltext.ResolveAlias(n)
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		return nil
	case v.Kind == yaml.ScalarNode && v.Tag == "!!str":
		return []string{v.Value}
	case v.Kind == yaml.SequenceNode:
		out := d.StrList(v, at(path, id))
		if out == nil {
			out = []string{}
		}
		return out
	}
	d.Add(CodeWrongType, v, at(path, id), fmt.Sprintf("`%s` must be a path or a list of paths (templates and glob patterns such as \"{{inputs.shot}}/*.usd\"); got %s", key, yamltext.DescribeNode(v)), "")
	return nil
}

// cache decodes `cache`: true, false, or a mapping of version, ttl_secs and key.
func (d *decoder) cache(n *yaml.Node, path string, st *Step, depth int) *CachePolicy {
	id := st.ID
	v := yamltext.ResolveAlias(n)
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		return nil
	case v.Kind == yaml.ScalarNode && v.Tag == "!!bool":
		on, _ := d.Bool(v, at(path, id))
		if !on {
			return nil
		}
		return &CachePolicy{}
	case v.Kind != yaml.MappingNode:
		d.Add(CodeWrongType, v, at(path, id), fmt.Sprintf("`cache` must be true, false or a mapping such as `{version: \"2\", ttl_secs: 86400}`; got %s", yamltext.DescribeNode(v)), "")
		return nil
	}
	c := &CachePolicy{}
	allowed := []string{"version", "ttl_secs", "key"}
	for _, f := range d.Mapping(v, at(path, id)) {
		fp := join(path, f.Key)
		st.fields["cache."+f.Key] = nodePos(f.Value)
		switch f.Key {
		case "version":
			c.Version, _ = d.Str(f.Value, at(fp, id))
		case "ttl_secs":
			if ttl, ok := d.Int(f.Value, at(fp, id)); ok {
				c.TTLSecs = ttl
				st.keepText("cache.ttl_secs", f.Value)
			}
		case "key":
			c.Key = d.Value(f.Value, at(fp, id), depth+1)
		default:
			d.UnknownField(f, at(path, id), allowed, "")
		}
	}
	return c
}

func (d *decoder) applyDefaults(st *Step, byKey map[string]yamltext.Field) {
	switch st.Kind {
	case KindTool, KindToolRemote:
		if st.Args == nil {
			st.Args = map[string]any{}
		}
		if st.Policy.IdempotencyKey != "" && st.Policy.IdempotencyScope == "" {
			st.Policy.IdempotencyScope = ScopeWorkflow
		}
	case KindWorkflow:
		if st.Inputs == nil {
			st.Inputs = map[string]any{}
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
		d.Add(CodeWrongType, n, at(path, id), fmt.Sprintf("`retry` must be a mapping such as `{max_attempts: 3}`; got %s", yamltext.DescribeNode(n)), "")
		return nil
	}
	r := DefaultRetryPolicy()
	allowed := []string{"max_attempts", "backoff", "multiplier", "initial_delay_ms", "max_delay_ms", "jitter", "retry_on"}
	hasMax := false
	for _, f := range d.Mapping(n, at(path, id)) {
		fp := join(path, f.Key)
		st.fields["retry."+f.Key] = nodePos(f.Value)
		switch f.Key {
		case "max_attempts":
			hasMax = true // a wrong type is reported once, as wrong_type
			if v, ok := d.Int(f.Value, at(fp, id)); ok {
				r.MaxAttempts = clampInt(v)
				st.keepText("retry.max_attempts", f.Value)
			}
		case "backoff":
			s, _ := d.Str(f.Value, at(fp, id))
			r.Backoff = Backoff(s)
		case "initial_delay_ms":
			if v, ok := d.Int(f.Value, at(fp, id)); ok {
				r.InitialDelayMs = v
				st.keepText("retry.initial_delay_ms", f.Value)
			}
		case "max_delay_ms":
			if v, ok := d.Int(f.Value, at(fp, id)); ok {
				r.MaxDelayMs = v
				st.keepText("retry.max_delay_ms", f.Value)
			}
		case "jitter":
			if v, ok := d.Number(f.Value, at(fp, id)); ok {
				r.Jitter = v
			}
		case "multiplier":
			if v, ok := d.Number(f.Value, at(fp, id)); ok {
				r.Multiplier = v
				st.keepText("retry.multiplier", f.Value)
			}
		case "retry_on":
			v := yamltext.ResolveAlias(f.Value)
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				continue
			}
			r.RetryOn = d.StrList(v, at(fp, id))
			if r.RetryOn == nil {
				r.RetryOn = []string{}
			}
		default:
			d.UnknownField(f, at(path, id), allowed, "")
		}
	}
	if !hasMax {
		hint := "add `max_attempts: 3` (1 = no retry)"
		d.Add(CodeMissingField, n, at(join(path, "max_attempts"), id), "`retry` needs `max_attempts`", hint)
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
