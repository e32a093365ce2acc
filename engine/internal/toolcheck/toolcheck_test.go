package toolcheck

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

type remoteCaller struct{}

func (remoteCaller) CallRemote(context.Context, string, string, map[string]any) (flowtype.ToolResult, error) {
	return flowtype.ToolResult{}, nil
}

type others struct{ tools, remotes map[string]bool }

func (o others) HostedNow(tool string) bool    { return o.tools[tool] }
func (o others) HasRemoteNow(name string) bool { return o.remotes[name] }

func router(t *testing.T, remote tools.RemoteCaller, remotes ...string) *tools.Router {
	t.Helper()
	r := tools.NewRouter(clock.NewStub(time.Unix(0, 0)), remote)
	r.SetRemoteNames(remotes)
	if err := r.RegisterHost(tools.ToolInfo{Name: "maya_render"}); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestUnknownSuggestsAndNotes(t *testing.T) {
	k := Scope{Router: router(t, remoteCaller{}, "houdini"), Remotes: map[string]bool{"houdini": true}}
	unknown, sug, notes := k.Unknown([]string{"maya_rendr", "maya_render", tools.Echo},
		[]exec.RemoteTool{{DCC: "houdni", Tool: "cook", Step: "sim"}, {DCC: "houdini", Tool: "cook", Step: "ok"},
			{DCC: "farm", Tool: "maya_rendre", Optional: true, Step: "pooled"}})
	if want := []string{"houdni/cook", "maya_rendr", "maya_rendre"}; !slices.Equal(unknown, want) {
		t.Fatalf("unknown %v; want %v", unknown, want)
	}
	if want := map[string]string{"houdni/cook": "houdini/cook", "maya_rendr": "maya_render", "maya_rendre": "maya_render"}; !maps.Equal(sug, want) {
		t.Errorf("suggestions %v; want %v", sug, want)
	}
	if n := notes["houdni/cook"]; n != `step sim: remote "houdni" is not in the engine config's remotes` {
		t.Errorf("note of the remote: %q", n)
	}
	if n := notes["maya_rendre"]; !strings.Contains(n, `step pooled: pool "farm"`) || !strings.HasSuffix(n, "so the tool runs in-process") {
		t.Errorf("note of the pool step: %q", n)
	}
	if _, ok := notes["maya_rendr"]; ok {
		t.Error("a plain unknown tool has a note")
	}
	if u, s, n := k.Unknown([]string{"maya_render"}, nil); u != nil || s != nil || n != nil {
		t.Errorf("every call known: %v %v %v; want nils", u, s, n)
	}
}

func TestOthersMakeToolsAndRemotesKnown(t *testing.T) {
	k := Scope{Router: router(t, nil), Others: others{tools: map[string]bool{"nuke_comp": true}, remotes: map[string]bool{"farm": true}}}
	unknown, _, notes := k.Unknown([]string{"nuke_comp", "blender_bake"}, []exec.RemoteTool{{DCC: "farm", Tool: "x"}, {DCC: "gpu", Tool: "y", Step: "s"}})
	if want := []string{"blender_bake", "gpu/y"}; !slices.Equal(unknown, want) {
		t.Fatalf("unknown %v; want %v", unknown, want)
	}
	if !strings.Contains(notes["gpu/y"], "advertised by an engine attached to the database") {
		t.Errorf("note %q", notes["gpu/y"])
	}
}

func TestErrNamesTheFixForRemotes(t *testing.T) {
	s, err := spec.ParseString("name: wf\nsteps:\n  - id: a\n    tool: flow__echo\n")
	if err != nil {
		t.Fatal(err)
	}
	if (Scope{Router: router(t, nil)}).Err(s, nil, nil, nil) != nil {
		t.Fatal("Err of nothing unknown is not nil")
	}
	for _, c := range []struct {
		k    Scope
		want string
	}{
		{Scope{Router: router(t, nil)}, "this engine has no remote caller"},
		{Scope{Router: router(t, remoteCaller{})}, "need their remote in the engine config's remotes"},
		{Scope{Router: router(t, nil), Others: others{}}, "dcc-flow worker --db URL --remotes FILE"},
	} {
		err := c.k.Err(s, []string{"gpu/y", "maya_rendr"}, map[string]string{"maya_rendr": "maya_render"}, map[string]string{"gpu/y": "step s: …"})
		e, ok := err.(*run.Error)
		if !ok || e.Code != run.CodeUnknownTool || !strings.Contains(e.Message, c.want) ||
			!strings.Contains(e.Message, `maya_rendr (did you mean "maya_render"?)`) || !strings.Contains(e.Message, "gpu/y (step s: …)") {
			t.Errorf("Err = %v; want unknown_tool naming %q", err, c.want)
			continue
		}
		if _, ok := e.Details["notes"]; !ok {
			t.Errorf("details %v lack notes", e.Details)
		}
	}
	err = (Scope{Router: router(t, nil)}).Err(s, []string{"x"}, map[string]string{}, map[string]string{})
	if e := err.(*run.Error); strings.Contains(e.Message, "remote") || len(e.Details) != 1 {
		t.Errorf("a tool alone: %q, %v", e.Message, e.Details)
	}
}

func TestCanRunFollowsWorkflowsAndBuiltins(t *testing.T) {
	calls := map[string][]string{"top": {"maya_render", tools.Echo}, "child": {"nuke_comp"}, "loop": {}}
	wfs := map[string]*spec.Spec{"child": {Name: "child"}, "loop": {Name: "loop", Steps: []*spec.Step{{ID: "again", Kind: spec.KindWorkflow, Workflow: "loop"}}}}
	sp := Specs{
		Calls:    func(s *spec.Spec) ([]string, []exec.RemoteTool, error) { return calls[s.Name], nil, nil },
		Workflow: func(name string) (*spec.Spec, bool) { s, ok := wfs[name]; return s, ok },
		Builtin:  func(tool string) bool { return tool == tools.Echo },
	}
	top := &spec.Spec{Name: "top", Steps: []*spec.Step{{ID: "sub", Kind: spec.KindWorkflow, Workflow: "child"}}}
	all := Capabilities{Tools: map[string]bool{"maya_render": true, "nuke_comp": true}}
	if !CanRun(top, sp, all) {
		t.Error("an engine with every tool cannot run top")
	}
	if CanRun(top, sp, Capabilities{Tools: map[string]bool{"maya_render": true}}) {
		t.Error("an engine without the child's tool can run top")
	}
	if !CanRun(wfs["loop"], sp, all) {
		t.Error("a workflow that runs itself did not end the walk")
	}
	missing := &spec.Spec{Name: "top", Steps: []*spec.Step{{ID: "sub", Kind: spec.KindWorkflow, Workflow: "nowhere"}}}
	if CanRun(missing, sp, all) {
		t.Error("a workflow not in the catalog can run")
	}
	pooled := Specs{Calls: func(*spec.Spec) ([]string, []exec.RemoteTool, error) {
		return nil, []exec.RemoteTool{{DCC: "farm", Tool: "maya_render", Optional: true}}, nil
	}, Workflow: sp.Workflow, Builtin: sp.Builtin}
	if !CanRun(&spec.Spec{}, pooled, all) || CanRun(&spec.Spec{}, pooled, Capabilities{}) {
		t.Error("a pool step without its pool needs its tool, and only its tool")
	}
}
