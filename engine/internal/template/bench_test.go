package template

import "testing"

func benchResolve(b *testing.B) func(Ref) any {
	b.Helper()
	doc := testDoc()
	return func(r Ref) any { return Lookup(doc, r) }
}

func BenchmarkRenderWhole(b *testing.B) {
	tmpl, err := Parse("{{list.files[1].path}}")
	if err != nil {
		b.Fatal(err)
	}
	resolve := benchResolve(b)
	b.ReportAllocs()
	for b.Loop() {
		if tmpl.Render(resolve) != "/in/b.ma" {
			b.Fatal("wrong result")
		}
	}
}

func BenchmarkRenderEmbedded(b *testing.B) {
	tmpl, err := Parse("export_{{file.path}}_{{inputs.date}}_{{inputs.count}}")
	if err != nil {
		b.Fatal(err)
	}
	resolve := benchResolve(b)
	b.ReportAllocs()
	for b.Loop() {
		if tmpl.Render(resolve) != "export_/in/a.ma_2024-05-01_3" {
			b.Fatal("wrong result")
		}
	}
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("export_{{file.path}}_{{inputs.date}}"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenderValue(b *testing.B) {
	args := map[string]any{
		"scene":  "{{file.path}}",
		"out":    "/out/{{inputs.date}}/a.fbx",
		"fps":    24.0,
		"format": "fbx",
	}
	resolve := benchResolve(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RenderValue(args, resolve); err != nil {
			b.Fatal(err)
		}
	}
}
