package spec_test

import (
	"os"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func BenchmarkParseDesignExample(b *testing.B) {
	data, err := os.ReadFile("testdata/design_vendor_intake.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := spec.Parse(data, spec.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
