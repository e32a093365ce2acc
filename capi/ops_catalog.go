package main

import (
	"context"

	"github.com/dcc-flow/dcc-flow/engine"
)

// workflowsRequest is the input of dccflow_workflows_list.
type workflowsRequest struct {
	// Query filters the catalog as Engine.Lookup does ("" = every workflow).
	Query string `json:"query"`
	// Versions asks for the versions of Name ("" = of every workflow) instead of the catalog.
	Versions bool   `json:"versions"`
	Name     string `json:"name"`
}

var opWorkflowsList = withEngine(func(e *engine.Engine, req *workflowsRequest) (any, error) {
	if !req.Versions {
		entries := e.Lookup(req.Query)
		if entries == nil {
			entries = []engine.CatalogEntry{}
		}
		return map[string]any{"workflows": entries}, nil
	}
	vs, err := e.WorkflowVersions(context.Background(), req.Name)
	if err != nil {
		return nil, err
	}
	if vs == nil {
		vs = []engine.WorkflowVersion{}
	}
	return map[string]any{"versions": vs}, nil
})
