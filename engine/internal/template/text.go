package template

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Stringify returns the text an embedded placeholder renders for v:
//
//   - string: itself; nil: ""; bool: "true" or "false";
//   - float64 and float32: the shortest form encoding/json writes ("3" not
//     "3e+00", "0.1", "1e+21", "1e-7"); NaN and ±Inf, which JSON cannot hold,
//     give "NaN", "+Inf" and "-Inf";
//   - integer types: decimal; json.Number: its text;
//   - objects, arrays and anything else: compact JSON with sorted map keys
//     and no HTML escaping (`{"a":[1,"x<y"]}`); a value encoding/json
//     rejects falls back to fmt's %v.
func Stringify(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return string(AppendText(nil, v))
}

// AppendText appends Stringify(v) to b and returns the extended buffer.
func AppendText(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return b
	case string:
		return append(b, v...)
	case bool:
		return strconv.AppendBool(b, v)
	case float64:
		return appendFloat(b, v, 64)
	case float32:
		return appendFloat(b, float64(v), 32)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case int8:
		return strconv.AppendInt(b, int64(v), 10)
	case int16:
		return strconv.AppendInt(b, int64(v), 10)
	case int32:
		return strconv.AppendInt(b, int64(v), 10)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case uint:
		return strconv.AppendUint(b, uint64(v), 10)
	case uint8:
		return strconv.AppendUint(b, uint64(v), 10)
	case uint16:
		return strconv.AppendUint(b, uint64(v), 10)
	case uint32:
		return strconv.AppendUint(b, uint64(v), 10)
	case uint64:
		return strconv.AppendUint(b, v, 10)
	case json.Number:
		return append(b, v...)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Append(b, v)
	}
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
}

// appendFloat formats f as encoding/json does, plus NaN and ±Inf.
func appendFloat(b []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.AppendFloat(b, f, 'g', -1, bits)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 && (f != 0 || !math.Signbit(f)) {
		return strconv.AppendInt(b, int64(f), 10) // fast path, same text
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) ||
		bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// Shorten e-09 to e-9, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
