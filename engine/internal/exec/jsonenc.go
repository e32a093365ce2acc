package exec

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// marshalJSON encodes v as compact JSON with sorted object keys and no HTML escaping. Plain
// JSON values (nil, bool, string, float64, integers, json.Number, json.RawMessage,
// map[string]any, []any) are encoded directly, several times faster than encoding/json; other
// types go through encoding/json. NaN and infinities are errors, as in encoding/json.
func marshalJSON(v any) ([]byte, error) {
	var stack [256]byte
	b, err := appendJSON(stack[:0], v)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b), nil
}

var errNotFinite = errors.New("json: unsupported value: NaN or ±Inf")

func appendJSON(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case string:
		return appendString(b, v), nil
	case float64:
		return appendFloat(b, v)
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case json.Number:
		if v == "" || !json.Valid([]byte(v)) {
			return nil, errors.New("json: invalid number literal " + strconv.Quote(string(v)))
		}
		return append(b, v...), nil
	case json.RawMessage:
		if !json.Valid(v) {
			return nil, errors.New("json: invalid raw message")
		}
		return append(b, v...), nil
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case map[string]any:
		var stack [8]string
		keys := stack[:0]
		for k := range v {
			keys = append(keys, k)
		}
		if len(keys) > 1 {
			slices.Sort(keys)
		}
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, v[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, out...), nil
}

// appendFloat formats f as encoding/json does; NaN and infinities are errors.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, errNotFinite
	}
	return spec.AppendFloat(b, f), nil
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string: invalid UTF-8 becomes U+FFFD, control characters
// and U+2028/U+2029 are escaped, HTML characters are not.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
