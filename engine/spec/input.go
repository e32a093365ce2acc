package spec

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/template"
)

// CheckInputValue reports whether v (a JSON value) is acceptable for the declared input: its type,
// its enum, and the formats "date" (YYYY-MM-DD) and "date-time" (RFC 3339). nil is accepted for any
// type (required-ness is checked by the caller). The error message does not name the input.
func CheckInputValue(in Input, v any) error {
	if v == nil {
		return nil
	}
	ok := true
	switch in.Type {
	case "string":
		_, ok = v.(string)
	case "number":
		_, ok = toFloat(v)
	case "integer":
		f, isNum := toFloat(v)
		ok = isNum && f == math.Trunc(f)
	case "boolean":
		_, ok = v.(bool)
	case "object":
		_, ok = v.(map[string]any)
	case "array":
		_, ok = v.([]any)
	}
	if !ok {
		return fmt.Errorf("must be of type %s; got %s", in.Type, jsonTypeName(v))
	}
	if s, isStr := v.(string); isStr {
		switch in.Format {
		case "date":
			if _, err := time.Parse("2006-01-02", s); err != nil {
				return fmt.Errorf("must be a date like 2026-03-08 (format: date); got %q", s)
			}
		case "date-time":
			if _, err := time.Parse(time.RFC3339, s); err != nil {
				return fmt.Errorf("must be an RFC 3339 date-time like 2026-03-08T03:00:00Z (format: date-time); got %q", s)
			}
		}
	}
	if in.Enum != nil {
		for _, e := range in.Enum {
			if jsonEqual(e, v) {
				return nil
			}
		}
		return fmt.Errorf("must be one of %s; got %s", template.Stringify(in.Enum), template.Stringify(v))
	}
	return nil
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case json.Number: // an integer beyond ±2^53 (see DecodeValue): whole, and finite
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	if _, ok := toFloat(v); ok {
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

func jsonEqual(a, b any) bool {
	ab, err1 := CanonicalValue(a)
	bb, err2 := CanonicalValue(b)
	return err1 == nil && err2 == nil && string(ab) == string(bb)
}
