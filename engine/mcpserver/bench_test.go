package mcpserver_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/mcpserver"
)

// BenchmarkWorkflowsRunHTTP: workflows_run → terminal for a 1-step workflow over streamable
// HTTP on loopback (wait_secs keeps the request open until the run ends); reports p50 and p99.
func BenchmarkWorkflowsRunHTTP(b *testing.B) {
	bd := setup(b, "http", mcpserver.WithRunRateLimit(0, 0)) // measure latency, not the limiter
	req := mcp.CallToolRequest{}
	req.Params.Name = "workflows_run"
	req.Params.Arguments = map[string]any{"spec": "steps: [{id: a, tool: flow__echo, args: {value: 1}}]", "wait_secs": 10}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := bd.c.CallTool(context.Background(), req)
		if err != nil || res.IsError {
			b.Fatalf("%v %+v", err, res)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
}
