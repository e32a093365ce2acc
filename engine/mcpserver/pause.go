package mcpserver

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// addPauseTools adds workflows_pause and workflows_unpause (docs/reference/mcp.md, docs/reference/state-machine.md
// "Pause").
func (s *Server) addPauseTools() {
	s.mcp.AddTool(mcp.NewTool("workflows_pause",
		mcp.WithDescription("Pause a run: no new step starts (foreach items and retries included) until workflows_unpause; steps already running finish and record their results, and open approvals can still be answered. Pausing a paused run does nothing; a finished run is invalid_state."),
		mcp.WithString("workflow_id", mcp.Required()),
		mcp.WithString("reason", mcp.Description("Why, for the run_paused event.")),
		mcp.WithString("by", mcp.Description("Who asks, for the run_paused event.")),
		mcp.WithDestructiveHintAnnotation(false), mcp.WithIdempotentHintAnnotation(true),
		mcp.WithReadOnlyHintAnnotation(false), mcp.WithOpenWorldHintAnnotation(false)), s.toolPause)
	s.mcp.AddTool(mcp.NewTool("workflows_unpause",
		mcp.WithDescription("Let a paused run go on: the steps it held start. A run paused when its engine stopped is resumed, reusing its completed steps. Unpausing a run that is not paused does nothing; a finished run is invalid_state."),
		mcp.WithString("workflow_id", mcp.Required()),
		mcp.WithString("reason", mcp.Description("Why, for the run_unpaused event.")),
		mcp.WithString("by", mcp.Description("Who asks, for the run_unpaused event.")),
		mcp.WithDestructiveHintAnnotation(false), mcp.WithIdempotentHintAnnotation(true),
		mcp.WithReadOnlyHintAnnotation(false), mcp.WithOpenWorldHintAnnotation(false)), s.toolUnpause)
}

func (s *Server) toolPause(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return s.setPaused(ctx, req, true)
}

func (s *Server) toolUnpause(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return s.setPaused(ctx, req, false)
}

// setPaused pauses or unpauses and answers {"workflow_id", "status", "terminal"} as it is then.
func (s *Server) setPaused(ctx context.Context, req mcp.CallToolRequest, pause bool) (*mcp.CallToolResult, error) {
	id, err := req.RequireString("workflow_id")
	if err != nil {
		return toolError(run.Errorf(run.CodeInvalidRequest, "workflow_id is required")), nil
	}
	reason, by := req.GetString("reason", ""), req.GetString("by", "")
	if pause {
		err = s.e.Pause(ctx, id, reason, by)
	} else {
		err = s.e.Unpause(ctx, id, reason, by)
	}
	if err != nil {
		return toolError(err), nil
	}
	info, err := s.e.Status(ctx, id)
	if err != nil {
		return toolError(err), nil
	}
	return structured(map[string]any{"workflow_id": id, "status": info.Status, "terminal": info.Terminal}), nil
}
