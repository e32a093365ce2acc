package spec_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// perUnit returns the best of three timings of fn(n), divided by n. Each timing repeats fn
// until at least 20 ms have passed: Windows clocks move in ticks of 0.5 to 15.6 ms, so one
// short call can measure 0.
func perUnit(n int, fn func(n int)) time.Duration {
	best := time.Duration(1 << 62)
	for range 3 {
		start, reps := time.Now(), 0
		for reps == 0 || time.Since(start) < 20*time.Millisecond {
			fn(n)
			reps++
		}
		best = min(best, time.Since(start)/time.Duration(reps))
	}
	return best / time.Duration(n)
}

// The paths that were quadratic stay linear: the cost per step at 2,000 steps is within a
// generous factor of the cost at 200 (a quadratic path is about 10× there; make bench-scale has
// the figures).
func TestParseAndValidateScaleLinearly(t *testing.T) {
	t.Parallel()
	unknownNames := func(n int) []byte {
		steps := make([]map[string]any, n)
		for i := range steps {
			steps[i] = map[string]any{"id": fmt.Sprintf("step%d", i), "tool": "flow__echo",
				"args": map[string]any{"text": fmt.Sprintf("{{stepx%d.out}}", i)}, "depends_on": []string{fmt.Sprintf("stepy%d", i)}}
		}
		data, _ := json.Marshal(map[string]any{"steps": steps})
		return data
	}
	for name, fn := range map[string]func(n int){
		"one-line JSON parse": func(n int) {
			if _, err := spec.Parse(oneLineJSONSpec(n), spec.Options{}); err != nil {
				t.Fatal(err)
			}
		},
		"validation of unknown names": func(n int) {
			if s, err := spec.Parse(unknownNames(n), spec.Options{}); err == nil && s.Validate() == nil {
				t.Fatal("accepted")
			}
		},
	} {
		small, large := perUnit(200, fn), perUnit(2000, fn)
		if large > 5*small {
			t.Errorf("%s: %v per step at 2,000 steps, %v at 200: the cost per step grows with the size", name, large, small)
		}
	}
}
