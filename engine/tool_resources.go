package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// checkToolResources fails with code invalid_request when a tool registration asks for a
// resource the engine does not declare (with a suggestion), or for an amount that is not 1 to
// that resource's limit (docs/guide/resources.md, "Asking for resources").
func (e *Engine) checkToolResources(info flowtype.ToolInfo) error {
	if len(info.Resources) == 0 {
		return nil
	}
	limits := e.cfg.resourceLimits()
	declared := slices.Sorted(maps.Keys(limits))
	for _, name := range slices.Sorted(maps.Keys(info.Resources)) {
		amount := info.Resources[name]
		limit, ok := limits[name]
		switch {
		case !ok:
			hint := fmt.Sprintf("declare it in the engine settings (`resources: {%s: {limit: N}}`) or leave it out of the registration", name)
			switch sug := yamltext.Suggest(name, declared); {
			case len(declared) == 0:
				hint = "the engine declares no resources; " + hint
			case sug != "":
				hint = fmt.Sprintf("did you mean %q? The engine declares %s; or %s", sug, quoteNames(declared), hint)
			default:
				hint = fmt.Sprintf("the engine declares %s; %s", quoteNames(declared), hint)
			}
			return run.Errorf(run.CodeInvalidRequest, "tool %s: `resources` asks for %q, which the engine does not declare: %s", info.Name, name, hint)
		case amount < 1 || amount > limit:
			return run.Errorf(run.CodeInvalidRequest, "tool %s: `resources.%s` must be 1 to the engine's limit of %q, %d; got %d", info.Name, name, name, limit, amount)
		}
	}
	return nil
}

// quoteNames is names for messages: "gpu", "houdini".
func quoteNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// poolUnits is the remote.UnitsFunc of the engine's pools: a worker of pool remote takes the
// units of its `resources` through the engine's gate, as a step would (in this engine's queue,
// and on a shared database under its lease), held under the name "pool REMOTE worker N" until
// it stops. An engine that declares no resources has nothing to take (its config refused such
// a pool).
func (e *Engine) poolUnits(ctx context.Context, remote string, worker int, amounts map[string]int) (func(), error) {
	if e.resGate == nil {
		return func() {}, nil
	}
	return e.resGate.Acquire(ctx, exec.ResourceWait{StepKey: fmt.Sprintf("pool %s worker %d", remote, worker), Amounts: amounts,
		FairShare: "pool:" + remote, Waiting: func(run.StepWaiting, string) {}})
}
