package exec_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Checking n inputs costs the same per input at 100, 1,000 and 10,000 (a declared-name lookup
// was a linear search per value).
func BenchmarkCheckInputs(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		var text strings.Builder
		text.WriteString("inputs:\n")
		given := make(map[string]any, n)
		for i := range n {
			fmt.Fprintf(&text, "  in%d: {type: string}\n", i)
			given[fmt.Sprintf("in%d", i)] = "x"
		}
		text.WriteString("steps: [{id: a, tool: flow__echo}]\n")
		s, err := spec.ParseString(text.String())
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				values := make(map[string]any, n)
				for k, v := range given {
					values[k] = v
				}
				if _, err := exec.CheckInputs(s, values); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/input")
		})
	}
}
