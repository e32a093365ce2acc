package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"

	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
)

// JSON values as the engine holds them: map[string]any, []any, string, bool, nil, and numbers as
// float64, except integers that a float64 cannot hold exactly (beyond ±2^53, such as 64-bit asset
// ids and hashes), which stay json.Number with their exact decimal text. Every encoder, template
// and JSONPath in the engine writes a json.Number as its text, so such an integer travels from
// inputs and tool outputs to templates, run records and Python exactly, never rounded.

// DecodeValue decodes one JSON value into the engine's representation (see above). Trailing data
// after the value is an error, as is a number beyond the float64 range (1e400).
func DecodeValue(data []byte) (any, error) {
	if !hasLongDigitRun(data) {
		// No 16-digit run anywhere: every number fits a float64 exactly, so the plain decoder
		// (no json.Number, no second walk) gives the same result faster.
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, err
		}
		return v, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("invalid character after top-level value")
	}
	return exactNumbers(v)
}

// Object is a JSON object decoded by DecodeValue; use it for request fields that carry user
// values (inputs, args) so their large integers stay exact. JSON null decodes to a nil Object.
type Object map[string]any

// UnmarshalJSON decodes a JSON object (or null) with DecodeValue.
func (o *Object) UnmarshalJSON(data []byte) error {
	v, err := DecodeValue(data)
	if err != nil {
		return err
	}
	switch v := v.(type) {
	case nil:
		*o = nil
	case map[string]any:
		*o = v
	default:
		return errors.New("json: expected an object, got " + jsonTypeName(v))
	}
	return nil
}

// NumberValue returns the engine's value of the JSON or YAML number text s: an integer beyond
// ±2^53 as json.Number (its canonical decimal text), anything else as float64. ok is false for
// text that is not a finite number.
func NumberValue(s string) (v any, ok bool) { return yamltext.NumberValue(s) }

// exactNumbers replaces each json.Number in v (decoded with UseNumber) by its engine value.
func exactNumbers(v any) (any, error) {
	switch v := v.(type) {
	case json.Number:
		n, ok := NumberValue(string(v))
		if !ok {
			return nil, errors.New("json: number " + string(v) + " is out of range")
		}
		return n, nil
	case map[string]any:
		for k, e := range v {
			n, err := exactNumbers(e)
			if err != nil {
				return nil, err
			}
			v[k] = n
		}
	case []any:
		for i, e := range v {
			n, err := exactNumbers(e)
			if err != nil {
				return nil, err
			}
			v[i] = n
		}
	}
	return v, nil
}

// hasLongDigitRun reports whether data holds 16 or more digits in a row (inside strings too:
// that only costs the exact path, never correctness). Integers up to 15 digits are below 2^53.
func hasLongDigitRun(data []byte) bool {
	run := 0
	for _, c := range data {
		if c >= '0' && c <= '9' {
			run++
			if run >= 16 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// AppendFloat appends the finite f as encoding/json encodes a float64: integers below 1e21 in
// plain decimal ("3", not "3e+00"), the shortest form otherwise, exponents for magnitudes under
// 1e-6 or from 1e21 ("1e-7", "1e+21"). NaN and ±Inf are the caller's to refuse.
func AppendFloat(dst []byte, f float64) []byte {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 && (f != 0 || !math.Signbit(f)) {
		return strconv.AppendInt(dst, int64(f), 10)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}
