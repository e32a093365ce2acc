package exec_test

import (
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func TestPoolRouterLongestPatternAndOwnPool(t *testing.T) {
	t.Parallel()
	pools := map[string]string{"maya_*": "maya", "maya_render*": "farm", "nuke_?": "nuke", "*": "any"}
	route := exec.PoolRouter(pools)
	pools["maya_*"] = "changed" // copied: no effect
	for _, c := range []struct {
		step     spec.Step
		pool     string
		optional bool
	}{
		{spec.Step{Tool: "maya_render_hi"}, "farm", false},
		{spec.Step{Tool: "maya_export"}, "maya", false},
		{spec.Step{Tool: "nuke_x"}, "nuke", false},
		{spec.Step{Tool: "blender"}, "any", false},
		{spec.Step{Tool: "maya_export", Pool: "gpu"}, "gpu", true},
	} {
		pool, optional := route(&c.step)
		if pool != c.pool || optional != c.optional {
			t.Errorf("%+v: %q, %v; want %q, %v", c.step, pool, optional, c.pool, c.optional)
		}
	}
	if pool, _ := exec.PoolRouter(nil)(&spec.Step{Tool: "x"}); pool != "" {
		t.Errorf("no pools: %q", pool)
	}
}
