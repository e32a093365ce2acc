package gotest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// The catalog is kept in the database: a reopened engine runs a workflow by name, every version
// of each workflow is listed, and runs say which version they used.
func TestCatalogOutlivesTheProcessWithItsVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "flow.db")
	open := func(cfg engine.Config) *engine.Engine {
		t.Helper()
		cfg.DB = db
		e, err := engine.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	v1, _ := spec.ParseString("name: intake\ndescription: first\nsteps: [{id: a, tool: flow__echo, args: {v: 1}}]")
	v2, _ := spec.ParseString("name: intake\ndescription: second\nsteps: [{id: a, tool: flow__echo, args: {v: 2}}]")
	other, _ := spec.ParseString("name: cleanup\nsteps: [{id: a, tool: flow__echo}]")
	e := open(engine.Config{})
	for _, s := range []*spec.Spec{v1, v2, other} {
		if err := e.Register(s); err != nil {
			t.Fatal(err)
		}
	}
	first, err := e.Run(ctx, engine.StartRequest{Workflow: "intake"})
	if err != nil || first.WorkflowVersion != 2 {
		t.Fatalf("run of version 2: %+v %v", first, err)
	}
	e.Close(ctx)

	e = open(engine.Config{})
	got := e.Lookup("")
	if len(got) != 2 || got[0].Name != "cleanup" || got[0].Version != 1 || got[1].Name != "intake" || got[1].Version != 2 ||
		got[1].Description != "second" || got[1].SpecHash != v2.Hash() {
		t.Fatalf("catalog after reopen: %+v", got)
	}
	info, err := e.Run(ctx, engine.StartRequest{Workflow: "intake"})
	if err != nil || info.Outputs["a"].(map[string]any)["v"] != 2.0 || info.WorkflowVersion != 2 {
		t.Fatalf("run by name after reopen: %+v %v", info, err)
	}
	// The first spec again: version 1 is current again; a new one is version 3.
	if err := e.Register(v1); err != nil {
		t.Fatal(err)
	}
	v3, _ := spec.ParseString("name: intake\nsteps: [{id: a, tool: flow__echo, args: {v: 3}}]")
	if err := e.Register(v3); err != nil {
		t.Fatal(err)
	}
	vs, err := e.WorkflowVersions(ctx, "intake")
	if err != nil || len(vs) != 3 || vs[0].Version != 3 || !vs[0].Current || vs[1].Version != 2 || vs[1].Current ||
		vs[2].Version != 1 || vs[2].SpecHash != v1.Hash() {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	// An unregistered workflow is gone after a reopen too; its versions and runs stay.
	if !e.Unregister("cleanup") {
		t.Fatal("Unregister")
	}
	e.Close(ctx)

	e = open(engine.Config{})
	defer e.Close(ctx)
	if _, ok := e.Workflow("cleanup"); ok {
		t.Fatal("an unregistered workflow came back")
	}
	if _, err := e.Submit(ctx, engine.StartRequest{Workflow: "cleanup"}); run.CodeOf(err) != run.CodeNotFound {
		t.Fatalf("run of an unregistered workflow: %v", err)
	}
	if vs, _ := e.WorkflowVersions(ctx, "cleanup"); len(vs) != 1 || vs[0].Current {
		t.Fatalf("versions of an unregistered workflow: %+v", vs)
	}
	runs, err := e.Runs(ctx, engine.RunFilter{})
	if err != nil || len(runs) != 2 || runs[0].WorkflowVersion != 2 || runs[1].WorkflowVersion != 2 {
		t.Fatalf("runs keep their version: %+v %v", runs, err)
	}
	// A read-only viewer reads the catalog too, and sees versions its owner registers later.
	ro := open(engine.Config{ReadOnly: true})
	defer ro.Close(ctx)
	if _, ok := ro.Workflow("intake"); !ok {
		t.Fatal("a read-only engine has no catalog")
	}
	if _, err := e.Run(ctx, engine.StartRequest{Spec: v1}); err != nil {
		t.Fatal(err)
	}
	runs, _ = ro.Runs(ctx, engine.RunFilter{Limit: 1})
	if len(runs) != 1 || runs[0].WorkflowVersion != 1 {
		t.Fatalf("a run of a spec registered as version 1, seen read-only: %+v", runs)
	}
	adhoc, _ := spec.ParseString("name: intake\nsteps: [{id: a, tool: flow__echo, args: {v: 99}}]")
	if info, err := e.Run(ctx, engine.StartRequest{Spec: adhoc}); err != nil || info.WorkflowVersion != 0 {
		t.Fatalf("a run of a spec never registered has no version: %+v %v", info, err)
	}
}
