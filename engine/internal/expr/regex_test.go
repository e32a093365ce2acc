package expr

import (
	"reflect"
	"strconv"
	"testing"
)

func TestMatchSearch(t *testing.T) {
	t.Parallel()
	doc := []any{"ax", "xb", "a\rc", "a\nc", "abc", "b", "", 1.0, nil, map[string]any{"s": "abc", "p": "a.c"}}
	tests := []struct {
		path string
		want any
	}{
		{"$[?match(@, 'a|b')]", "b"}, // whole string, not `\Aa|b\z`
		{"$[?match(@, 'a|ab|abc')]", "abc"},
		{"$[?match(@, 'a)|(b')]", nil},
		{"$[?match(@, 'a.c')]", "abc"},
		{"$[?search(@, 'a.c')]", "abc"}, // "." matches neither \r nor \n
		{"$[?match(@, '(?s)a.c')]", "abc"},
		{"$[?search(@, '^b')]", "b"},
		{"$[?search(@, 'b')]", []any{"xb", "abc", "b"}},
		{"$[?search(@, '')]", []any{"ax", "xb", "a\rc", "a\nc", "abc", "b", ""}},
		{"$[?match(@, '')]", ""},
		{"$[?match(@, 'a\\\\nc')]", "a\nc"},
		{"$[?match(@, '[^x]+')]", []any{"a\rc", "a\nc", "abc", "b"}},
		{"$[?match(@, 'a(')]", nil}, // a pattern that does not compile matches nothing
		{"$[?match(@.s, @.p)].s", "abc"},
		{"$[?!match(@, 'a.*')]", []any{"xb", "a\rc", "a\nc", "b", "", 1.0, nil, doc[9]}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			if got := mustCompile(t, tt.path).Select(doc); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Select = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestMatchQuotedToEnd(t *testing.T) {
	t.Parallel()
	// \Q quotes to the end of the pattern; anchoring must not be quoted too.
	doc := []any{"a.b)", "a.b", "axb"}
	if got := mustCompile(t, `$[?match(@, '\\Qa.b')]`).Select(doc); got != "a.b" {
		t.Errorf("Select = %#v, want %q", got, "a.b")
	}
}

func TestRegexCacheIsBounded(t *testing.T) {
	t.Parallel()
	for i := range maxCachedRegexes + 10 {
		if re := regexes.get("^n"+strconv.Itoa(i)+"$", false); re == nil || !re.MatchString("n"+strconv.Itoa(i)) {
			t.Fatalf("pattern %d did not compile", i)
		}
	}
	regexes.mu.RLock()
	defer regexes.mu.RUnlock()
	if n := len(regexes.m); n == 0 || n > maxCachedRegexes {
		t.Errorf("cache holds %d patterns, want 1 to %d", n, maxCachedRegexes)
	}
}
