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
	"strings"
	"unicode/utf8"

	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
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
// problems (malformed YAML, wrong types, unknown or duplicate fields, limits) in the embedded
// yamltext.Decoder.
type decoder struct {
	yamltext.Decoder
}

// where locates a field of the schedule l for problems: path is its path in the file, name the
// field as messages quote it ("trigger.kind"); messages start with the schedule's name.
func (l *located) where(path, name string) yamltext.At {
	return yamltext.At{Path: path, Name: name, Owner: l.name(), ScheduleID: l.spec.ID}
}

// decodeFile returns the located specs of one file and its structural problems. The specs
// still need checkSet.
func decodeFile(data []byte, file string) ([]*located, []Problem) {
	d := &decoder{yamltext.Decoder{File: file, MaxValues: maxValues, MaxDepth: MaxDepth}}
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
		d.Add(CodeWrongType, root, yamltext.At{}, fmt.Sprintf("a schedule file must be a mapping with a `schedules:` list; got %s", yamltext.DescribeNode(root)),
			"start the file with `schedules:` followed by a list of schedules")
		return nil, d.Problems
	}
	var out []*located
	for _, f := range d.Mapping(root, yamltext.At{}) {
		switch f.Key {
		case "schedules":
			out = d.scheduleList(f.Value)
		default:
			d.UnknownField(f, yamltext.At{}, []string{"schedules"}, "")
		}
	}
	if d.TooLarge {
		return nil, d.Problems
	}
	return out, d.Problems
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

func join(where, key string) string { return yamltext.Join(where, key) }

var scheduleFields = []string{"id", "workflow", "inputs", "enabled", "max_concurrent", "catchup", "trigger"}
var triggerAllFields = []string{"kind", "expression", "timezone", "jitter_secs", "every", "path", "secret_env", "signature", "tolerance_secs"}

func (d *decoder) scheduleList(n *yaml.Node) []*located {
	n = yamltext.ResolveAlias(n)
	if yamltext.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.Add(CodeWrongType, n, yamltext.At{Path: "schedules"}, fmt.Sprintf("`schedules` must be a list of schedules; got %s", yamltext.DescribeNode(n)),
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
		d.Add(CodeWrongType, n, yamltext.At{Path: where}, fmt.Sprintf("%s must be a mapping with id, workflow and trigger; got %s", where, yamltext.DescribeNode(n)), "")
		return nil
	}
	l := &located{file: d.File, index: index, pos: map[string]pos{"": {n.Line, n.Column}}}
	s := &l.spec
	s.Enabled, s.MaxConcurrent, s.Source, s.Line = true, 1, d.File, n.Line
	fields := d.Mapping(n, yamltext.At{Path: where})
	// The id first, so that every message about this schedule names it.
	for _, f := range fields {
		if f.Key == "id" {
			s.ID, _ = d.Str(f.Value, l.where(join(where, "id"), "id"))
		}
	}
	for _, f := range fields {
		at := l.where(join(where, f.Key), f.Key)
		l.pos[f.Key] = nodePos(f.Value)
		switch f.Key {
		case "id":
		case "workflow":
			s.Workflow, _ = d.Str(f.Value, at)
		case "inputs":
			v := yamltext.ResolveAlias(f.Value)
			switch {
			case yamltext.IsNull(v):
			case v.Kind != yaml.MappingNode:
				d.Add(CodeWrongType, v, at, fmt.Sprintf("`inputs` must be a mapping of input name to value; got %s", yamltext.DescribeNode(v)), "")
			default:
				// Every value's position, for the problems validation finds in it.
				d.Visit = func(at yamltext.At, n *yaml.Node) { l.pos[at.Name] = nodePos(n) }
				s.Inputs, _ = d.Value(v, at, 3).(map[string]any)
				d.Visit = nil
			}
		case "enabled":
			if b, ok := d.Bool(f.Value, at); ok {
				s.Enabled = b
			}
		case "catchup":
			s.Catchup, _ = d.Bool(f.Value, at)
		case "max_concurrent":
			if v, ok := d.smallInt(f.Value, at); ok {
				s.MaxConcurrent = v
			}
		case "trigger":
			d.trigger(f.Value, at, l)
		default:
			d.UnknownField(f, l.where(where, ""), scheduleFields, "")
		}
	}
	if _, ok := l.pos["trigger"]; !ok {
		hint := `add e.g. trigger: {kind: cron, expression: "0 0 3 * * *"}`
		d.Add(CodeMissingField, n, l.where(join(where, "trigger"), "trigger"), "missing field `trigger`", hint)
		l.skipTrigger = true // reported here, not again by checkSpec
	}
	return l
}

func (d *decoder) trigger(n *yaml.Node, at yamltext.At, l *located) {
	n = yamltext.ResolveAlias(n)
	t := &l.spec.Trigger
	if n.Kind != yaml.MappingNode {
		d.Add(CodeWrongType, n, at, fmt.Sprintf("`trigger` must be a mapping with a `kind`; got %s", yamltext.DescribeNode(n)),
			`write e.g. trigger: {kind: cron, expression: "0 0 3 * * *"}`)
		l.skipTrigger = true
		return
	}
	fields := d.Mapping(n, at)
	for _, f := range fields {
		if f.Key == "kind" {
			k, _ := d.Str(f.Value, at.Key("kind"))
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
		fat := at.Key(f.Key) // Name "trigger.<key>"
		l.pos[fat.Name] = nodePos(f.Value)
		if f.Key == "kind" {
			continue
		}
		if !contains(allowed, f.Key) {
			elsewhere := ""
			if k := kindOfField(f.Key); k != "" {
				elsewhere = fmt.Sprintf("`%s` is only valid on %s triggers", f.Key, k)
			}
			d.UnknownField(f, at, append([]string{"kind"}, allowed...), elsewhere)
			continue
		}
		switch f.Key {
		case "expression":
			t.Expression, _ = d.Str(f.Value, fat)
		case "timezone":
			t.Timezone, _ = d.Str(f.Value, fat)
		case "jitter_secs":
			if v, ok := d.smallInt(f.Value, fat); ok {
				t.JitterSecs = v
			}
		case "every":
			v := yamltext.ResolveAlias(f.Value)
			if v.Kind == yaml.ScalarNode && (v.Tag == "!!int" || v.Tag == "!!float") {
				d.Add(CodeInvalidInterval, v, fat, fmt.Sprintf("`trigger.every` is the number %s, not a duration", v.Value),
					fmt.Sprintf(`write a Go duration with a unit, e.g. every: "%ss" or "15m"`, v.Value))
				continue
			}
			t.Every, _ = d.Str(f.Value, fat)
		case "path":
			t.Path, _ = d.Str(f.Value, fat)
		case "secret_env":
			t.SecretEnv, _ = d.Str(f.Value, fat)
		case "signature":
			t.Signature, _ = d.Str(f.Value, fat)
		case "tolerance_secs":
			if v, ok := d.smallInt(f.Value, fat); ok {
				t.ToleranceSecs = v
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

// smallInt returns the whole number n holds as an int. No schedule field takes one beyond ±2^31:
// such a number is an invalid_value problem that quotes it as written (the decoder saturates it
// at the int64 bounds), and ok is false.
func (d *decoder) smallInt(n *yaml.Node, at yamltext.At) (int, bool) {
	v, ok := d.Int(n, at)
	if !ok {
		return 0, false
	}
	if v > math.MaxInt32 || v < math.MinInt32 {
		d.Add(CodeInvalidValue, n, at, fmt.Sprintf("`%s` is %s, beyond any value it accepts", at.Name, yamltext.ResolveAlias(n).Value),
			fmt.Sprintf("use a number from %d to %d", math.MinInt32, math.MaxInt32))
		return 0, false
	}
	return int(v), true
}

// ---- text-level checks -----------------------------------------------------------------------
