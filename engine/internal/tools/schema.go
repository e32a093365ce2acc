package tools

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Tool schemas (docs/reference/c-abi/engine.md "dccflow_tool_register"): a host tool's `schema` (its args) and
// `output_schema` (its output) are JSON Schema documents, compiled once when the tool is
// registered and checked on every call by github.com/santhosh-tekuri/jsonschema/v6:
//
//   - A document without "$schema" is draft 2020-12; drafts 4, 6, 7 and 2019-09 are recognised by
//     their "$schema" URL (the meta-schemas are built in).
//   - "$ref" resolves inside the document only: a reference to another URL or a file is refused
//     at registration (no file or network access from a schema).
//   - "format" is asserted, under every draft, for the formats the library knows (date,
//     date-time, time, duration, email, hostname, ipv4, ipv6, uri, uri-reference, uuid, regex,
//     json-pointer, …), as spec inputs check date and date-time (docs/reference/spec.md "Inputs"); an
//     unknown format is a free hint.
//   - "pattern" uses Go's RE2 regular expressions (linear time; no look-around or
//     back-references: such a pattern is refused at registration).
//   - Numbers are compared exactly: an integer beyond ±2^53, which the engine keeps as
//     json.Number (engine/spec/value.go), is checked against minimum/maximum/multipleOf and
//     "integer" without rounding.
//
// Validation is linear in the size of the value times the schema's work per node; measured in
// BenchmarkSchemaValidate1MB and bounded by MaxSchemaValues. A failure message lists at most
// maxSchemaProblems problems.

// MaxSchemaValues bounds the JSON values (objects, arrays and scalars, counted) of args or an
// output checked against a schema: checking costs 1–2.5 µs per value (BenchmarkSchemaValidate1MB:
// a 1.1 MB args object of 60,000 values in 65–145 ms, 19 MB allocated), so this caps one check
// at a few seconds.
// Args over it fail invalid_input (final); an output over it fails invalid_output.
const MaxSchemaValues = 1_000_000

// maxSchemaProblems bounds the problems one failure message lists; the rest are counted.
const maxSchemaProblems = 5

// MaxSchemaBytes bounds the JSON text of one schema (args or output): 1 MiB.
const MaxSchemaBytes = 1 << 20

var schemaPrinter = message.NewPrinter(language.English)

// compileSchema compiles the schema text raw of tool (which names it: "schema" or
// "output_schema"). Errors have code invalid_request and name the tool, the field and the
// schema's problem.
func compileSchema(tool, field string, raw []byte) (*jsonschema.Schema, error) {
	if len(raw) > MaxSchemaBytes {
		return nil, run.Errorf(run.CodeInvalidRequest, "tool %s: %s is %d bytes of JSON; the limit is %d (1 MiB)", tool, field, len(raw), MaxSchemaBytes)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, run.Errorf(run.CodeInvalidRequest, "tool %s: %s is not valid JSON: %v", tool, field, err)
	}
	switch doc.(type) {
	case map[string]any, bool:
	default:
		return nil, run.Errorf(run.CodeInvalidRequest, "tool %s: %s must be a JSON Schema: an object (or true/false); got %s", tool, field, jsonKind(doc))
	}
	url := "dccflow:///tools/" + tool + "/" + field + ".json"
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no file or network: refs resolve inside the document
	c.AssertFormat()
	if err := c.AddResource(url, doc); err != nil {
		return nil, run.Errorf(run.CodeInvalidRequest, "tool %s: %s is not a valid JSON Schema: %s", tool, field, schemaErrorText(err, url))
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, run.Errorf(run.CodeInvalidRequest, "tool %s: %s is not a valid JSON Schema: %s", tool, field, schemaErrorText(err, url))
	}
	return sch, nil
}

// schemaErrorText is the compiler's error without the internal resource URL.
func schemaErrorText(err error, url string) string {
	msg := err.Error()
	var le *jsonschema.LoadURLError
	if errors.As(err, &le) {
		return fmt.Sprintf("$ref %q: a schema may refer only inside itself (\"#/$defs/...\"); files and URLs are not loaded", le.URL)
	}
	var se *jsonschema.SchemaValidationError
	if errors.As(err, &se) && se.Err != nil {
		msg = se.Err.Error()
		var ve *jsonschema.ValidationError
		if errors.As(se.Err, &ve) {
			msg = problemText(ve, "schema")
		}
	}
	msg = strings.ReplaceAll(msg, url+"#", "#")
	msg = strings.ReplaceAll(msg, url, "the schema")
	msg = strings.ReplaceAll(msg, "\n", "; ")
	return msg
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case []any:
		return "an array"
	default:
		return "a number"
	}
}

// checkValue validates v against sch and returns "" when it conforms, otherwise the problems,
// "; "-separated, each as "ROOT.path: rule", sorted by path (at most maxSchemaProblems, then
// "and N more").
func checkValue(sch *jsonschema.Schema, v any, root string) string {
	err := sch.Validate(v)
	if err == nil {
		return ""
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return root + ": " + err.Error()
	}
	return problemText(ve, root)
}

// problemText lists the problems of a validation error tree (see checkValue).
func problemText(ve *jsonschema.ValidationError, root string) string {
	var problems []string
	collectProblems(ve, root, &problems)
	if len(problems) == 0 { // a bare group: say something rather than nothing
		return root + ": does not match the schema"
	}
	sortProblems(problems)
	problems = slices.Compact(problems)
	total := len(problems)
	if total > maxSchemaProblems {
		problems = problems[:maxSchemaProblems]
	}
	msg := strings.Join(problems, "; ")
	if total > len(problems) {
		msg += fmt.Sprintf("; and %d more", total-len(problems))
	}
	return msg
}

// sortProblems sorts "path: rule" lines by path, then rule.
func sortProblems(p []string) {
	slices.SortFunc(p, func(a, b string) int {
		pa, ra, _ := strings.Cut(a, ": ")
		pb, rb, _ := strings.Cut(b, ": ")
		if c := strings.Compare(pa, pb); c != 0 {
			return c
		}
		return strings.Compare(ra, rb)
	})
}

// collectProblems walks the error tree: groups, references and allOf are descended into;
// anyOf/oneOf are one problem that says what each branch wanted; leaves are problems.
func collectProblems(e *jsonschema.ValidationError, root string, out *[]string) {
	switch e.ErrorKind.(type) {
	case *kind.Group, *kind.Reference, *kind.AllOf, *kind.Schema:
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				collectProblems(c, root, out)
			}
			return
		}
	case *kind.Required, *kind.AdditionalProperties:
		for _, p := range describeProblems(e, root) {
			*out = append(*out, p[0]+": "+p[1])
		}
		return
	}
	path, rule := describeProblem(e, root)
	*out = append(*out, path+": "+rule)
}

// describeProblems splits a problem about several properties into one per property.
func describeProblems(e *jsonschema.ValidationError, root string) [][2]string {
	path := instancePath(root, e.InstanceLocation)
	var out [][2]string
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			out = append(out, [2]string{instancePath(path, []string{m}), "is required"})
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			out = append(out, [2]string{instancePath(path, []string{p}), "is not allowed (additionalProperties)"})
		}
	}
	return out
}

// branchRules says what the branches of an anyOf/oneOf wanted: the rules of their problems at
// the same place, "; or "-joined (at most three, then "…").
func branchRules(e *jsonschema.ValidationError, root, path string) string {
	var rules []string
	for _, c := range e.Causes {
		var sub []string
		collectProblems(c, root, &sub)
		sortProblems(sub)
		var parts []string
		for _, p := range sub {
			if rule, ok := strings.CutPrefix(p, path+": "); ok {
				parts = append(parts, rule)
			} else {
				parts = append(parts, p)
			}
		}
		if len(parts) > 0 {
			rules = append(rules, strings.Join(parts, ", "))
		}
	}
	if len(rules) == 0 {
		return ""
	}
	if len(rules) > 3 {
		rules = append(rules[:3], "…")
	}
	return " (" + strings.Join(rules, "; or ") + ")"
}

// describeProblem returns the instance path of e under root ("args.frames", "args.files[2]")
// and its rule in words ("must be >= 1").
func describeProblem(e *jsonschema.ValidationError, root string) (string, string) {
	path := instancePath(root, e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return path, fmt.Sprintf("must be %s; got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Minimum:
		return path, fmt.Sprintf("must be >= %s; got %s", ratText(k.Want), ratText(k.Got))
	case *kind.Maximum:
		return path, fmt.Sprintf("must be <= %s; got %s", ratText(k.Want), ratText(k.Got))
	case *kind.ExclusiveMinimum:
		return path, fmt.Sprintf("must be > %s; got %s", ratText(k.Want), ratText(k.Got))
	case *kind.ExclusiveMaximum:
		return path, fmt.Sprintf("must be < %s; got %s", ratText(k.Want), ratText(k.Got))
	case *kind.MultipleOf:
		return path, fmt.Sprintf("must be a multiple of %s; got %s", ratText(k.Want), ratText(k.Got))
	case *kind.MinLength:
		return path, fmt.Sprintf("must be at least %d characters long; got %d", k.Want, k.Got)
	case *kind.MaxLength:
		return path, fmt.Sprintf("must be at most %d characters long; got %d", k.Want, k.Got)
	case *kind.Pattern:
		return path, fmt.Sprintf("must match the pattern %s", strconv.Quote(k.Want))
	case *kind.MinItems:
		return path, fmt.Sprintf("must have at least %d items; got %d", k.Want, k.Got)
	case *kind.MaxItems:
		return path, fmt.Sprintf("must have at most %d items; got %d", k.Want, k.Got)
	case *kind.MinProperties:
		return path, fmt.Sprintf("must have at least %d properties; got %d", k.Want, k.Got)
	case *kind.MaxProperties:
		return path, fmt.Sprintf("must have at most %d properties; got %d", k.Want, k.Got)
	case *kind.UniqueItems:
		return path, fmt.Sprintf("must have unique items; items %d and %d are equal", k.Duplicates[0], k.Duplicates[1])
	case *kind.Enum:
		return path, "must be " + strings.TrimPrefix(k.LocalizedString(schemaPrinter), "value must be ")
	case *kind.Const:
		return path, "must be " + strings.TrimPrefix(k.LocalizedString(schemaPrinter), "value must be ")
	case *kind.FalseSchema:
		return path, "is not allowed (the schema is false)"
	case *kind.AnyOf:
		return path, "must match one of the anyOf schemas" + branchRules(e, root, path)
	case *kind.OneOf:
		if len(k.Subschemas) == 0 {
			return path, "must match exactly one of the oneOf schemas; it matches none" + branchRules(e, root, path)
		}
		return path, fmt.Sprintf("must match exactly one of the oneOf schemas; it matches more (oneOf[%d] and oneOf[%d])", k.Subschemas[0], k.Subschemas[1])
	case *kind.Not:
		return path, "must not match the schema under not"
	}
	return path, e.ErrorKind.LocalizedString(schemaPrinter)
}

// instancePath appends JSON-pointer tokens to base: identifiers as ".name", array indexes as
// "[3]", other keys quoted: `["a b"]`.
func instancePath(base string, tokens []string) string {
	var b strings.Builder
	b.WriteString(base)
	for _, t := range tokens {
		switch {
		case isIndex(t):
			b.WriteString("[" + t + "]")
		case isIdent(t):
			b.WriteString("." + t)
		default:
			b.WriteString("[" + strconv.Quote(t) + "]")
		}
	}
	return b.String()
}

func isIndex(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isIdent(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ratText writes a number exactly: an integer in full (no float rounding of 2^63), a fraction
// as its shortest decimal when it has one.
func ratText(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	if f, exact := r.Float64(); exact {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return r.FloatString(6)
}

// toolSchemas are the compiled schemas of a host tool; either may be nil.
type toolSchemas struct {
	args, output *jsonschema.Schema
}

// compileToolSchemas compiles the schemas of info (a nil toolSchemas when it has none).
func compileToolSchemas(info ToolInfo) (*toolSchemas, error) {
	var ts toolSchemas
	var err error
	if len(info.Schema) > 0 {
		if ts.args, err = compileSchema(info.Name, "schema", info.Schema); err != nil {
			return nil, err
		}
	}
	if len(info.OutputSchema) > 0 {
		if ts.output, err = compileSchema(info.Name, "output_schema", info.OutputSchema); err != nil {
			return nil, err
		}
	}
	if ts.args == nil && ts.output == nil {
		return nil, nil
	}
	return &ts, nil
}

// checkArgs returns the failure of a call whose args do not conform to the tool's schema:
// kind invalid_input, marked Final (the same args fail the same way on every attempt).
func (ts *toolSchemas) checkArgs(call Call) (Result, bool) {
	if ts == nil || ts.args == nil {
		return Result{}, true
	}
	var v any = call.Args
	if call.Args == nil {
		v = map[string]any{}
	}
	msg := ""
	if n := countValues(v, MaxSchemaValues); n > MaxSchemaValues {
		msg = fmt.Sprintf("args: hold more than %d JSON values, too many to check against the schema (docs/reference/limits.md); pass a file path instead of the data", MaxSchemaValues)
	} else {
		msg = checkValue(ts.args, v, "args")
	}
	if msg == "" {
		return Result{}, true
	}
	return Result{Error: &ToolError{Kind: run.KindInvalidInput, Final: true,
		Message: fmt.Sprintf("step %s: %s (schema of tool %s)", call.StepKey, msg, call.Tool)}}, false
}

// checkOutput turns a successful result whose output does not conform to the tool's
// output_schema into a failure of kind invalid_output. An output that is not valid JSON is
// left for the executor to report.
func (ts *toolSchemas) checkOutput(call Call, res Result) Result {
	if ts == nil || ts.output == nil || res.Error != nil {
		return res
	}
	out := res.Output
	if res.OutputJSON != nil {
		v, err := spec.DecodeValue(bytes.TrimSpace(res.OutputJSON))
		if err != nil {
			return res
		}
		out = v
	}
	msg := ""
	if n := countValues(out, MaxSchemaValues); n > MaxSchemaValues {
		msg = fmt.Sprintf("output: holds more than %d JSON values, too many to check against the output_schema (docs/reference/limits.md)", MaxSchemaValues)
	} else {
		msg = checkValue(ts.output, out, "output")
	}
	if msg == "" {
		return res
	}
	res.Error = &ToolError{Kind: run.KindInvalidOutput,
		Message: fmt.Sprintf("step %s: %s (output_schema of tool %s)", call.StepKey, msg, call.Tool)}
	res.Output, res.OutputJSON = nil, nil
	return res
}

// countValues counts the JSON values in v (itself included), stopping once past limit.
func countValues(v any, limit int) int {
	n := 0
	var walk func(v any)
	walk = func(v any) {
		n++
		if n > limit {
			return
		}
		switch v := v.(type) {
		case map[string]any:
			for _, e := range v {
				walk(e)
				if n > limit {
					return
				}
			}
		case []any:
			for _, e := range v {
				walk(e)
				if n > limit {
					return
				}
			}
		}
	}
	walk(v)
	return n
}
