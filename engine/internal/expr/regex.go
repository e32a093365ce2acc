package expr

import (
	"regexp"
	"regexp/syntax"
	"sync"
	"unicode"

	"github.com/theory/jsonpath"
	"github.com/theory/jsonpath/registry"
	"github.com/theory/jsonpath/spec"
)

// pathParser returns the parser Compile uses. Its registry replaces the
// match() and search() of theory/jsonpath v0.12.1, which
//
//   - panic when an argument selects nothing (match(@.name, 'a') on an
//     element without "name"); RFC 9535 makes that call false;
//   - anchor match() as `\A` + re + `\z`, so match('ax', 'a|b') is true;
//     RFC 9535 requires the whole string to match;
//   - compile the regular expression on every call, which costs milliseconds
//     for a pattern with "." or a negated class.
//
// The replacements keep the RFC 9485 meaning of "." ([^\n\r]) and cache
// compiled expressions.
var pathParser = sync.OnceValue(func() *jsonpath.Parser {
	reg := registry.New()
	for name, whole := range map[string]bool{"match": true, "search": false} {
		if fn := reg.Get(name); fn != nil {
			orig := *fn
			*fn = *spec.Extension(name, spec.FuncLogical, orig.Validate, regexFunc(whole))
		}
	}
	return jsonpath.NewParser(jsonpath.WithRegistry(reg))
})

// regexFunc implements match() (whole) or search(): true when both arguments
// are strings, the second compiles, and it matches the first (entirely for
// match); false otherwise.
func regexFunc(whole bool) spec.Evaluator {
	return func(args []spec.PathValue) spec.PathValue {
		if len(args) != 2 {
			return spec.LogicalFalse
		}
		s, ok := stringArg(args[0])
		if !ok {
			return spec.LogicalFalse
		}
		pattern, ok := stringArg(args[1])
		if !ok {
			return spec.LogicalFalse
		}
		re := regexes.get(pattern, whole)
		if re == nil {
			return spec.LogicalFalse
		}
		if !whole {
			return spec.Logical(re.MatchString(s))
		}
		// re prefers leftmost-longest matches: if any match spans the whole
		// string, the one found does.
		loc := re.FindStringIndex(s)
		return spec.Logical(loc != nil && loc[0] == 0 && loc[1] == len(s))
	}
}

func stringArg(v spec.PathValue) (string, bool) {
	vt, ok := v.(*spec.ValueType)
	if !ok || vt == nil {
		return "", false
	}
	s, ok := vt.Value().(string)
	return s, ok
}

// maxCachedRegexes bounds the cache, which is emptied when full.
const maxCachedRegexes = 512

// regexCache maps a pattern to its compiled form (nil if it does not compile).
type regexCache struct {
	mu sync.RWMutex
	m  map[regexKey]*regexp.Regexp
}

type regexKey struct {
	pattern string
	whole   bool
}

var regexes = &regexCache{m: make(map[regexKey]*regexp.Regexp)}

func (c *regexCache) get(pattern string, whole bool) *regexp.Regexp {
	k := regexKey{pattern, whole}
	c.mu.RLock()
	re, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return re
	}
	re = compileIRegexp(pattern, whole)
	c.mu.Lock()
	if len(c.m) >= maxCachedRegexes {
		clear(c.m)
	}
	c.m[k] = re
	c.mu.Unlock()
	return re
}

// anyButNewline is RFC 9485's ".": any character except LF and CR.
var anyButNewline = syntax.Regexp{
	Op:   syntax.OpCharClass,
	Rune: []rune{0, '\n' - 1, '\n' + 1, '\r' - 1, '\r' + 1, unicode.MaxRune},
}

// compileIRegexp compiles an RFC 9485 I-Regexp (Go's Perl syntax is
// accepted too) with "." meaning [^\n\r]; when whole, the result prefers
// leftmost-longest matches. It returns nil if pattern does not compile.
func compileIRegexp(pattern string, whole bool) *regexp.Regexp {
	tree, err := syntax.Parse(pattern, syntax.Perl|syntax.DotNL)
	if err != nil {
		return nil
	}
	replaceDot(tree)
	re, err := regexp.Compile(tree.String())
	if err != nil {
		return nil
	}
	if whole {
		re.Longest()
	}
	return re
}

func replaceDot(re *syntax.Regexp) {
	if re.Op == syntax.OpAnyChar {
		*re = anyButNewline
		return
	}
	for _, sub := range re.Sub {
		replaceDot(sub)
	}
}
