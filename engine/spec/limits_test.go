package spec_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func TestUntrustedInputLimits(t *testing.T) {
	t.Parallel()
	deepFlow := "steps: [{id: a, tool: t, args: {x: " + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + "}}]"
	var deepBlock strings.Builder
	deepBlock.WriteString("steps:\n  - id: a\n    tool: t\n    args:\n")
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&deepBlock, "%sk:\n", strings.Repeat(" ", 6+2*i))
	}
	var deepSteps strings.Builder
	deepSteps.WriteString("steps:\n")
	for i := 0; i < 200; i++ {
		ind := strings.Repeat(" ", 2+4*i)
		fmt.Fprintf(&deepSteps, "%s- id: p%d\n%s  kind: parallel\n%s  steps:\n", ind, i, ind, ind)
	}
	var many strings.Builder
	many.WriteString("steps:\n")
	for i := 0; i <= spec.MaxSteps; i++ {
		fmt.Fprintf(&many, "  - {id: s%d, tool: t}\n", i)
	}
	laughs := "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
		"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n" +
		"g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
	billion := "steps:\n  - id: a\n    tool: t\n    args:\n      " + strings.ReplaceAll(strings.TrimSpace(laughs), "\n", "\n      ") + "\n"
	cases := []struct {
		name, text, code string
	}{
		{"10 MB", "steps: [{id: a, tool: t}]\n# " + strings.Repeat("x", 10<<20), spec.CodeTooLarge},
		{"1000-deep flow nesting", deepFlow, spec.CodeTooLarge},
		{"1000-deep block nesting", deepBlock.String(), spec.CodeTooLarge},
		{"200-deep step nesting", deepSteps.String(), spec.CodeTooLarge},
		{"too many steps", many.String(), spec.CodeTooLarge},
		{"alias expansion", billion, spec.CodeTooLarge},
		{"non-UTF-8", "steps: [{id: a, tool: \xff\xfe}]", spec.CodeParseError},
		{"null document", "null", spec.CodeNotAMapping},
		{"scalar document", "42", spec.CodeNotAMapping},
		{"empty", "", spec.CodeNotAMapping},
		{"NUL byte", "steps: [{id: a, tool: \"t\x00\"}]", ""},
		{"NaN arg", "steps: [{id: a, tool: t, args: {x: .nan}}]", spec.CodeValidationFailed},
	}
	for _, tc := range cases {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := spec.Parse([]byte(tc.text), spec.Options{})
			if err == nil && s != nil {
				err = s.Validate()
			}
			var ve *spec.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a *ValidationError, got %v", err)
			}
			if tc.code != "" && ve.Code != tc.code {
				t.Fatalf("code %q, want %q: %v", ve.Code, tc.code, err)
			}
			if len(ve.Problems) == 0 || ve.Problems[0].Message == "" {
				t.Fatalf("no problem message: %+v", ve)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	seeds := []string{
		"steps: [{id: a, tool: t}]",
		"name: x\nsteps:\n  - id: f\n    kind: foreach\n    items: \"$.a.b\"\n    steps: [{id: b, tool: t, args: {p: \"{{f.x}}\"}}]\n",
		`{"steps":[{"id":"a","kind":"branch","on":"$.x","then":[{"id":"b","tool":"t"}]}]}`,
		"steps:\n  - id: a\n    tool: t\n    retry: {max_attempts: 3, jitter: 2}\n    depends_on: [a]\n",
		"a: &a [*a]",
		"{{",
		"steps: [{id: p, kind: parallel, steps: [{id: q, kind: approve, prompt: \"{{inputs.x}}\"}]}]",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := spec.Parse(data, spec.Options{})
		if err != nil {
			var ve *spec.ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			_ = ve.Error()
			return
		}
		_ = s.Validate()
		// The canonical form is a fixed point.
		again, err := spec.Parse(s.Canonical(), spec.Options{Format: spec.FormatJSON})
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\n%s", err, s.Canonical())
		}
		if again.Hash() != s.Hash() {
			t.Fatalf("canonical form is not a fixed point:\n%s\n%s", s.Canonical(), again.Canonical())
		}
	})
}
