package mcpserver_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/mcpserver"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// WithMetrics serves the engine's metrics on the MCP server's address, behind its token and
// Origin checks.
func TestMetricsOnTheMCPAddress(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	mh, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	hs, err := mcpserver.New(e).ListenHTTP("127.0.0.1:0", "s3cret", mcpserver.WithMetrics(mh))
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close(ctx)
	s, err := spec.ParseString("name: hello\nsteps: [{id: a, tool: flow__echo}]")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Run(ctx, engine.StartRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSuffix(hs.URL(), "/mcp") + "/metrics"
	get := func(method string, header map[string]string) (int, string) {
		req, _ := http.NewRequest(method, url, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	auth := map[string]string{"Authorization": "Bearer s3cret"}
	if code, body := get(http.MethodGet, auth); code != http.StatusOK ||
		!strings.Contains(body, `dccflow_runs_ended_total{status="completed",workflow="hello"} 1`) {
		t.Errorf("GET /metrics: %d %s", code, body)
	}
	if code, _ := get(http.MethodGet, nil); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}
	if code, _ := get(http.MethodGet, map[string]string{"Authorization": "Bearer s3cret", "Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Errorf("foreign Origin: %d, want 403", code)
	}
	if code, _ := get(http.MethodPost, auth); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", code)
	}
}
