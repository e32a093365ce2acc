package gotest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// TestToolRemoteThroughAnMCPServerProcess runs tool_remote steps against tests/mcpserver over
// stdio: a plain call, and a remote failure with a structured kind retried by kind.
func TestToolRemoteThroughAnMCPServerProcess(t *testing.T) {
	t.Parallel()
	bin := mcpServer(t)
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

// TestRemotesReadTheEngineEnvironment: a remote's token_env and a stdio remote's environment
// come from the engine's environment (WithEnviron: the live C environment under the C ABI),
// not from Go's copy taken at start: here they are set only in the engine's.
func TestRemotesReadTheEngineEnvironment(t *testing.T) {
	t.Parallel()
	bin := mcpServer(t)
	srv := exec.Command(bin, "-http", "127.0.0.1:0", "-token", "s3cret")
	stdin, err := srv.StdinPipe() // the server exits when its stdin closes
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = srv.Wait() }()
	url, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the HTTP server printed no URL: %v", err)
	}
	const tokenVar, plainVar = "DCC_FLOW_TEST_ENGINE_ENV_TOKEN", "DCC_FLOW_TEST_ENGINE_ENV_VAR"
	if _, set := os.LookupEnv(tokenVar); set {
		t.Fatalf("%s is set in the test's environment", tokenVar)
	}
	environ := func() []string { return append(os.Environ(), tokenVar+"=s3cret", plainVar+"=from the host") }
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Remotes: map[string]engine.RemoteConfig{
		"unreal": {URL: strings.TrimSpace(url), TokenEnv: tokenVar, TimeoutSecs: 30},
		"maya":   {Command: []string{bin}, TimeoutSecs: 30},
	}}, engine.WithEnviron(environ))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	s, err := spec.ParseString(`
steps:
  - {id: authed, kind: tool_remote, dcc: unreal, tool: count, args: {key: k}}
  - {id: child, kind: tool_remote, dcc: maya, tool: getenv, args: {name: ` + plainVar + `}, depends_on: []}
`)
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.Run(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range info.Steps {
		if st.Status != run.StepCompleted {
			t.Errorf("step %s %s: %+v", st.Key, st.Status, st.Error)
		}
	}
	if got, _ := info.Outputs["child"].(map[string]any); got["value"] != "from the host" {
		t.Errorf("the stdio remote's %s: %+v", plainVar, got)
	}
}

// mcpServer builds tests/mcpserver for the test, or returns the binary DCCFLOW_TEST_MCPSERVER
// names, built beforehand where the tests run without a Go toolchain (scripts/test_windows.sh
// runs the Windows build under Wine).
func mcpServer(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("DCCFLOW_TEST_MCPSERVER"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("DCCFLOW_TEST_MCPSERVER: %v", err)
		}
		return bin
	}
	bin := filepath.Join(t.TempDir(), "mcpserver")
	if out, err := exec.Command("go", "build", "-o", bin, "../mcpserver").CombinedOutput(); err != nil {
		t.Fatalf("building the test MCP server: %v\n%s", err, out)
	}
	return bin
}
