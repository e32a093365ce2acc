package mcpserver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestUnknownToolDidYouMean: a tools/call of a tool the server does not have is answered, on
// both transports, with mcp-go's -32602 error completed by the closest tool name and the list
// of the server's tools; a name close to nothing gets the list only.
func TestUnknownToolDidYouMean(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"stdio", "http"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			for name, want := range map[string]string{
				"workflows_rnu": "tool 'workflows_rnu' not found: tool not found; did you mean 'workflows_run'? This server's tools: ",
				"zzz":           "tool 'zzz' not found: tool not found; this server's tools: ",
			} {
				req := mcp.CallToolRequest{}
				req.Params.Name = name
				_, err := b.c.CallTool(context.Background(), req)
				if err == nil {
					t.Fatalf("%s: no error", name)
				}
				msg := err.Error()
				if !strings.Contains(msg, want) || !strings.Contains(msg, "workflows_get_status") {
					t.Errorf("%s: %s", name, msg)
				}
				if strings.Contains(name, "zzz") && strings.Contains(msg, "did you mean") {
					t.Errorf("%s: a suggestion for a name close to nothing: %s", name, msg)
				}
			}
			// A known tool still works through the wrapped writer.
			if out, isErr := call(t, b.c, "workflows_lookup", map[string]any{"query": ""}, nil); isErr {
				t.Errorf("workflows_lookup: %v", out)
			}
		})
	}
}
