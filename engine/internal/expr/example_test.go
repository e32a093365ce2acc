package expr_test

import (
	"fmt"

	"github.com/dcc-flow/dcc-flow/engine/internal/expr"
)

func Example() {
	doc := map[string]any{
		"list": map[string]any{"files": []any{
			map[string]any{"path": "/in/a.ma", "size": 1024.0},
			map[string]any{"path": "/in/b.ma", "size": 20.0},
		}},
	}
	paths, _ := expr.Compile("$.list.files[*].path")
	big, _ := expr.Compile("$.list.files[?@.size > 1000].path")
	none, _ := expr.Compile("$.list.missing")
	fmt.Printf("%#v\n", paths.Select(doc))
	fmt.Printf("%#v\n", big.Select(doc))
	fmt.Printf("%#v %d\n", none.Select(doc), len(expr.Items(none.Select(doc))))
	fmt.Println(paths.RootName())

	_, err := expr.Compile("$.list[")
	fmt.Println(err)
	// Output:
	// []interface {}{"/in/a.ma", "/in/b.ma"}
	// "/in/a.ma"
	// <nil> 0
	// list true
	// invalid JSONPath "$.list[": unexpected eof at position 8
}

func ExampleTruthy() {
	for _, v := range []any{nil, 0.0, "", []any{}, map[string]any{}, "false", 1.0, []any{false}} {
		fmt.Print(expr.Truthy(v), " ")
	}
	// Output: false false false false false true true true
}
