package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

// The schedule resources (docs/reference/mcp.md, "Resources and notifications"): the schedules with their
// next and last fires, and each schedule's fire history. They send no updates: read them again.
const (
	schedulesURI        = "dccflow://schedules"
	scheduleURIPrefix   = "dccflow://schedules/" // + schedule_id + scheduleFiresSuffix
	scheduleFiresSuffix = "/fires"
	// maxFiresResource is how many fires the fires resource holds, newest first.
	maxFiresResource = 100
)

// scheduleJSON is one schedule of dccflow://schedules.
type scheduleJSON struct {
	flowtype.ScheduleSpec
	NextFire      any          `json:"next_fire"`
	SecretMissing bool         `json:"secret_missing,omitempty"`
	LastFire      *engine.Fire `json:"last_fire,omitempty"`
}

func (s *Server) addScheduleResources() {
	s.mcp.AddResource(mcp.NewResource(schedulesURI, "schedules",
		mcp.WithResourceDescription("Every schedule (cron, interval, webhook) with its next fire time and its last fire."),
		mcp.WithMIMEType("application/json")),
		func(ctx context.Context, _ mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			out := []scheduleJSON{}
			for _, info := range s.e.Schedules() {
				sj := scheduleJSON{ScheduleSpec: info.Spec, SecretMissing: info.SecretMissing}
				if !info.NextFire.IsZero() {
					sj.NextFire = info.NextFire
				}
				if fires, err := s.e.ScheduleFires(ctx, info.Spec.ID, 1); err == nil && len(fires) > 0 {
					sj.LastFire = &fires[0]
				}
				out = append(out, sj)
			}
			return textResource(schedulesURI, map[string]any{"schedules": out})
		})
	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(scheduleURIPrefix+"{schedule_id}"+scheduleFiresSuffix, "schedule fire history",
		mcp.WithTemplateDescription(fmt.Sprintf("A schedule's fire history, newest first (at most %d): when it fired, the run it started, or why it was skipped or failed.", maxFiresResource)),
		mcp.WithTemplateMIMEType("application/json")),
		func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			uri := req.Params.URI
			id := strings.TrimSuffix(strings.TrimPrefix(uri, scheduleURIPrefix), scheduleFiresSuffix)
			fires, err := s.e.ScheduleFires(ctx, id, maxFiresResource)
			if err != nil {
				return nil, err
			}
			if len(fires) == 0 && !s.hasSchedule(id) {
				// -32603 like every resource error of mcp-go; the message says what happened.
				return nil, fmt.Errorf("resource not found: %s (no schedule %s)", uri, id)
			}
			if fires == nil {
				fires = []engine.Fire{}
			}
			return textResource(uri, map[string]any{"schedule_id": id, "fires": fires})
		})
}

// hasSchedule reports whether a schedule with id is registered.
func (s *Server) hasSchedule(id string) bool {
	for _, info := range s.e.Schedules() {
		if info.Spec.ID == id {
			return true
		}
	}
	return false
}

func textResource(uri string, v any) ([]mcp.ResourceContents, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: "application/json", Text: string(b)}}, nil
}
