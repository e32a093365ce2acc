package remote

import (
	"context"

	"github.com/dcc-flow/dcc-flow/engine/internal/tracing/tracectx"
	"github.com/mark3labs/mcp-go/mcp"
)

// TraceparentMetaKey is the _meta key of a tools/call request that carries the W3C
// traceparent of the call's span when the engine traces (docs/guide/tracing.md): a
// dcc-flow worker hands it to the tool as current_call().traceparent.
const TraceparentMetaKey = "traceparent"

// withTraceparent adds ctx's traceparent (tracectx), if any, to req's _meta.
func withTraceparent(ctx context.Context, req *mcp.CallToolRequest) {
	tp := tracectx.From(ctx)
	if tp == "" {
		return
	}
	if req.Params.Meta == nil {
		req.Params.Meta = &mcp.Meta{}
	}
	if req.Params.Meta.AdditionalFields == nil {
		req.Params.Meta.AdditionalFields = map[string]any{}
	}
	req.Params.Meta.AdditionalFields[TraceparentMetaKey] = tp
}
