package spec_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// The tests in this file keep docs/reference/spec.md honest: every ```yaml block in it is parsed, and must
// be valid unless the line before it is an annotation:
//
//	<!-- invalid: code[, code…] -->  the block reports exactly these problem codes (≥ 1 error)
//	<!-- warning: code[, code…] -->  the block is valid and warns exactly these codes
//
// A ```json block annotated <!-- canonical --> must be the canonical form of the yaml block before
// it. The retry delay table (<!-- delays: … -->) and the error-kind table (<!-- error-kinds -->) are
// recomputed from RetryPolicy. Every problem code declared in problem.go must have an example.

const docsPath = "../../docs/reference/spec.md"

type docBlock struct {
	lang string
	text string
	line int    // 1-based line of the opening fence
	note string // the HTML comment on the last non-blank line before the fence, or ""
}

var noteRe = regexp.MustCompile(`^<!--\s*([a-z-]+)\s*(?::\s*(.*?))?\s*-->$`)

func readDocs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatalf("reading %s: %v", docsPath, err)
	}
	return strings.Split(string(b), "\n")
}

// docBlocks returns every fenced code block of the Markdown lines.
func docBlocks(t *testing.T, lines []string) []docBlock {
	t.Helper()
	var out []docBlock
	prev := ""
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(trimmed, "```") {
			if trimmed != "" {
				prev = trimmed
			}
			continue
		}
		b := docBlock{lang: strings.TrimSpace(strings.TrimLeft(trimmed, "`")), line: i + 1}
		if strings.HasPrefix(prev, "<!--") {
			b.note = prev
		}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: unclosed code fence", docsPath, b.line)
		}
		b.text = strings.Join(body, "\n") + "\n"
		out = append(out, b)
		prev = "```"
	}
	return out
}

// parseNote splits `<!-- invalid: a, b -->` into "invalid" and [a b].
func parseNote(t *testing.T, b docBlock) (string, []string) {
	t.Helper()
	if b.note == "" {
		return "", nil
	}
	m := noteRe.FindStringSubmatch(b.note)
	if m == nil {
		t.Fatalf("%s:%d: malformed annotation %q", docsPath, b.line, b.note)
	}
	var codes []string
	for _, c := range strings.Split(m[2], ",") {
		if c = strings.TrimSpace(c); c != "" {
			codes = append(codes, c)
		}
	}
	sort.Strings(codes)
	return m[1], codes
}

// docProblems parses and validates text and returns every problem, errors and warnings.
func docProblems(text string, line int) (*spec.Spec, []spec.Problem) {
	s, err := spec.Parse([]byte(text), spec.Options{Source: fmt.Sprintf("docs/reference/spec.md:%d", line)})
	if err != nil {
		var ve *spec.ValidationError
		if errors.As(err, &ve) {
			return nil, ve.Problems
		}
		return nil, []spec.Problem{{Code: "non_validation_error", Severity: spec.SeverityError, Message: err.Error()}}
	}
	return s, append(s.Problems(), s.Warnings()...)
}

func codeSet(ps []spec.Problem, severity string) []string {
	seen := map[string]bool{}
	for _, p := range ps {
		if severity == "" || p.Severity == severity {
			seen[p.Code] = true
		}
	}
	out := make([]string, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func describeProblems(ps []spec.Problem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "\n  %s %s %s", p.Severity, p.Code, p)
	}
	return b.String()
}

func TestDocsYAMLExamples(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t, readDocs(t))
	covered := map[string]bool{}
	nYAML := 0
	var lastYAML *spec.Spec
	for _, b := range blocks {
		kind, codes := parseNote(t, b)
		switch b.lang {
		case "yaml", "yml":
		case "json":
			if kind == "canonical" {
				if lastYAML == nil {
					t.Errorf("%s:%d: <!-- canonical --> block without a valid yaml block before it", docsPath, b.line)
				} else if got, want := string(lastYAML.Canonical()), strings.TrimSpace(b.text); got != want {
					t.Errorf("%s:%d: canonical form differs:\n got %s\nwant %s", docsPath, b.line, got, want)
				}
			}
			continue
		default:
			continue
		}
		nYAML++
		if kind == "invalid" || kind == "warning" {
			for _, c := range codes {
				covered[c] = true
			}
		}
		s, ps := docProblems(b.text, b.line)
		where := fmt.Sprintf("%s:%d", docsPath, b.line)
		lastYAML = nil
		switch kind {
		case "":
			if len(ps) > 0 {
				t.Errorf("%s: example must be valid (or annotated <!-- invalid: code -->), got:%s", where, describeProblems(ps))
				continue
			}
			lastYAML = s
		case "invalid":
			if len(codes) == 0 {
				t.Errorf("%s: <!-- invalid: --> names no code", where)
				continue
			}
			if len(codeSet(ps, spec.SeverityError)) == 0 {
				t.Errorf("%s: annotated invalid but reports no error:%s", where, describeProblems(ps))
			}
			if got := codeSet(ps, ""); strings.Join(got, ",") != strings.Join(codes, ",") {
				t.Errorf("%s: want problem codes %v, got %v:%s", where, codes, got, describeProblems(ps))
			}
		case "warning":
			if errs := codeSet(ps, spec.SeverityError); len(errs) > 0 {
				t.Errorf("%s: annotated warning but reports errors:%s", where, describeProblems(ps))
			}
			if got := codeSet(ps, spec.SeverityWarning); strings.Join(got, ",") != strings.Join(codes, ",") {
				t.Errorf("%s: want warning codes %v, got %v", where, codes, got)
			}
		default:
			t.Errorf("%s: unknown annotation %q before a yaml block (use invalid: or warning:)", where, b.note)
		}
	}
	if nYAML < 20 {
		t.Fatalf("found only %d yaml blocks in %s; is the extractor broken?", nYAML, docsPath)
	}
	for _, code := range problemCodes(t) {
		if code == spec.CodeValidationFailed {
			continue // the code of a ValidationError, not of a problem
		}
		if !covered[code] {
			t.Errorf("problem code %q (problem.go) has no <!-- invalid: %s --> example in %s", code, code, docsPath)
		}
	}
}

// problemCodes returns the values of the Code* string constants declared in problem.go.
func problemCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "problem.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, sp := range gd.Specs {
			vs := sp.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					out = append(out, v)
				}
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("found only %d problem codes in problem.go", len(out))
	}
	return out
}

// tableAfter returns the cells of the Markdown table rows that follow the annotation line
// starting with prefix (header and separator rows removed), and the annotation itself.
func tableAfter(t *testing.T, lines []string, prefix string) (string, [][]string) {
	t.Helper()
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), prefix) {
			continue
		}
		var rows [][]string
		for _, r := range lines[i+1:] {
			r = strings.TrimSpace(r)
			if !strings.HasPrefix(r, "|") {
				break
			}
			cells := strings.Split(strings.Trim(r, "|"), "|")
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			rows = append(rows, cells)
		}
		if len(rows) < 3 {
			t.Fatalf("%s: no table after %q", docsPath, prefix)
		}
		return strings.TrimSpace(l), rows[2:]
	}
	t.Fatalf("%s: no %q annotation", docsPath, prefix)
	return "", nil
}

var firstInt = regexp.MustCompile(`\d+`)

func cellInt(t *testing.T, cell string) int64 {
	t.Helper()
	m := firstInt.FindString(cell)
	n, err := strconv.ParseInt(m, 10, 64)
	if err != nil {
		t.Fatalf("table cell %q: no number", cell)
	}
	return n
}

func TestDocsRetryDelayTable(t *testing.T) {
	t.Parallel()
	note, rows := tableAfter(t, readDocs(t), "<!-- delays:")
	params := map[string]float64{}
	for _, kv := range regexp.MustCompile(`(\w+)=([\d.]+)`).FindAllStringSubmatch(note, -1) {
		params[kv[1]], _ = strconv.ParseFloat(kv[2], 64)
	}
	initial, maxDelay, jitter := int64(params["initial"]), int64(params["max"]), params["jitter"]
	if initial == 0 || maxDelay == 0 || jitter == 0 {
		t.Fatalf("annotation %q lacks initial=, max= or jitter=", note)
	}
	for _, row := range rows {
		if len(row) != 5 {
			t.Fatalf("delay table row %v: want 5 cells", row)
		}
		n := int(cellInt(t, row[0]))
		for col, b := range []spec.Backoff{spec.BackoffFixed, spec.BackoffLinear, spec.BackoffExponential} {
			r := spec.RetryPolicy{MaxAttempts: 10, Backoff: b, InitialDelayMs: initial, MaxDelayMs: maxDelay}
			if got, doc := r.NextDelayMs(n), cellInt(t, row[col+1]); got != doc {
				t.Errorf("delay table: %s attempt %d documents %d ms, NextDelayMs gives %d", b, n, doc, got)
			}
		}
		r := spec.RetryPolicy{MaxAttempts: 10, Backoff: spec.BackoffExponential, InitialDelayMs: initial, MaxDelayMs: maxDelay, Jitter: jitter}
		d := r.NextDelay(n)
		lo := r.Jittered(d, func() float64 { return 0 }).Milliseconds() // u = −1
		hi := r.Jittered(d, func() float64 { return 1 }).Milliseconds() // u → +1
		bounds := strings.Split(row[4], "–")
		if len(bounds) != 2 || cellInt(t, bounds[0]) != lo || cellInt(t, bounds[1]) != hi {
			t.Errorf("delay table: jittered attempt %d documents %q, want %d–%d", n, row[4], lo, hi)
		}
	}
}

func TestDocsErrorKindTable(t *testing.T) {
	t.Parallel()
	_, rows := tableAfter(t, readDocs(t), "<!-- error-kinds -->")
	def := spec.DefaultRetryPolicy()
	for _, row := range rows {
		kind := strings.Trim(row[0], "`")
		if !strings.HasPrefix(row[0], "`") {
			kind = "license_busy" // "any other string"
		}
		want := strings.HasPrefix(row[1], "yes")
		if got := def.IsRetryable(kind); got != want {
			t.Errorf("error-kind table: %q documented retried=%v, IsRetryable gives %v", kind, want, got)
		}
		if strings.Contains(row[1], "even when listed") {
			listed := spec.RetryPolicy{MaxAttempts: 2, RetryOn: []string{kind}}
			if listed.IsRetryable(kind) {
				t.Errorf("error-kind table: %q is documented as never retried, but retry_on makes it retryable", kind)
			}
		}
	}
}

func TestDocsMentionEveryKindTypeAndRoot(t *testing.T) {
	t.Parallel()
	doc := strings.Join(readDocs(t), "\n")
	for _, k := range spec.Kinds {
		if !strings.Contains(doc, "### `"+string(k)+"`") {
			t.Errorf("%s has no section for step kind %q", docsPath, k)
		}
	}
	for _, typ := range spec.InputTypes {
		if !strings.Contains(doc, "`"+typ+"`") {
			t.Errorf("%s does not mention input type %q", docsPath, typ)
		}
	}
	for _, r := range spec.ReservedRoots {
		if !strings.Contains(doc, "| `"+r+"`") {
			t.Errorf("%s has no template-root row for %q", docsPath, r)
		}
	}
	for _, limit := range []string{"4 MiB", strconv.Itoa(spec.MaxDepth), "10,000"} {
		if !strings.Contains(doc, limit) {
			t.Errorf("%s does not state the limit %q", docsPath, limit)
		}
	}
}
