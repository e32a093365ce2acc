package expr

import "testing"

func BenchmarkSelect(b *testing.B) {
	doc := runDoc(b)
	p := mustCompile(b, "$.list.files[*].path")
	b.ReportAllocs()
	for b.Loop() {
		if p.Select(doc) == nil {
			b.Fatal("no result")
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile("$.list.files[?@.size > 1000].path"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSelectMatch(b *testing.B) {
	doc := runDoc(b)
	p := mustCompile(b, "$.list.files[?match(@.name, '.*ma')].path")
	b.ReportAllocs()
	for b.Loop() {
		if p.Select(doc) == nil {
			b.Fatal("no result")
		}
	}
}
