// Package yamltext holds the text and YAML-node helpers shared by the parsers of untrusted
// documents (workflow specs, schedule files): alias resolution, type names for messages,
// byte offsets to line:column, pre-parse nesting bounds, "did you mean" suggestions, and the
// Decoder both parsers read their node trees with, which reports into a problem list.
package yamltext

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

func ResolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func MergeSources(v *yaml.Node) []*yaml.Node {
	v = ResolveAlias(v)
	if v.Kind == yaml.SequenceNode {
		out := make([]*yaml.Node, 0, len(v.Content))
		for _, c := range v.Content {
			out = append(out, ResolveAlias(c))
		}
		return out
	}
	return []*yaml.Node{v}
}

// DescribeNode names a node's type for messages: `a list`, `the number 3`, `null`.
func DescribeNode(n *yaml.Node) string {
	n = ResolveAlias(n)
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.DocumentNode:
		return "a document"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!bool":
			return "the boolean " + n.Value
		case "!!int", "!!float":
			return "the number " + n.Value
		default:
			v := n.Value
			if len(v) > 40 {
				v = v[:37] + "..."
			}
			return "the string " + strconv.Quote(v)
		}
	}
	return "an unexpected node"
}

// LineCol converts a byte offset into a 1-based line and column (in runes).
func LineCol(data []byte, off int) (int, int) {
	if off > len(data) {
		off = len(data)
	}
	if off < 0 {
		off = 0
	}
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	start := bytes.LastIndexByte(data[:off], '\n') + 1
	return line, 1 + utf8.RuneCount(data[start:off])
}

// Cursor converts byte offsets of one text into line:column as LineCol does, in time linear in
// the text when the offsets come in increasing order (a parser walking its tokens); a smaller
// offset than the last one starts over from the beginning.
type Cursor struct {
	data           []byte
	off, line, col int
}

// NewCursor returns a cursor at the start of data (line 1, column 1).
func NewCursor(data []byte) *Cursor { return &Cursor{data: data, line: 1, col: 1} }

// LineCol returns the 1-based line and column (in runes) of byte offset off.
func (c *Cursor) LineCol(off int) (int, int) {
	off = min(max(off, 0), len(c.data))
	if off < c.off {
		c.off, c.line, c.col = 0, 1, 1
	}
	for c.off < off {
		if c.data[c.off] == '\n' {
			c.line, c.col = c.line+1, 1
			c.off++
			continue
		}
		_, size := utf8.DecodeRune(c.data[c.off:])
		if c.off+size > off {
			break // off is inside this rune: stay at its start
		}
		c.off += size
		c.col++
	}
	// The bytes of a rune cut by off count a column each, as utf8.RuneCount counts them.
	return c.line, c.col + off - c.off
}

func InvalidUTF8Offset(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return 0
}

// FlowDepth returns an upper bound of the bracket nesting depth of the text ([ and { outside
// quotes), so that absurdly deep documents are refused before the YAML parser recurses into
// them. Block-style nesting is bounded by indentation and checked on the node tree.
func FlowDepth(data []byte) int {
	depth, max := 0, 0
	var quote byte
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			// Only a quote that starts a scalar opens a quoted string; an apostrophe inside a
			// plain scalar ("It's") does not.
			if i == 0 || strings.IndexByte(" \t\n[{,:-", data[i-1]) >= 0 {
				quote = c
			}
		case c == '#':
			if i == 0 || data[i-1] == ' ' || data[i-1] == '\t' || data[i-1] == '\n' {
				for i < len(data) && data[i] != '\n' {
					i++
				}
			}
		case c == '[' || c == '{':
			depth++
			if depth > max {
				max = depth
			}
		case c == ']' || c == '}':
			if depth > 0 {
				depth--
			}
		case c == '\n':
			quote = 0
		}
	}
	return max
}

// Suggest returns the candidate closest to s by edit distance when it is close enough to be a
// plausible typo (distance ≤ 2, and less than half of s), else "".
func Suggest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := EditDistance(s, c); d < bestD && d*2 < len(s)+1 {
			best, bestD = c, d
		}
	}
	return best
}

// EditDistance is the Levenshtein distance between a and b (bytes), capped at 3 for speed.
func EditDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		if a == b {
			return 0
		}
		return 3
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var lineRe = regexp.MustCompile(`line (\d+)(?::(\d+))?`)

// ErrorPosition returns the 1-based line and column a yaml.v3 error message mentions (0, 0 when
// it names none) and the message without its "yaml: " prefix.
func ErrorPosition(err error) (line, col int, msg string) {
	msg = strings.TrimPrefix(err.Error(), "yaml: ")
	if m := lineRe.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		col = 1
		if m[2] != "" {
			col, _ = strconv.Atoi(m[2])
		}
	}
	return line, col, msg
}
