package expr

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		"$", "$.list.files", "$.list.files[*].path", "$..path", "$.a[?@.x > 1]", "$['a','b'][0:2:-1]",
		"$[?match(@.name, 'a.*') || search(@.x, '[')]", "$[?length(@) == count(@.*)]", "$[?value(@..x) == 1]",
		"$.a[", "list", "", "  $ . a ", "$[?@.x == 1 && !(@.y < 'b')]", "$[-1]", "$[\"\\u00e9\"]", "$[?@ == null]",
	} {
		f.Add(s)
	}
	doc := runDoc(f)
	doc["mixed"] = []any{nil, true, 1.0, "s", []any{}, map[string]any{"x": []any{1.0}}, int64(3)}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Compile(s)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Compile(%q) error %T is not a *SyntaxError", s, err)
			}
			if se.Pos < 0 || se.Pos > len(s)+1 {
				t.Fatalf("Compile(%q) position %d is out of range", s, se.Pos)
			}
			if strings.Contains(se.Msg, "internal parser error") {
				t.Fatalf("Compile(%q) recovered a parser panic: %v", s, err)
			}
			return
		}
		if !IsPath(s) {
			t.Fatalf("Compile accepted %q but IsPath is false", s)
		}
		if p.String() != strings.Trim(s, blank) {
			t.Fatalf("String = %q for %q", p.String(), s)
		}
		if name, ok := p.RootName(); ok && utf8.ValidString(name) {
			// The root name, written as a bracketed string, is the root name.
			quoted, _ := json.Marshal(name)
			q, err := Compile("$[" + string(quoted) + "]")
			if err != nil {
				t.Fatalf("root name %q of %q does not compile back: %v", name, s, err)
			}
			if again, ok := q.RootName(); !ok || again != name {
				t.Fatalf("root name %q of %q reads back as (%q, %v)", name, s, again, ok)
			}
		}
		for _, d := range []any{doc, nil, 1.0, "str", doc["mixed"]} {
			var le *LimitError
			if _, err := p.SelectLimited(d, Limits{}); err != nil && !errors.As(err, &le) {
				t.Fatalf("Select(%q): %v", s, err)
			}
		}
	})
}
