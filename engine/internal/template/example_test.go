package template_test

import (
	"fmt"

	"github.com/dcc-flow/dcc-flow/engine/internal/template"
)

func Example() {
	doc := map[string]any{
		"inputs": map[string]any{"date": "2024-05-01"},
		"file":   map[string]any{"path": "/in/a.ma", "size": 1024.0},
	}
	resolve := func(r template.Ref) any { return template.Lookup(doc, r) }

	whole, _ := template.Parse("{{ file.size }}")
	embedded, _ := template.Parse("export_{{file.path}}_{{inputs.date}}")
	fmt.Printf("%#v\n", whole.Render(resolve))
	fmt.Printf("%#v\n", embedded.Render(resolve))
	fmt.Println(embedded.Refs())

	_, err := template.Parse("scene {{file..path}}")
	fmt.Println(err)
	// Output:
	// 1024
	// "export_/in/a.ma_2024-05-01"
	// [file.path inputs.date]
	// malformed template at offset 6: invalid path "file..path": expected a name after "."
}

func ExampleRenderValue() {
	args := map[string]any{
		"scene": "{{file.path}}",
		"files": "{{files}}",
		"note":  "{{ files }} is rendered as text here",
	}
	doc := map[string]any{
		"file":  map[string]any{"path": "/in/a.ma"},
		"files": []any{"/in/a.ma", "/in/b.ma"},
	}
	out, err := template.RenderValue(args, func(r template.Ref) any { return template.Lookup(doc, r) })
	fmt.Printf("%#v %v\n", out.(map[string]any)["files"], err)
	fmt.Println(out.(map[string]any)["note"])

	_, err = template.RenderValue(map[string]any{"list": []any{"ok", "{{x"}}, nil)
	fmt.Println(err)
	// Output:
	// []interface {}{"/in/a.ma", "/in/b.ma"} <nil>
	// ["/in/a.ma","/in/b.ma"] is rendered as text here
	// list[1]: malformed template at offset 0: unclosed "{{"
}
