package schedule

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/template"
	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
)

var (
	idRe        = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	envNameRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	validIDHint = "use 1 to 128 letters, digits, '_', '.' or '-'"
)

// MaxJitterSecs is the largest jitter_secs accepted (one day).
const MaxJitterSecs = 86400

// Trigger context fields: the names a {{trigger.<name>}} template may use.
var TriggerFields = []string{"kind", "schedule_id", "workflow", "fired_at", "scheduled_at", "catchup", "payload", "delivery_id"}

// triggerFieldsByKind lists the Trigger fields each kind accepts besides `kind`.
var triggerFieldsByKind = map[TriggerKind][]string{
	KindCron:     {"expression", "timezone", "jitter_secs"},
	KindInterval: {"every"},
	KindWebhook:  {"path", "secret_env", "signature", "tolerance_secs"},
}

// pos is a line:column position in a file.
type pos struct{ line, col int }

// located is a spec with what is needed to place its problems in a file.
type located struct {
	spec  Spec
	file  string
	index int            // index in the file's `schedules` list; -1 for a spec given in Go
	pos   map[string]pos // field path relative to the schedule ("" = the schedule) → position
	// skipTrigger is set when decoding already reported the trigger as missing or malformed.
	skipTrigger bool
}

// at returns the position of field, or of its closest enclosing field that has one.
func (l *located) at(field string) pos {
	for {
		if p, ok := l.pos[field]; ok {
			return p
		}
		if field == "" {
			return pos{}
		}
		i := strings.LastIndexAny(field, ".[")
		if i < 0 {
			field = ""
		} else {
			field = field[:i]
		}
	}
}

// name names the schedule in messages: `schedule "nightly"`, or `schedules[2]` without an id.
func (l *located) name() string {
	switch {
	case l.spec.ID != "":
		return fmt.Sprintf("schedule %q", l.spec.ID)
	case l.index >= 0:
		return fmt.Sprintf("schedules[%d]", l.index)
	}
	return "schedule"
}

func (l *located) problem(fp fieldProblem) Problem {
	p := Problem{Code: fp.code, File: l.file, ScheduleID: l.spec.ID, Hint: fp.hint, Path: fp.field}
	if l.index >= 0 {
		p.Path = fmt.Sprintf("schedules[%d]", l.index)
		if fp.field != "" {
			p.Path += "." + fp.field
		}
	}
	at := l.at(fp.field)
	p.Line, p.Column = at.line, at.col
	p.Message = l.name() + ": " + fp.msg
	if fp.hint != "" {
		p.Message += "; " + fp.hint
	}
	return p
}

// compiled is a validated spec with its trigger compiled (nil for webhooks).
type compiled struct {
	spec Spec
	trig trigger
}

// checkSpec returns the problems of one spec, not counting those between schedules, and its
// compiled trigger when the spec has no problem at all. The sections are checked in this order,
// each adding its problems to one list: id and workflow, max_concurrent and catchup, inputs, the
// trigger of its kind, then the fields of another kind (skipped when the kind is missing or
// unknown).
func checkSpec(s *Spec, workflows func(string) bool) ([]fieldProblem, trigger) {
	var ps fieldProblems
	checkNames(s, workflows, &ps)
	checkRunLimits(s, &ps)
	ps = append(ps, checkInputs(s.Inputs)...)
	trig, known := checkTrigger(s.Trigger, &ps)
	if !known {
		return ps, nil
	}
	checkOtherKindFields(s.Trigger, &ps)
	if len(ps) > 0 {
		return ps, nil
	}
	return nil, trig
}

// fieldProblems are the problems of one spec, in the order found.
type fieldProblems []fieldProblem

// add appends a problem of field (relative to the schedule).
func (ps *fieldProblems) add(code, field, msg, hint string) {
	*ps = append(*ps, fieldProblem{code: code, field: field, msg: msg, hint: hint})
}

// checkNames checks the schedule's id and that its workflow is given and, when workflows is
// not nil, in the catalog.
func checkNames(s *Spec, workflows func(string) bool, ps *fieldProblems) {
	switch {
	case s.ID == "":
		ps.add(CodeMissingField, "id", "missing field `id`", "add `id: <name>`; "+validIDHint)
	case !idRe.MatchString(s.ID):
		ps.add(CodeInvalidID, "id", fmt.Sprintf("`id` %q is not a valid schedule id", s.ID), validIDHint)
	}
	switch {
	case s.Workflow == "":
		ps.add(CodeMissingField, "workflow", "missing field `workflow`", "add `workflow: <name of a workflow in the catalog>`")
	case workflows != nil && !workflows(s.Workflow):
		ps.add(CodeUnknownWorkflow, "workflow", fmt.Sprintf("`workflow` %q is not in the workflow catalog", s.Workflow),
			"fix the name or register the workflow (a workflow file, SKILL.md metadata or Engine registration)")
	}
}

// checkRunLimits checks max_concurrent (≥ 0) and catchup (not on webhooks).
func checkRunLimits(s *Spec, ps *fieldProblems) {
	if s.MaxConcurrent < 0 {
		ps.add(CodeInvalidValue, "max_concurrent", fmt.Sprintf("`max_concurrent` is %d", s.MaxConcurrent),
			"use 1 (the default) for one run at a time, a larger number, or 0 for no limit")
	}
	if s.Catchup && s.Trigger.Kind == KindWebhook {
		ps.add(CodeInvalidValue, "catchup", "`catchup` applies to cron and interval triggers, not webhooks", "remove `catchup: true`")
	}
}

// checkTrigger checks the fields of t's kind and returns its compiled trigger (nil for a
// webhook, or when a field has a problem). known is false when the kind is missing or unknown:
// the fields of another kind are then not checked.
func checkTrigger(t Trigger, ps *fieldProblems) (trig trigger, known bool) {
	switch t.Kind {
	case "":
		ps.add(CodeMissingField, "trigger.kind", "missing field `trigger.kind`", "add `kind: cron`, `kind: interval` or `kind: webhook` under `trigger`")
		return nil, false
	case KindCron:
		return checkCron(t, ps), true
	case KindInterval:
		return checkInterval(t, ps), true
	case KindWebhook:
		checkWebhook(t, ps)
		return nil, true
	}
	names := make([]string, len(TriggerKinds))
	for i, k := range TriggerKinds {
		names[i] = string(k)
	}
	hint := "use one of: " + strings.Join(names, ", ")
	if sug := yamltext.Suggest(string(t.Kind), names); sug != "" {
		hint = fmt.Sprintf("did you mean %q?", sug)
	}
	ps.add(CodeUnknownKind, "trigger.kind", fmt.Sprintf("unknown trigger kind %q", t.Kind), hint)
	return nil, false
}

// checkCron checks a cron trigger's jitter_secs, expression and timezone and returns the
// compiled trigger (nil without an expression).
func checkCron(t Trigger, ps *fieldProblems) trigger {
	if t.JitterSecs < 0 || t.JitterSecs > MaxJitterSecs {
		ps.add(CodeInvalidValue, "trigger.jitter_secs", fmt.Sprintf("`trigger.jitter_secs` is %d", t.JitterSecs),
			fmt.Sprintf("use 0 (no jitter) to %d seconds", MaxJitterSecs))
	}
	if t.Expression == "" {
		ps.add(CodeMissingField, "trigger.expression", "missing field `trigger.expression`",
			`add e.g. expression: "0 0 3 * * *" (second minute hour day-of-month month day-of-week)`)
		_, tzp := loadLocation(t.Timezone)
		if tzp != nil {
			*ps = append(*ps, *tzp)
		}
		return nil
	}
	c, cps := compileCron(t.Expression, t.Timezone)
	*ps = append(*ps, cps...)
	return c
}

// checkInterval checks an interval trigger's every and returns the compiled trigger.
func checkInterval(t Trigger, ps *fieldProblems) trigger {
	if t.Every == "" {
		ps.add(CodeMissingField, "trigger.every", "missing field `trigger.every`", `add e.g. every: "15m"`)
		return nil
	}
	c, p := compileInterval(t.Every)
	if p != nil {
		*ps = append(*ps, *p)
	}
	return c
}

// checkWebhook checks a webhook trigger's path and secret_env, then its signature mode
// (checkSignature).
func checkWebhook(t Trigger, ps *fieldProblems) {
	switch {
	case t.Path == "":
		ps.add(CodeMissingField, "trigger.path", "missing field `trigger.path`", "add e.g. path: /webhooks/upload")
	default:
		if why, fix := checkWebhookPath(t.Path); why != "" {
			ps.add(CodeInvalidWebhookPath, "trigger.path", fmt.Sprintf("`trigger.path` %q %s", t.Path, why), fix)
		}
	}
	if t.SecretEnv != "" && !envNameRe.MatchString(t.SecretEnv) {
		ps.add(CodeInvalidValue, "trigger.secret_env", fmt.Sprintf("`trigger.secret_env` %q is not an environment variable name", t.SecretEnv),
			"use letters, digits and '_', not starting with a digit, e.g. UPLOAD_WEBHOOK_SECRET")
	}
	checkSignature(t, ps)
}

// checkSignature checks a webhook's signature mode and what it needs: tolerance_secs only with
// timestamped, which also needs secret_env.
func checkSignature(t Trigger, ps *fieldProblems) {
	switch t.Signature {
	case "", SignatureGitHub:
		if t.ToleranceSecs != 0 {
			ps.add(CodeInvalidValue, "trigger.tolerance_secs", "`trigger.tolerance_secs` applies to signature: timestamped only",
				"add signature: timestamped (requests signed with a timestamp), or remove tolerance_secs")
		}
	case SignatureTimestamped:
		if t.SecretEnv == "" {
			ps.add(CodeMissingField, "trigger.secret_env", "`trigger.signature` is timestamped but `trigger.secret_env` is missing",
				"add secret_env: the environment variable holding the HMAC-SHA256 secret, e.g. UPLOAD_WEBHOOK_SECRET")
		}
		if t.ToleranceSecs < 0 || t.ToleranceSecs > MaxToleranceSecs {
			ps.add(CodeInvalidValue, "trigger.tolerance_secs", fmt.Sprintf("`trigger.tolerance_secs` is %d; it must be from 1 to %d seconds", t.ToleranceSecs, MaxToleranceSecs),
				fmt.Sprintf("remove it for the default (%d s) or use e.g. tolerance_secs: 300", DefaultToleranceSecs))
		}
	default:
		ps.add(CodeInvalidValue, "trigger.signature", fmt.Sprintf("`trigger.signature` %q is not a signature mode", t.Signature),
			"use github (X-Hub-Signature-256 over the body) or timestamped (X-Dcc-Flow-Signature: t=…,v1=…, resists replay)")
	}
}

// checkOtherKindFields reports the fields of another kind set on t: a Spec built in Go (files
// report them as unknown fields when decoded).
func checkOtherKindFields(t Trigger, ps *fieldProblems) {
	set := map[string]bool{"expression": t.Expression != "", "timezone": t.Timezone != "", "jitter_secs": t.JitterSecs != 0,
		"every": t.Every != "", "path": t.Path != "", "secret_env": t.SecretEnv != "", "signature": t.Signature != "",
		"tolerance_secs": t.ToleranceSecs != 0}
	for _, f := range []string{"expression", "timezone", "jitter_secs", "every", "path", "secret_env", "signature", "tolerance_secs"} {
		if set[f] && !contains(triggerFieldsByKind[t.Kind], f) {
			ps.add(CodeUnknownField, "trigger."+f, fmt.Sprintf("`trigger.%s` is set on a %s trigger", f, t.Kind),
				fmt.Sprintf("`%s` is only valid on %s triggers; remove it", f, kindOfField(f)))
		}
	}
}

func kindOfField(f string) TriggerKind {
	for _, k := range TriggerKinds {
		if contains(triggerFieldsByKind[k], f) {
			return k
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkWebhookPath returns why p is not a valid webhook path and the fix, or "", "".
func checkWebhookPath(p string) (why, fix string) {
	switch {
	case len(p) > 1024:
		return "is longer than 1024 bytes", "use a shorter path"
	case !strings.HasPrefix(p, "/"):
		return `does not start with "/"`, fmt.Sprintf("use %q", "/"+p)
	case strings.ContainsAny(p, "?#"):
		return "contains a query or fragment", "use only the path part, e.g. " + strconv.Quote(p[:strings.IndexAny(p, "?#")])
	case strings.Contains(p, "%"):
		return `contains "%"`, "write the path unescaped, with letters, digits, '/', '-', '_', '.' and '~'"
	}
	for _, r := range p {
		if r <= ' ' || r == 0x7f {
			return "contains a space or a control character", "use letters, digits, '/', '-', '_', '.' and '~'"
		}
	}
	if c := path.Clean(p); c != p {
		return "is not a clean path (no trailing '/', '//', '.' or '..' segments)", fmt.Sprintf("use %q", c)
	}
	return "", ""
}

// checkInputs checks the templates in inputs: they must parse and use only the trigger root.
func checkInputs(inputs map[string]any) []fieldProblem {
	var ps []fieldProblem
	var walk func(v any, field string)
	walk = func(v any, field string) {
		switch v := v.(type) {
		case string:
			if !template.ContainsPlaceholder(v) {
				return
			}
			t, err := template.Parse(v)
			if err != nil {
				ps = append(ps, fieldProblem{code: CodeInvalidTemplate, field: field,
					msg:  fmt.Sprintf("`%s` %q is not a valid template: %v", field, v, err),
					hint: "write placeholders as {{trigger.payload.<name>}}, {{trigger.schedule_id}}, {{trigger.workflow}} or {{trigger.fired_at}}"})
				return
			}
			for _, r := range t.Refs() {
				if fp := checkRef(r, field); fp != nil {
					ps = append(ps, *fp)
				}
			}
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(v[k], field+"."+k)
			}
		case []any:
			for i, e := range v {
				walk(e, fmt.Sprintf("%s[%d]", field, i))
			}
		}
	}
	keys := make([]string, 0, len(inputs))
	for k := range inputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		walk(inputs[k], "inputs."+k)
	}
	return ps
}

func checkRef(r template.Ref, field string) *fieldProblem {
	if r.Root != "trigger" {
		hint := "schedule inputs can use only {{trigger.…}} (" + strings.Join(TriggerFields, ", ") + ") and literal text"
		if yamltext.Suggest(r.Root, []string{"trigger"}) != "" {
			hint = `did you mean "trigger"?`
		}
		return &fieldProblem{code: CodeUnknownTemplateVar, field: field,
			msg: fmt.Sprintf("`%s` uses {{%s}}: %q is not available when a schedule fires", field, r.Raw, r.Root), hint: hint}
	}
	if len(r.Path) == 0 {
		return nil
	}
	if s := r.Path[0]; s.IsIndex || !contains(TriggerFields, s.Name) {
		hint := "use one of: " + strings.Join(TriggerFields, ", ")
		if !s.IsIndex {
			if sug := yamltext.Suggest(s.Name, TriggerFields); sug != "" {
				hint = fmt.Sprintf("did you mean {{trigger.%s}}?", sug)
			}
		}
		return &fieldProblem{code: CodeUnknownTemplateVar, field: field,
			msg: fmt.Sprintf("`%s` uses {{%s}}, which is not a trigger field", field, r.Raw), hint: hint}
	}
	return nil
}

// checkSet returns the problems of every spec and the cross-schedule problems (duplicate ids
// and webhook paths), sorted by file and line. The compiled triggers of valid specs are in the
// returned slice, in order (nil entries for invalid specs).
func checkSet(ls []*located, workflows func(string) bool) ([]Problem, []compiled) {
	var ps []Problem
	out := make([]compiled, len(ls))
	ids := map[string]*located{}
	paths := map[string]*located{}
	for i, l := range ls {
		fps, trig := checkSpec(&l.spec, workflows)
		for _, fp := range fps {
			if l.skipTrigger && strings.HasPrefix(fp.field, "trigger") {
				continue
			}
			ps = append(ps, l.problem(fp))
		}
		out[i] = compiled{spec: l.spec, trig: trig}
		if id := l.spec.ID; id != "" {
			if first, dup := ids[id]; dup {
				ps = append(ps, l.problem(fieldProblem{code: CodeDuplicateID, field: "id",
					msg:  fmt.Sprintf("id %q is already used by the schedule at %s", id, where(first, "id")),
					hint: "give each schedule a unique id"}))
			} else {
				ids[id] = l
			}
		}
		if p := l.spec.Trigger.Path; l.spec.Trigger.Kind == KindWebhook && p != "" {
			if first, dup := paths[p]; dup {
				ps = append(ps, l.problem(fieldProblem{code: CodeDuplicateWebhookPath, field: "trigger.path",
					msg:  fmt.Sprintf("webhook path %q is already used by %s at %s", p, first.name(), where(first, "trigger.path")),
					hint: "give each webhook schedule its own path"}))
			} else {
				paths[p] = l
			}
		}
	}
	sortProblems(ps)
	return ps, out
}

// where formats the location of a field: "a.schedules.yaml:3:7", "line 3" or "schedules[2]".
func where(l *located, field string) string {
	at := l.at(field)
	switch {
	case l.file != "" && at.line > 0:
		return fmt.Sprintf("%s:%d:%d", l.file, at.line, at.col)
	case at.line > 0:
		return fmt.Sprintf("line %d", at.line)
	case l.index >= 0:
		return fmt.Sprintf("schedules[%d]", l.index)
	}
	return "another schedule"
}

func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}

// Validate checks specs built in Go (without file positions), as Parse checks files: every
// problem of every spec, duplicate ids and duplicate webhook paths. workflows, when not nil,
// reports whether a workflow name is in the catalog. It returns nil or a *ValidationError.
func Validate(specs []Spec, workflows func(string) bool) error {
	ls := make([]*located, len(specs))
	for i, s := range specs {
		ls[i] = &located{spec: s, index: -1, file: s.Source}
		if s.Line > 0 {
			ls[i].pos = map[string]pos{"": {line: s.Line, col: 1}}
		}
	}
	ps, _ := checkSet(ls, workflows)
	return newValidationError(ps)
}
