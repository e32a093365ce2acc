package main

import (
	"context"

	"github.com/dcc-flow/dcc-flow/engine"
)

// resourcesRequest is the request of dccflow_resources: nothing.
type resourcesRequest struct{}

// opResources: {} → {"resources": [resource…]}: the engine's declared resources with their
// limits, holders and queue (engine.Resources).
var opResources = withEngine(func(e *engine.Engine, _ *resourcesRequest) (any, error) {
	return e.Resources(context.Background())
})
