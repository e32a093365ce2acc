package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

func readResource(t *testing.T, b *bundle, uri string) (map[string]any, error) {
	t.Helper()
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = uri
	res, err := b.c.ReadResource(context.Background(), rr)
	if err != nil {
		return nil, err
	}
	if len(res.Contents) != 1 {
		t.Fatalf("%s: %d contents", uri, len(res.Contents))
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(res.Contents[0].(mcp.TextResourceContents).Text), &doc); err != nil {
		t.Fatal(err)
	}
	return doc, nil
}

// dccflow://schedules lists the schedules with their last fire; dccflow://schedules/{id}/fires
// is a schedule's fire history, newest first; an unknown schedule is "resource not found".
func TestScheduleResources(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio")
	if err := b.e.Schedule(flowtype.ScheduleSpec{ID: "upload", Workflow: "gated", Enabled: true, MaxConcurrent: 0,
		Inputs: map[string]any{"shot": "sh010"}, Trigger: flowtype.ScheduleTrigger{Kind: "webhook", Path: "/upload"}}); err != nil {
		t.Fatal(err)
	}
	if doc, err := readResource(t, b, "dccflow://schedules/upload/fires"); err != nil || doc["schedule_id"] != "upload" ||
		len(doc["fires"].([]any)) != 0 {
		t.Fatalf("fires before any: %v %v", doc, err)
	}
	ws, err := b.e.ServeWebhooks("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close(context.Background())
	var runs []string
	for range 2 {
		resp, err := http.Post("http://"+ws.Addr()+"/upload", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		var ack map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&ack)
		resp.Body.Close()
		runs = append(runs, ack["run_id"].(string))
	}
	doc, err := readResource(t, b, "dccflow://schedules/upload/fires")
	if err != nil {
		t.Fatal(err)
	}
	fires := doc["fires"].([]any)
	if len(fires) != 2 || fires[0].(map[string]any)["run_id"] != runs[1] || fires[1].(map[string]any)["run_id"] != runs[0] ||
		fires[0].(map[string]any)["kind"] != "fired" || fires[0].(map[string]any)["origin"] != "webhook" {
		t.Fatalf("fires: %v; want the runs %v newest first", fires, runs)
	}
	list, err := readResource(t, b, "dccflow://schedules")
	if err != nil {
		t.Fatal(err)
	}
	scheds := list["schedules"].([]any)
	if len(scheds) != 1 {
		t.Fatalf("schedules: %v", list)
	}
	s := scheds[0].(map[string]any)
	if s["id"] != "upload" || s["workflow"] != "gated" || s["next_fire"] != nil || s["last_fire"].(map[string]any)["run_id"] != runs[1] {
		t.Fatalf("schedule: %v", s)
	}
	if _, err := readResource(t, b, "dccflow://schedules/nope/fires"); err == nil ||
		!strings.Contains(err.Error(), "resource not found: dccflow://schedules/nope/fires (no schedule nope)") {
		t.Fatalf("an unknown schedule: %v", err)
	}
	tpls, err := b.c.ListResourceTemplates(context.Background(), mcp.ListResourceTemplatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tpl := range tpls.ResourceTemplates {
		names = append(names, tpl.URITemplate.Raw())
	}
	if !strings.Contains(strings.Join(names, " "), "dccflow://schedules/{schedule_id}/fires") {
		t.Fatalf("resource templates: %v", names)
	}
}
