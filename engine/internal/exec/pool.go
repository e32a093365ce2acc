package exec

import (
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// PoolRouter returns a Config.PoolFor: a tool step's own `pool:` — optional: it runs
// in-process when neither this engine nor another attached one has that remote —, else the
// pool of the longest toolPools pattern (path.Match) matching its tool (ties: the first in
// byte order), else "". toolPools is copied.
func PoolRouter(toolPools map[string]string) func(*spec.Step) (string, bool) {
	patterns := slices.Collect(maps.Keys(toolPools))
	slices.SortFunc(patterns, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	toolPools = maps.Clone(toolPools)
	return func(st *spec.Step) (string, bool) {
		if st.Pool != "" {
			return st.Pool, true
		}
		for _, p := range patterns {
			if ok, _ := path.Match(p, st.Tool); ok {
				return toolPools[p], false
			}
		}
		return "", false
	}
}
