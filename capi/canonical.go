package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"unicode/utf8"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// canonicalRaw returns the canonical form of the JSON value raw — the bytes spec.CanonicalValue
// gives for the value json.Unmarshal decodes from raw: object members sorted by name (the last
// of duplicates kept), numbers as float64 in encoding/json's format, strings escaped as
// encoding/json escapes them without HTML escaping, no blanks — without building the decoded
// value. A step's output crosses the C ABI this way: decoding a 60 MB output into Go values
// to encode it again took about 4× its size. Should raw be something the scanner does not take
// (it never is: outputs are checked with json.Valid), it decodes and encodes as before.
func canonicalRaw(raw []byte) json.RawMessage {
	c := canonicalizer{src: raw, dst: make([]byte, 0, len(raw))}
	if err := c.value(0, len(raw)); err == nil {
		return c.dst
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return json.RawMessage("null")
	}
	b, err := spec.CanonicalValue(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

var errNotCanonical = errors.New("canonical: unexpected JSON")

type canonicalizer struct {
	src, dst []byte
}

type member struct {
	key        string // the decoded name
	start, end int    // the value's span in src
	order      int
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// value appends the canonical form of the one value in src[i:end] (blanks around it allowed).
func (c *canonicalizer) value(i, end int) error {
	for i < end && isBlank(c.src[i]) {
		i++
	}
	j, err := c.emit(i)
	if err != nil {
		return err
	}
	for j < end && isBlank(c.src[j]) {
		j++
	}
	if j != end {
		return errNotCanonical
	}
	return nil
}

// emit appends the canonical form of the value starting at src[i] and returns where it ends.
func (c *canonicalizer) emit(i int) (int, error) {
	if i >= len(c.src) {
		return 0, errNotCanonical
	}
	switch ch := c.src[i]; {
	case ch == '{':
		return c.object(i)
	case ch == '[':
		c.dst = append(c.dst, '[')
		i = c.blanks(i + 1)
		if i < len(c.src) && c.src[i] == ']' {
			c.dst = append(c.dst, ']')
			return i + 1, nil
		}
		for n := 0; ; n++ {
			if n > 0 {
				c.dst = append(c.dst, ',')
			}
			j, err := c.emit(c.blanks(i))
			if err != nil {
				return 0, err
			}
			i = c.blanks(j)
			if i >= len(c.src) {
				return 0, errNotCanonical
			}
			if c.src[i] == ']' {
				c.dst = append(c.dst, ']')
				return i + 1, nil
			}
			if c.src[i] != ',' {
				return 0, errNotCanonical
			}
			i++
		}
	case ch == '"':
		j, err := skipString(c.src, i)
		if err != nil {
			return 0, err
		}
		c.dst, err = appendCanonicalString(c.dst, c.src[i:j])
		return j, err
	case ch == 't' || ch == 'f' || ch == 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(c.src[i:], []byte(lit)) {
				c.dst = append(c.dst, lit...)
				return i + len(lit), nil
			}
		}
		return 0, errNotCanonical
	default:
		j := i
		for j < len(c.src) && (c.src[j] == '-' || c.src[j] == '+' || c.src[j] == '.' || c.src[j] == 'e' || c.src[j] == 'E' || (c.src[j] >= '0' && c.src[j] <= '9')) {
			j++
		}
		if j == i {
			return 0, errNotCanonical
		}
		v, ok := spec.NumberValue(string(c.src[i:j]))
		if !ok {
			return 0, errNotCanonical
		}
		if exact, isExact := v.(json.Number); isExact {
			c.dst = append(c.dst, exact...) // an integer beyond ±2^53: its digits, as the engine holds it
		} else {
			c.dst = spec.AppendFloat(c.dst, v.(float64))
		}
		return j, nil
	}
}

func (c *canonicalizer) blanks(i int) int {
	for i < len(c.src) && isBlank(c.src[i]) {
		i++
	}
	return i
}

// object collects the members of the object at src[i], then emits them sorted by name.
func (c *canonicalizer) object(i int) (int, error) {
	var members []member
	i = c.blanks(i + 1)
	if i < len(c.src) && c.src[i] == '}' {
		c.dst = append(c.dst, '{', '}')
		return i + 1, nil
	}
	for {
		if i >= len(c.src) || c.src[i] != '"' {
			return 0, errNotCanonical
		}
		j, err := skipString(c.src, i)
		if err != nil {
			return 0, err
		}
		var key string
		if body := c.src[i+1 : j-1]; plainString(body) {
			key = string(body)
		} else if err := json.Unmarshal(c.src[i:j], &key); err != nil {
			return 0, errNotCanonical
		}
		i = c.blanks(j)
		if i >= len(c.src) || c.src[i] != ':' {
			return 0, errNotCanonical
		}
		start := c.blanks(i + 1)
		end, err := skipValue(c.src, start)
		if err != nil {
			return 0, err
		}
		members = append(members, member{key: key, start: start, end: end, order: len(members)})
		i = c.blanks(end)
		if i >= len(c.src) {
			return 0, errNotCanonical
		}
		if c.src[i] == '}' {
			i++
			break
		}
		if c.src[i] != ',' {
			return 0, errNotCanonical
		}
		i = c.blanks(i + 1)
	}
	// Sort by name; of members with the same name, the last one wins (as json.Unmarshal does).
	slices.SortStableFunc(members, func(a, b member) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	c.dst = append(c.dst, '{')
	first := true
	for k, m := range members {
		if k+1 < len(members) && members[k+1].key == m.key {
			continue
		}
		if !first {
			c.dst = append(c.dst, ',')
		}
		first = false
		c.dst = appendCanonicalKey(c.dst, m.key)
		c.dst = append(c.dst, ':')
		if err := c.value(m.start, m.end); err != nil {
			return 0, err
		}
	}
	c.dst = append(c.dst, '}')
	return i, nil
}

// skipString returns the index after the string starting at src[i].
func skipString(src []byte, i int) (int, error) {
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errNotCanonical
}

// skipValue returns the index after the value starting at src[i].
func skipValue(src []byte, i int) (int, error) {
	if i >= len(src) {
		return 0, errNotCanonical
	}
	switch src[i] {
	case '"':
		return skipString(src, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(src); j++ {
			switch src[j] {
			case '"':
				k, err := skipString(src, j)
				if err != nil {
					return 0, err
				}
				j = k - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errNotCanonical
	}
	j := i
	for j < len(src) && src[j] != ',' && src[j] != '}' && src[j] != ']' && !isBlank(src[j]) {
		j++
	}
	return j, nil
}

// plainString reports whether body, the inside of a JSON string, is written by encoding/json
// exactly as it is: valid UTF-8 without escapes, control characters or U+2028/U+2029.
func plainString(body []byte) bool {
	for k := 0; k < len(body); k++ {
		switch c := body[k]; {
		case c < 0x20 || c == '\\' || c == '"':
			return false
		case c == 0xE2 && k+2 < len(body) && body[k+1] == 0x80 && (body[k+2] == 0xA8 || body[k+2] == 0xA9):
			return false
		}
	}
	return utf8.Valid(body)
}

// appendCanonicalString appends the JSON string lit (with its quotes) as encoding/json writes
// the decoded string: as is when it holds no escape, control character, invalid UTF-8 or
// U+2028/U+2029 (the common case), else decoded and encoded again.
func appendCanonicalString(dst, lit []byte) ([]byte, error) {
	if plainString(lit[1 : len(lit)-1]) {
		return append(dst, lit...), nil
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return nil, errNotCanonical
	}
	return appendCanonicalKey(dst, s), nil
}

// appendCanonicalKey appends s encoded as encoding/json encodes it, without HTML escaping.
func appendCanonicalKey(dst []byte, s string) []byte {
	if plainString([]byte(s)) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimRight(buf.Bytes(), "\n")...)
}
