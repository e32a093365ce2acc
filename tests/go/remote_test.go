package gotest

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// TestToolRemoteThroughAnMCPServerProcess runs tool_remote steps against tests/mcpserver over
// stdio: a plain call, and a remote failure with a structured kind retried by kind.
func TestToolRemoteThroughAnMCPServerProcess(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "mcpserver")
	if out, err := exec.Command("go", "build", "-o", bin, "../mcpserver").CombinedOutput(); err != nil {
		t.Fatalf("building the test MCP server: %v\n%s", err, out)
	}
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Remotes: map[string]engine.RemoteConfig{
		"maya": {Command: []string{bin}, TimeoutSecs: 30},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	s, err := spec.ParseString(`
name: remote
steps:
  - {id: hello, kind: tool_remote, dcc: maya, tool: echo, args: {scene: /shots/a.ma}}
  - id: flaky
    kind: tool_remote
    dcc: maya
    tool: fail
    args: {times: 2, kind: transient, key: k1}
    retry: {max_attempts: 5, initial_delay_ms: 1, max_delay_ms: 2, retry_on: [transient]}
`)
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.Run(ctx, engine.StartRequest{Spec: s})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, info)
	}
	if info.Outputs["hello"].(map[string]any)["scene"] != "/shots/a.ma" {
		t.Fatalf("echo output %+v", info.Outputs["hello"])
	}
	for _, st := range info.Steps {
		if st.Key == "flaky" && st.Attempts != 3 {
			t.Fatalf("flaky took %d attempts, want 3", st.Attempts)
		}
	}
	// An unknown remote is refused before the run starts.
	bad, _ := spec.ParseString("steps: [{id: x, kind: tool_remote, dcc: houdini, tool: echo}]")
	if _, err := e.Submit(ctx, engine.StartRequest{Spec: bad}); run.CodeOf(err) != run.CodeUnknownTool {
		t.Fatalf("unknown remote: %v", err)
	}
}
