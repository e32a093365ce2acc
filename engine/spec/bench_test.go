package spec_test

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func BenchmarkParseFullExample(b *testing.B) {
	data, err := os.ReadFile("testdata/full_vendor_intake.yaml")
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

// oneLineJSONSpec is a sequential spec of n tool steps as Python sends it: one line of JSON.
func oneLineJSONSpec(n int) []byte {
	steps := make([]map[string]any, n)
	for i := range steps {
		steps[i] = map[string]any{"id": fmt.Sprintf("s%d", i), "tool": "flow__echo", "args": map[string]any{"text": "x"}}
	}
	data, _ := json.Marshal(map[string]any{"name": "big", "steps": steps})
	return data
}

// The per-step cost of parsing one-line JSON is the same at 100, 1,000 and 10,000 steps (it was
// quadratic: every token's line:column was counted from the start of the text).
func BenchmarkParseOneLineJSON(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		data := oneLineJSONSpec(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				if _, err := spec.Parse(data, spec.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "µs/step")
		})
	}
}

// Validating a spec whose every step names an unknown variable and an unknown dependency costs
// the same per step at 100, 1,000 and 10,000 steps ("did you mean" suggestions are bounded).
func BenchmarkValidateUnknownNames(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		steps := make([]map[string]any, n)
		for i := range steps {
			steps[i] = map[string]any{"id": fmt.Sprintf("step%d", i), "tool": "flow__echo",
				"args": map[string]any{"text": fmt.Sprintf("{{stepx%d.out}}", i)}, "depends_on": []string{fmt.Sprintf("stepy%d", i)}}
		}
		data, _ := json.Marshal(map[string]any{"steps": steps})
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				s, err := spec.Parse(data, spec.Options{})
				if err == nil {
					err = s.Validate()
				}
				if err == nil {
					b.Fatal("an invalid spec was accepted")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "µs/step")
		})
	}
}
