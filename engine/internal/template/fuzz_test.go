package template

import (
	"errors"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "plain", "}}", "{{a}}", "{{ inputs.date }}", "x {{steps.list.files[0].path}} y",
		"{{a}}{{b}}", "{{", "{{}}", "{{a..b}}", "{{a[x]}}", "{{1a}}", "{{a b}}", "{{a {{b}} }}",
		"{{{a}}}", "{{a[007]}}", "{{a[99999999999999999999]}}", "é{{a}}\x00", "{{\ta-b_c\n}}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tmpl, err := Parse(s)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q) error %T is not a *SyntaxError", s, err)
			}
			if se.Offset < 0 || !strings.HasPrefix(s[se.Offset:], "{{") {
				t.Fatalf("Parse(%q) offset %d does not point at a {{", s, se.Offset)
			}
			if _, err := RenderValue(s, nil); err == nil {
				t.Fatalf("RenderValue(%q) accepted a malformed template", s)
			}
			return
		}
		if tmpl.Source() != s {
			t.Fatalf("Source = %q, want %q", tmpl.Source(), s)
		}
		if tmpl.IsLiteral() != !ContainsPlaceholder(s) {
			t.Fatalf("IsLiteral = %v for %q", tmpl.IsLiteral(), s)
		}
		refs := tmpl.Refs()
		for _, r := range refs {
			// The canonical text parses back to the same ref.
			again, err := Parse("{{" + r.String() + "}}")
			if err != nil {
				t.Fatalf("canonical %q of %q does not parse: %v", r.String(), s, err)
			}
			if got := again.Refs()[0].String(); got != r.String() {
				t.Fatalf("canonical %q parses back as %q", r.String(), got)
			}
		}
		// Rendering every ref as "" leaves exactly the literal text.
		out := tmpl.Render(func(Ref) any { return "" })
		str, ok := out.(string)
		switch {
		case !ok:
			t.Fatalf("Render = %#v for %q, want a string", out, s)
		case tmpl.IsWhole() && str != "":
			t.Fatalf("whole Render = %q, want \"\"", str)
		case tmpl.IsLiteral() && str != s:
			t.Fatalf("literal Render = %q, want %q", str, s)
		case len(str) >= len(s) && !tmpl.IsLiteral():
			t.Fatalf("Render = %q is not shorter than %q", str, s)
		}
		// Rendering refs as text that looks like a placeholder is never re-parsed.
		marker := tmpl.Render(func(Ref) any { return "{{" })
		if !tmpl.IsLiteral() {
			if str, _ := marker.(string); strings.Count(str, "{{") < len(refs) {
				t.Fatalf("Render lost placeholders: %#v for %q", marker, s)
			}
		}
		if _, err := RefsIn(map[string]any{"k": []any{s}}); err != nil {
			t.Fatalf("RefsIn rejects a template Parse accepts: %v", err)
		}
	})
}
