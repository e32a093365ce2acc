package mcpserver

import (
	"context"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// searchPageSize and maxSearchPage are the default and largest page of workflows_search.
const (
	searchPageSize = 50
	maxSearchPage  = 500
)

// addSearchTool adds workflows_search: the run search of docs/reference/cli/inspecting.md "runs" (docs/reference/mcp.md).
func (s *Server) addSearchTool() {
	s.mcp.AddTool(mcp.NewTool("workflows_search",
		mcp.WithDescription("Search the runs, newest first: every filter given must hold. Answers {runs, next_cursor}: each run's workflow_id, name, status, progress, inputs, error and times; next_cursor (when not empty) continues with the next page."),
		mcp.WithObject("inputs", mcp.Description(`Input values the run had, e.g. {"shot": "sh010"}: a string equal to it, an integer or true/false written as text.`)),
		mcp.WithString("tool", mcp.Description("An attempt of the run called this tool.")),
		mcp.WithArray("step_status", mcp.Description("A step of the run is in one of these statuses (failed, skipped, …)."), mcp.WithStringItems()),
		mcp.WithArray("status", mcp.Description("The run is in one of these statuses."), mcp.WithStringItems()),
		mcp.WithString("name", mcp.Description("The run's workflow name.")),
		mcp.WithString("error_kind", mcp.Description("A step or attempt failed with this kind (timeout, worker_lost, …).")),
		mcp.WithString("worker", mcp.Description("An attempt ran on this pool worker (POOL/PID) or pool (POOL).")),
		mcp.WithString("error_text", mcp.Description("An error message contains this text (ignoring case; no wildcards).")),
		mcp.WithString("since", mcp.Description("Created at or after: an RFC 3339 time or an age (30m, 2h, 7d).")),
		mcp.WithString("until", mcp.Description("Created before: an RFC 3339 time or an age.")),
		mcp.WithNumber("limit", mcp.Description(fmt.Sprintf("At most this many runs (default %d, at most %d).", searchPageSize, maxSearchPage))),
		mcp.WithString("cursor", mcp.Description("The next_cursor of the previous page.")),
		mcp.WithReadOnlyHintAnnotation(true), mcp.WithIdempotentHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false), mcp.WithOpenWorldHintAnnotation(false)), s.toolSearch)
}

func (s *Server) toolSearch(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	bad := func(format string, a ...any) (*mcp.CallToolResult, error) {
		return toolError(run.Errorf(run.CodeInvalidRequest, format, a...)), nil
	}
	f := engine.RunFilter{Name: req.GetString("name", ""), Tool: req.GetString("tool", ""),
		ErrorKind: req.GetString("error_kind", ""), Worker: req.GetString("worker", ""), ErrorText: req.GetString("error_text", "")}
	if in, ok := req.GetArguments()["inputs"].(map[string]any); ok && len(in) > 0 {
		f.Inputs = make(map[string]string, len(in))
		for k, v := range in {
			switch v := v.(type) {
			case string:
				f.Inputs[k] = v
			case bool:
				f.Inputs[k] = fmt.Sprint(v)
			case float64:
				if v != float64(int64(v)) {
					return bad("inputs.%s: %v is not searched (only strings, integers and booleans are)", k, v)
				}
				f.Inputs[k] = fmt.Sprint(int64(v))
			default:
				return bad("inputs.%s: only strings, integers and booleans are searched", k)
			}
		}
	}
	for _, st := range req.GetStringSlice("step_status", nil) {
		f.StepStatuses = append(f.StepStatuses, run.StepStatus(st))
	}
	for _, st := range req.GetStringSlice("status", nil) {
		f.Statuses = append(f.Statuses, run.Status(st))
	}
	now := time.Now()
	for _, b := range []struct {
		name string
		t    *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := req.GetString(b.name, ""); v != "" {
			t, err := engine.ParseTimeBound(b.name, v, now)
			if err != nil {
				return toolError(err), nil
			}
			*b.t = t
		}
	}
	limit := req.GetInt("limit", searchPageSize)
	if limit < 1 || limit > maxSearchPage {
		return bad("limit %d must be from 1 to %d", limit, maxSearchPage)
	}
	if c := req.GetString("cursor", ""); c != "" {
		pos, ok := engine.ParseRunCursor(c)
		if !ok {
			return bad("cursor %.60q is not one workflows_search gave (its next_cursor)", c)
		}
		f.After = &pos
	}
	f.Limit = limit + 1
	infos, err := s.e.Runs(ctx, f)
	if err != nil {
		return toolError(err), nil
	}
	next := ""
	if len(infos) > limit {
		infos = infos[:limit]
		last := infos[limit-1]
		next = engine.FormatRunCursor(engine.RunCursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	runs := make([]map[string]any, 0, len(infos))
	for _, info := range infos {
		r := map[string]any{"workflow_id": info.ID, "name": info.Name, "status": info.Status, "terminal": info.Terminal,
			"progress": info.Progress, "inputs": info.Inputs, "created_at": info.CreatedAt}
		if !info.FinishedAt.IsZero() {
			r["finished_at"] = info.FinishedAt
		}
		if info.Error != nil {
			r["error"] = info.Error
		}
		runs = append(runs, r)
	}
	return structured(map[string]any{"runs": runs, "next_cursor": next}), nil
}
