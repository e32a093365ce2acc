package expr

import (
	"encoding/json"
	"reflect"
)

// Truthy reports whether v counts as true in a branch condition. False are:
// nil, false, numeric zero of any type (0, -0, int64(0), json.Number "0" or
// "0.0"), "", an empty array and an empty object (empty or nil []any and
// map[string]any, and any other empty slice, array or map) and a nil
// pointer. Everything else
// is true, including "false", "0", NaN, and an array holding only false.
func Truthy(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case string:
		return v != ""
	case float64:
		return v != 0
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	case json.Number:
		f, err := v.Float64()
		return err != nil || f != 0
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int() != 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return rv.Uint() != 0
	case reflect.Float32, reflect.Float64:
		return rv.Float() != 0
	case reflect.String, reflect.Slice, reflect.Array, reflect.Map:
		return rv.Len() > 0
	case reflect.Bool:
		return rv.Bool()
	case reflect.Pointer, reflect.Interface:
		return !rv.IsNil()
	}
	return true
}

// Items returns the elements a foreach iterates for items value v: a []any
// is returned as is (not copied), nil gives an empty list (nil), any other
// slice or array ([]string, []map[string]any, …) gives a new list of its
// elements, and any other value — a scalar, an object, a []byte — gives a
// one-element list.
func Items(v any) []any {
	switch v := v.(type) {
	case nil:
		return nil
	case []any:
		return v
	case map[string]any, string, float64, bool, json.Number:
		return []any{v}
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			break // []byte encodes as a JSON string: a scalar
		}
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = rv.Index(i).Interface()
		}
		return out
	}
	return []any{v}
}
