package gotest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

func TestHostToolsLanesAndMaxConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "maya__qc", Lane: flowtype.LaneMain, MaxConcurrent: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "houdini__cook", Lane: flowtype.LaneWorker, MaxConcurrent: 3}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	mainSrv := b.serve(flowtype.LaneMain, func(c flowtype.PendingCall) flowtype.ToolResult {
		<-release
		return output(map[string]any{"lane": "main", "key": c.StepKey})
	})
	workerSrv := b.serve(flowtype.LaneWorker, func(c flowtype.PendingCall) flowtype.ToolResult {
		<-release
		return output(map[string]any{"lane": "worker"})
	})
	id := b.submit(`
steps:
  - id: each
    kind: foreach
    items: [1, 2, 3, 4, 5, 6]
    concurrency: 6
    steps:
      - id: both
        kind: parallel
        steps:
          - { id: qc, tool: maya__qc }
          - { id: cook, tool: houdini__cook }
`, nil)
	b.waitFor("the limits to fill", func() bool { return mainSrv.inFlight.Load() == 1 && workerSrv.inFlight.Load() == 3 })
	time.Sleep(20 * time.Millisecond) // give an over-limit call the chance to show up
	if mainSrv.inFlight.Load() != 1 || workerSrv.inFlight.Load() != 3 {
		t.Fatalf("in flight: main %d (limit 1), worker %d (limit 3)", mainSrv.inFlight.Load(), workerSrv.inFlight.Load())
	}
	close(release)
	info := b.wait(id)
	if info.Status != run.StatusCompleted || mainSrv.calls.Load() != 6 || workerSrv.calls.Load() != 6 {
		t.Fatalf("status %s calls %d %d", info.Status, mainSrv.calls.Load(), workerSrv.calls.Load())
	}
	if mainSrv.maxSeen.Load() != 1 || workerSrv.maxSeen.Load() != 3 {
		t.Fatalf("max in flight: main %d worker %d", mainSrv.maxSeen.Load(), workerSrv.maxSeen.Load())
	}
	if out := b.steps(id)["each[4].qc"].Output.(map[string]any); out["key"] != "each[4].qc" || out["lane"] != "main" {
		t.Fatalf("qc output %+v", out)
	}
}

func TestHostToolErrorsAndJSONOutput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "py__tool"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []flowtype.ToolInfo{{Name: "flow__x"}, {Name: "a b"}, {Name: "t", Lane: "gpu"}, {Name: "t", MaxConcurrent: -2}} {
		if err := b.eng.RegisterTool(bad); codeOf(err) != run.CodeInvalidRequest {
			t.Errorf("RegisterTool(%+v): %v", bad, err)
		}
	}
	names := map[string]bool{}
	for _, ti := range b.eng.Tools() {
		names[ti.Name] = ti.Builtin
	}
	if !names["flow__echo"] || !names["flow__sleep"] || !names["flow__fail"] || names["py__tool"] {
		t.Fatalf("tools %v", names)
	}
	id := b.submit(`
steps:
  - { id: good, tool: py__tool, args: { n: 1 } }
  - { id: bad, tool: py__tool, args: { n: 2 } }
`, nil)
	c := b.nextCall(flowtype.LaneMain)
	if err := b.eng.Host().Complete(c.ID, flowtype.ToolResult{OutputJSON: []byte(`{"frames":[1,2,3]}`)}); err != nil {
		t.Fatal(err)
	}
	c = b.nextCall(flowtype.LaneMain)
	if err := b.eng.Host().Complete(c.ID, flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "permission", Message: "read-only scene", Trace: "Traceback (most recent call last): …"}}); err != nil {
		t.Fatal(err)
	}
	info := b.wait(id)
	if jsonOf(t, b.steps(id)["good"].Output) != `{"frames":[1,2,3]}` {
		t.Fatalf("JSON output %+v", b.steps(id)["good"].Output)
	}
	if info.Status != run.StatusFailed || info.Error.Kind != "permission" || info.Error.Trace != "Traceback (most recent call last): …" {
		t.Fatalf("status %s error %+v", info.Status, info.Error)
	}
	// Invalid JSON from the host fails the step.
	id = b.submit("steps: [{ id: s, tool: py__tool }]", nil)
	c = b.nextCall(flowtype.LaneMain)
	_ = b.eng.Host().Complete(c.ID, flowtype.ToolResult{OutputJSON: []byte(`{nope`)})
	if info := b.wait(id); info.Status != run.StatusFailed {
		t.Fatalf("invalid JSON output: %s", info.Status)
	} else {
		mustContain(t, "error", info.Error.Message, "not valid JSON")
	}
}

func TestHostAnswersASequentialFlowCallByCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "step"}); err != nil {
		t.Fatal(err)
	}
	id := b.submit(`
steps:
  - { id: a, tool: step, args: { n: 1 } }
  - { id: b, tool: step, args: { n: "{{a.n}}" } }
  - { id: c, tool: step, args: { n: "{{b.n}}" } }
`, nil)
	host := b.eng.Host()
	// One puller answers each call, then pulls the next: Python's loop through the C ABI.
	puller, err := host.OpenPuller("")
	if err != nil {
		t.Fatal(err)
	}
	defer host.ClosePuller(puller)
	pull := flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, RunID: id, Max: 1, Timeout: waitLimit, Puller: puller}
	calls, err := host.Pull(b.ctx, pull)
	for n := 1.0; err == nil && len(calls) == 1; n++ {
		if calls[0].Args["n"] != n {
			t.Fatalf("call %s got n=%v, want %v", calls[0].StepKey, calls[0].Args["n"], n)
		}
		if err = host.Complete(calls[0].ID, output(map[string]any{"n": n + 1})); err != nil || calls[0].StepKey == "c" {
			break
		}
		calls, err = host.Pull(b.ctx, pull)
	}
	if err != nil {
		t.Fatal(err)
	}
	if info := b.wait(id); info.Status != run.StatusCompleted || jsonOf(t, info.Outputs["c"]) != `{"n":4}` {
		t.Fatalf("status %s outputs %s", info.Status, jsonOf(t, info.Outputs))
	}
}

type remoteDouble struct {
	calls atomic.Int32
	block chan struct{}
}

func (r *remoteDouble) CallRemote(ctx context.Context, dcc, tool string, args map[string]any) (flowtype.ToolResult, error) {
	r.calls.Add(1)
	switch tool {
	case "import_assets":
		return output(map[string]any{"dcc": dcc, "imported": args["files"]}), nil
	case "flaky":
		if r.calls.Load() < 3 {
			return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "transient", Message: "connection reset"}}, nil
		}
		return output("ok"), nil
	case "hang":
		<-r.block // ignores ctx
	}
	return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "not_found", Message: "no tool " + tool}}, nil
}

func TestToolRemoteThroughARemoteCaller(t *testing.T) {
	t.Parallel()
	rd := &remoteDouble{block: make(chan struct{})}
	t.Cleanup(func() { close(rd.block) })
	b := setup(t,
		withConfig(func(c *engine.Config) {
			c.Remotes = map[string]engine.RemoteConfig{"unreal": {URL: "http://127.0.0.1:9/mcp"}}
		}),
		withOptions(engine.WithRemoteCaller(rd)))
	info := b.run(`
steps:
  - { id: files, tool: flow__echo, args: { list: [a.fbx, b.fbx] } }
  - { id: push, kind: tool_remote, dcc: unreal, tool: import_assets, args: { files: "{{files.list}}" } }
  - id: retry
    kind: tool_remote
    dcc: unreal
    tool: flaky
    retry: { max_attempts: 3, initial_delay_ms: 1 }
`, nil)
	if info.Status != run.StatusCompleted {
		t.Fatalf("status %s %+v", info.Status, info.Error)
	}
	if got := jsonOf(t, info.Outputs["push"]); got != `{"dcc":"unreal","imported":["a.fbx","b.fbx"]}` {
		t.Fatalf("push %s", got)
	}
	if st := b.steps(info.ID)["retry"]; st.Attempts != 2 {
		t.Fatalf("remote retries: %+v", st)
	}
	// A remote that ignores its context is abandoned on cancel.
	id := b.submit("steps: [{ id: h, kind: tool_remote, dcc: unreal, tool: hang }]", nil)
	b.waitStep(id, "h", run.StepRunning)
	b.cancelAndWait(id, "stop waiting")
	// Unknown remote.
	_, err := b.eng.Submit(b.ctx, engine.StartRequest{Spec: parse(t, "steps: [{ id: x, kind: tool_remote, dcc: maya, tool: t }]")})
	if re := asRunError(err); re == nil || re.Code != run.CodeUnknownTool || jsonOf(t, re.Details["tools"]) != `["maya/t"]` {
		t.Fatalf("unknown remote: %v", err)
	}
}

func TestArtefactsAreCaptured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "shot.fbx")
	if err := os.WriteFile(path, []byte("FBX"), 0o600); err != nil {
		t.Fatal(err)
	}
	inline := base64.StdEncoding.EncodeToString([]byte("hello"))
	info := b.run(`
inputs: { path: { type: string }, inline: { type: string } }
steps:
  - id: export
    tool: flow__echo
    args:
      file_refs:
        - { inline_b64: "{{inputs.inline}}", mime: text/plain }
        - { path: "{{inputs.path}}", mime: application/octet-stream }
        - { uri: "s3://bucket/key" }
        - { path: "/does/not/exist.fbx" }
        - 42
  - id: use
    tool: flow__echo
    args: { uri: "{{steps.export.file_refs[0].uri}}", path: "{{steps.export.file_refs[1].path}}", raw: "{{export.file_refs[0].mime}}" }
`, map[string]any{"path": path, "inline": inline})
	if info.Status != run.StatusCompleted {
		t.Fatalf("status %s %+v", info.Status, info.Error)
	}
	refs := b.steps(info.ID)["export"].FileRefs
	if len(refs) != 5 {
		t.Fatalf("refs %s", jsonOf(t, refs))
	}
	helloSHA := "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	fbxSum := sha256.Sum256([]byte("FBX"))
	fbxSHA := hex.EncodeToString(fbxSum[:])
	r0 := refs[0].(map[string]any)
	if r0["uri"] != "artefact://sha256/"+helloSHA || r0["sha256"] != helloSHA || r0["size"] != 5.0 || r0["mime"] != "text/plain" {
		t.Fatalf("inline ref %+v", r0)
	}
	r1 := refs[1].(map[string]any)
	fileURI := "file://" + filepath.ToSlash(path)
	if filepath.VolumeName(path) != "" {
		fileURI = "file:///" + filepath.ToSlash(path) // C:\x → file:///C:/x (RFC 8089)
	}
	if r1["path"] != path || r1["size"] != 3.0 || r1["sha256"] != fbxSHA || r1["uri"] != fileURI {
		t.Fatalf("path ref %+v", r1)
	}
	if r2 := refs[2].(map[string]any); r2["uri"] != "s3://bucket/key" || r2["error"] != nil {
		t.Fatalf("uri ref %+v", r2)
	}
	if r3 := refs[3].(map[string]any); r3["error"] == nil || r3["path"] != "/does/not/exist.fbx" {
		t.Fatalf("missing file ref %+v", r3)
	}
	if r4 := refs[4].(map[string]any); r4["error"] == nil {
		t.Fatalf("bad ref %+v", r4)
	}
	data, err := b.eng.Artefact(b.ctx, "artefact://sha256/"+helloSHA)
	if err != nil || string(data) != "hello" {
		t.Fatalf("Artefact: %q %v", data, err)
	}
	if data, err := b.eng.Artefact(b.ctx, helloSHA); err != nil || string(data) != "hello" {
		t.Fatalf("Artefact by hash: %q %v", data, err)
	}
	if _, err := b.eng.Artefact(b.ctx, "artefact://sha256/"+fbxSHA); codeOf(err) != run.CodeNotFound {
		t.Fatalf("a path ref is not in the store: %v", err)
	}
	use := info.Outputs["use"].(map[string]any)
	if use["uri"] != "artefact://sha256/"+helloSHA || use["path"] != path || use["raw"] != "text/plain" {
		t.Fatalf("templates see %+v", use)
	}
}
