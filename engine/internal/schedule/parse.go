package schedule

import (
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"gopkg.in/yaml.v3"
)

// Limits on schedule files. Exceeding one is a "too_large" problem, never a crash.
const (
	// MaxFileBytes is the largest schedule file accepted (4 MiB).
	MaxFileBytes = 4 << 20
	// MaxDepth is the deepest nesting of mappings and sequences accepted (the document root is 1).
	MaxDepth = 64
	// maxValues bounds the values produced while expanding YAML aliases ("billion laughs").
	maxValues = 1 << 20
)

// ParseOptions control Parse, LoadFile and LoadDir.
type ParseOptions struct {
	// File labels problems, usually the file name. LoadFile and LoadDir set it.
	File string
	// Workflows reports whether a workflow name is in the catalog; nil accepts every name.
	Workflows func(name string) bool
}

// Parse decodes and validates one schedule file: a YAML (or JSON) mapping
//
//	schedules:
//	  - id: nightly_cleanup
//	    workflow: scene_cleanup
//	    inputs: {scope: all-scenes}
//	    trigger: {kind: cron, expression: "0 0 3 * * *", timezone: UTC, jitter_secs: 120}
//
// It returns the specs with the defaults applied (enabled true, max_concurrent 1, catchup
// false, timezone "UTC" for cron), or nil and a *ValidationError listing every problem of every
// schedule, disabled ones included. An empty file, or `schedules:` with no list, has no
// schedules and no problem.
func Parse(data []byte, opts ParseOptions) ([]Spec, error) {
	ls, ps := decodeFile(data, opts.File)
	return finish(ls, ps, opts.Workflows)
}

// finish checks the decoded schedules of one or more files and reports every problem, the
// structural ones (from decoding) and the semantic ones.
func finish(ls []*located, structural []Problem, workflows func(string) bool) ([]Spec, error) {
	ps, cs := checkSet(ls, workflows)
	if len(structural) > 0 {
		all := append(append([]Problem(nil), structural...), ps...)
		sortProblems(all)
		return nil, newValidationError(dedupProblems(all))
	}
	if len(ps) > 0 {
		return nil, newValidationError(ps)
	}
	specs := make([]Spec, len(cs))
	for i, c := range cs {
		specs[i] = c.spec
	}
	return specs, nil
}

// LoadFile reads and parses one schedule file (any name). opts.File defaults to path.
func LoadFile(path string, opts ParseOptions) ([]Spec, error) {
	if opts.File == "" {
		opts.File = path
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, opts)
}

// LoadDir parses every *.schedules.yaml and *.schedules.yml file of dir (not recursively, in
// name order), then the files dir's SKILL.md lists in its front matter that are not among them
// (see SkillFile), as one set: ids and webhook paths must be unique across the files. Problems name
// each file by its path. A directory without schedule files has no schedules. opts.File is
// ignored.
func LoadDir(dir string, opts ParseOptions) ([]Spec, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading schedules directory %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".schedules.yaml") && !strings.HasSuffix(n, ".schedules.yml") {
			continue
		}
		if e.Type()&fs.ModeSymlink != 0 { // follow links to files
			if st, err := os.Stat(filepath.Join(dir, n)); err != nil || !st.Mode().IsRegular() {
				continue
			}
		} else if !e.Type().IsRegular() {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	listed, problems := skillSchedules(dir)
	for _, n := range listed {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	var all []*located
	for _, n := range names {
		p := filepath.Join(dir, n)
		data, err := readFile(p)
		if err != nil {
			return nil, err
		}
		ls, ps := decodeFile(data, p)
		problems = append(problems, ps...)
		all = append(all, ls...)
	}
	return finish(all, problems, opts.Workflows)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading schedule file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading schedule file %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, newValidationError([]Problem{{Code: CodeTooLarge, File: path, Message: fmt.Sprintf(
			"the schedule file is larger than %d bytes (%d MiB); split it into several *.schedules.yaml files", MaxFileBytes, MaxFileBytes>>20)}})
	}
	return data, nil
}

// decoder turns the yaml.Node tree of one file into located specs, collecting structural
// problems (malformed YAML, wrong types, unknown or duplicate fields, limits).
type decoder struct {
	file     string
	problems []Problem
	values   int
	tooLarge bool
}

func (d *decoder) add(code string, n *yaml.Node, where, msg, hint string) {
	p := Problem{Code: code, File: d.file, Message: msg, Hint: hint}
	if where != "" {
		p.Path = where
	}
	if hint != "" {
		p.Message += "; " + hint
	}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.problems = append(d.problems, p)
}

// decodeFile returns the located specs of one file and its structural problems. The specs
// still need checkSet.
func decodeFile(data []byte, file string) ([]*located, []Problem) {
	d := &decoder{file: file}
	fail := func(code string, line, col int, msg string) ([]*located, []Problem) {
		return nil, []Problem{{Code: code, File: file, Line: line, Column: col, Message: msg}}
	}
	if len(data) > MaxFileBytes {
		return fail(CodeTooLarge, 0, 0, fmt.Sprintf("the schedule file is %d bytes; the limit is %d bytes (%d MiB)", len(data), MaxFileBytes, MaxFileBytes>>20))
	}
	if !utf8.Valid(data) {
		off := yamltext.InvalidUTF8Offset(data)
		line, col := yamltext.LineCol(data, off)
		return fail(CodeParseError, line, col, fmt.Sprintf("the schedule file is not valid UTF-8 (bad byte 0x%02x at offset %d); save it as UTF-8", data[off], off))
	}
	if depth := yamltext.FlowDepth(data); depth > MaxDepth {
		return fail(CodeTooLarge, 0, 0, fmt.Sprintf("the schedule file nests %d levels deep; the limit is %d", depth, MaxDepth))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, col, msg := yamltext.ErrorPosition(err)
		return fail(CodeParseError, line, col, "malformed YAML: "+msg)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil // empty file
	}
	root := yamltext.ResolveAlias(doc.Content[0])
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		d.add(CodeWrongType, root, "", fmt.Sprintf("a schedule file must be a mapping with a `schedules:` list; got %s", yamltext.DescribeNode(root)),
			"start the file with `schedules:` followed by a list of schedules")
		return nil, d.problems
	}
	var out []*located
	for _, f := range d.mapping(root, "") {
		switch f.key {
		case "schedules":
			out = d.scheduleList(f.value)
		default:
			d.unknownField(f, "", "", []string{"schedules"}, "")
		}
	}
	if d.tooLarge {
		return nil, d.problems
	}
	return out, d.problems
}

// dedupProblems drops a semantic problem that repeats a structural one at the same place (a
// field of the wrong type is also seen as missing).
func dedupProblems(ps []Problem) []Problem {
	seen := map[string]bool{}
	out := ps[:0]
	for _, p := range ps {
		k := p.File + "\x00" + p.Path
		if p.Code == CodeMissingField && seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, p)
	}
	return out
}

type field struct {
	key   string
	keyN  *yaml.Node
	value *yaml.Node
}

// mapping returns the fields of a mapping node in order, reporting duplicate and non-string keys.
func (d *decoder) mapping(n *yaml.Node, where string) []field {
	n = yamltext.ResolveAlias(n)
	fields := make([]field, 0, len(n.Content)/2)
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := yamltext.ResolveAlias(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.add(CodeWrongType, k, where, "mapping keys must be strings", "")
			continue
		}
		if seen[k.Value] {
			d.add(CodeParseError, k, join(where, k.Value), fmt.Sprintf("duplicate key %q", k.Value), "keep one of them")
			continue
		}
		seen[k.Value] = true
		fields = append(fields, field{key: k.Value, keyN: k, value: v})
	}
	return fields
}

func (d *decoder) unknownField(f field, where, owner string, allowed []string, elsewhere string) {
	msg := fmt.Sprintf("unknown field %q", f.key)
	if owner != "" {
		msg = owner + ": " + msg
	}
	var hint string
	switch sug := yamltext.Suggest(f.key, allowed); {
	case sug != "":
		hint = fmt.Sprintf("did you mean %q?", sug)
	case elsewhere != "":
		hint = elsewhere
	default:
		hint = "allowed fields: " + strings.Join(allowed, ", ")
	}
	d.add(CodeUnknownField, f.keyN, join(where, f.key), msg, hint)
}

func join(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}

var scheduleFields = []string{"id", "workflow", "inputs", "enabled", "max_concurrent", "catchup", "trigger"}
var triggerAllFields = []string{"kind", "expression", "timezone", "jitter_secs", "every", "path", "secret_env", "signature", "tolerance_secs"}

func (d *decoder) scheduleList(n *yaml.Node) []*located {
	n = yamltext.ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.add(CodeWrongType, n, "schedules", fmt.Sprintf("`schedules` must be a list of schedules; got %s", yamltext.DescribeNode(n)),
			"write each schedule as a list item starting with `- id: …`")
		return nil
	}
	out := make([]*located, 0, len(n.Content))
	for i, c := range n.Content {
		if l := d.schedule(yamltext.ResolveAlias(c), i); l != nil {
			out = append(out, l)
		}
	}
	return out
}

func (d *decoder) schedule(n *yaml.Node, index int) *located {
	where := fmt.Sprintf("schedules[%d]", index)
	if n.Kind != yaml.MappingNode {
		d.add(CodeWrongType, n, where, fmt.Sprintf("%s must be a mapping with id, workflow and trigger; got %s", where, yamltext.DescribeNode(n)), "")
		return nil
	}
	l := &located{file: d.file, index: index, pos: map[string]pos{"": {n.Line, n.Column}}}
	s := &l.spec
	s.Enabled, s.MaxConcurrent, s.Source, s.Line = true, 1, d.file, n.Line
	fields := d.mapping(n, where)
	// The id first, so that every message about this schedule names it.
	for _, f := range fields {
		if f.key == "id" {
			s.ID, _ = d.str(f.value, join(where, "id"), "id", "")
		}
	}
	owner := l.name()
	for _, f := range fields {
		fw := join(where, f.key)
		l.pos[f.key] = nodePos(f.value)
		switch f.key {
		case "id":
		case "workflow":
			s.Workflow, _ = d.str(f.value, fw, "workflow", owner)
		case "inputs":
			v := yamltext.ResolveAlias(f.value)
			switch {
			case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
			case v.Kind != yaml.MappingNode:
				d.add(CodeWrongType, v, fw, fmt.Sprintf("%s: `inputs` must be a mapping of input name to value; got %s", owner, yamltext.DescribeNode(v)), "")
			default:
				s.Inputs, _ = d.value(v, "inputs", fw, owner, l.pos, 3).(map[string]any)
			}
		case "enabled":
			if b, ok := d.boolean(f.value, fw, "enabled", owner); ok {
				s.Enabled = b
			}
		case "catchup":
			s.Catchup, _ = d.boolean(f.value, fw, "catchup", owner)
		case "max_concurrent":
			if v, ok := d.integer(f.value, fw, "max_concurrent", owner); ok {
				s.MaxConcurrent = clampInt(v)
			}
		case "trigger":
			d.trigger(f.value, fw, owner, l)
		default:
			d.unknownField(f, where, owner, scheduleFields, "")
		}
	}
	if _, ok := l.pos["trigger"]; !ok {
		hint := `add e.g. trigger: {kind: cron, expression: "0 0 3 * * *"}`
		d.add(CodeMissingField, n, join(where, "trigger"), owner+": missing field `trigger`", hint)
		l.skipTrigger = true // reported here, not again by checkSpec
	}
	return l
}

func (d *decoder) trigger(n *yaml.Node, where, owner string, l *located) {
	n = yamltext.ResolveAlias(n)
	t := &l.spec.Trigger
	if n.Kind != yaml.MappingNode {
		d.add(CodeWrongType, n, where, fmt.Sprintf("%s: `trigger` must be a mapping with a `kind`; got %s", owner, yamltext.DescribeNode(n)),
			`write e.g. trigger: {kind: cron, expression: "0 0 3 * * *"}`)
		l.skipTrigger = true
		return
	}
	fields := d.mapping(n, where)
	for _, f := range fields {
		if f.key == "kind" {
			k, _ := d.str(f.value, join(where, "kind"), "trigger.kind", owner)
			t.Kind = TriggerKind(k)
		}
	}
	allowed, known := triggerFieldsByKind[t.Kind]
	if !known {
		allowed = triggerAllFields[1:]
	}
	if t.Kind == KindCron {
		t.Timezone = "UTC"
	}
	for _, f := range fields {
		fw := join(where, f.key)
		name := "trigger." + f.key
		l.pos[name] = nodePos(f.value)
		if f.key == "kind" {
			continue
		}
		if !contains(allowed, f.key) {
			elsewhere := ""
			if k := kindOfField(f.key); k != "" {
				elsewhere = fmt.Sprintf("`%s` is only valid on %s triggers", f.key, k)
			}
			d.unknownField(f, where, owner, append([]string{"kind"}, allowed...), elsewhere)
			continue
		}
		switch f.key {
		case "expression":
			t.Expression, _ = d.str(f.value, fw, name, owner)
		case "timezone":
			t.Timezone, _ = d.str(f.value, fw, name, owner)
		case "jitter_secs":
			if v, ok := d.integer(f.value, fw, name, owner); ok {
				t.JitterSecs = clampInt(v)
			}
		case "every":
			v := yamltext.ResolveAlias(f.value)
			if v.Kind == yaml.ScalarNode && (v.Tag == "!!int" || v.Tag == "!!float") {
				d.add(CodeInvalidInterval, v, fw, fmt.Sprintf("%s: `trigger.every` is the number %s, not a duration", owner, v.Value),
					fmt.Sprintf(`write a Go duration with a unit, e.g. every: "%ss" or "15m"`, v.Value))
				continue
			}
			t.Every, _ = d.str(f.value, fw, name, owner)
		case "path":
			t.Path, _ = d.str(f.value, fw, name, owner)
		case "secret_env":
			t.SecretEnv, _ = d.str(f.value, fw, name, owner)
		case "signature":
			t.Signature, _ = d.str(f.value, fw, name, owner)
		case "tolerance_secs":
			if v, ok := d.integer(f.value, fw, name, owner); ok {
				t.ToleranceSecs = clampInt(v)
			}
		}
	}
}

func nodePos(n *yaml.Node) pos {
	if n == nil {
		return pos{}
	}
	return pos{n.Line, n.Column}
}

// ---- scalars ---------------------------------------------------------------------------------

func (d *decoder) str(n *yaml.Node, where, name, owner string) (string, bool) {
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
		hint = fmt.Sprintf("quote it: %q", n.Value)
	}
	d.add(CodeWrongType, n, where, prefix(owner)+fmt.Sprintf("`%s` must be a string; got %s", name, yamltext.DescribeNode(n)), hint)
	return "", false
}

func (d *decoder) boolean(n *yaml.Node, where, name, owner string) (bool, bool) {
	n = yamltext.ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	d.add(CodeWrongType, n, where, prefix(owner)+fmt.Sprintf("`%s` must be true or false; got %s", name, yamltext.DescribeNode(n)), "write true or false")
	return false, false
}

func (d *decoder) integer(n *yaml.Node, where, name, owner string) (int64, bool) {
	n = yamltext.ResolveAlias(n)
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		var f float64
		if err := n.Decode(&f); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f), true
		}
	}
	d.add(CodeWrongType, n, where, prefix(owner)+fmt.Sprintf("`%s` must be a whole number; got %s", name, yamltext.DescribeNode(n)), "")
	return 0, false
}

func prefix(owner string) string {
	if owner == "" {
		return ""
	}
	return owner + ": "
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

// value converts a node into a JSON value (map[string]any, []any, string, float64, bool, nil),
// recording the position of every value under its field path (e.g. "inputs.files[0]").
func (d *decoder) value(n *yaml.Node, field, where, owner string, at map[string]pos, depth int) any {
	d.values++
	if d.values > maxValues || depth > MaxDepth {
		if !d.tooLarge {
			d.tooLarge = true
			msg := fmt.Sprintf("`%s` expands to more than %d values (YAML aliases?)", field, maxValues)
			if depth > MaxDepth {
				msg = fmt.Sprintf("`%s` nests deeper than %d levels", field, MaxDepth)
			}
			d.add(CodeTooLarge, n, where, prefix(owner)+msg, "")
		}
		return nil
	}
	n = yamltext.ResolveAlias(n)
	at[field] = nodePos(n)
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
			if v, ok := spec.NumberValue(n.Value); ok { // decimal text: a 64-bit id stays exact
				return v
			}
			var f float64
			if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				d.add(CodeWrongType, n, where, prefix(owner)+fmt.Sprintf("`%s`: %q is not a JSON number", field, n.Value), "quote it to pass a string")
				return nil
			}
			return f
		}
		return n.Value
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			idx := "[" + strconv.Itoa(i) + "]"
			out = append(out, d.value(c, field+idx, where+idx, owner, at, depth+1))
		}
		return out
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := yamltext.ResolveAlias(n.Content[i]), n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				for _, src := range yamltext.MergeSources(v) {
					if m, ok := d.value(src, field, where, owner, at, depth).(map[string]any); ok {
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
				d.add(CodeWrongType, k, where, prefix(owner)+fmt.Sprintf("`%s`: mapping keys must be strings", field), "")
				continue
			}
			out[k.Value] = d.value(v, field+"."+k.Value, where+"."+k.Value, owner, at, depth+1)
		}
		return out
	}
	return nil
}

// ---- text-level checks -----------------------------------------------------------------------
