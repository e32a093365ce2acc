package gotest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The files of tool steps and the content cache (docs/guide/assets.md), on the memory store and
// on SQLite.

// assetStores runs fn on an engine with each store kind.
func assetStores(t *testing.T, fn func(t *testing.T, opts ...setupOpt)) {
	t.Run("memory", func(t *testing.T) { t.Parallel(); fn(t) })
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		db := filepath.Join(t.TempDir(), "flow.db")
		fn(t, withConfig(func(c *engine.Config) { c.DB = db }))
	})
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// assembleTool registers usd__assemble: it reads the files its args name (layers), writes
// args.out with their concatenation, and reports what it wrote (ToolResult.Files).
func assembleTool(t *testing.T, b *testBundle, during func(flowtype.PendingCall)) *server {
	t.Helper()
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "usd__assemble", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	return b.serve(flowtype.LaneWorker, func(c flowtype.PendingCall) flowtype.ToolResult {
		var text strings.Builder
		layers, _ := c.Args["layers"].([]any)
		for _, l := range layers {
			data, err := os.ReadFile(l.(string))
			if err != nil {
				return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "error", Message: err.Error()}}
			}
			text.Write(data)
		}
		if during != nil {
			during(c)
		}
		out := c.Args["out"].(string)
		if err := os.WriteFile(out, []byte(text.String()), 0o644); err != nil {
			return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "error", Message: err.Error()}}
		}
		return flowtype.ToolResult{Output: map[string]any{"usd": out}, Files: []flowtype.FileUse{{Path: out, Role: flowtype.FileWrite}}}
	})
}

func assembleSpec(dir string, cache string) string {
	return fmt.Sprintf(`
name: shot
inputs: {shot: {type: string, default: sh010}}
steps:
  - id: assemble
    tool: usd__assemble
    args:
      layers: [%q, %q]
      out: %q
    reads: ["%s/assets/*.usda"]
    cache: %s
`, filepath.Join(dir, "assets", "chair.usda"), filepath.Join(dir, "assets", "table.usda"),
		filepath.Join(dir, "{{inputs.shot}}.usda"), filepath.ToSlash(dir), cache) // a YAML "…" string: no backslashes
}

func attemptFiles(t *testing.T, b *testBundle, runID, key string) []engine.FileInfo {
	t.Helper()
	st := b.steps(runID)[key]
	if len(st.AttemptHistory) == 0 {
		t.Fatalf("%s of %s has no attempts: %+v", key, runID, st)
	}
	return st.AttemptHistory[len(st.AttemptHistory)-1].Files
}

// enterDetail is the detail of the step_enter of key in run id, its JSON text with the escapes
// of backslashes undone (a Windows path's reads as the path).
func enterDetail(b *testBundle, id, key string) string {
	return strings.ReplaceAll(enterDetailJSON(b, id, key), `\\`, `\`)
}

// enterDetailJSON is the detail of step key's step_enter event as stored: JSON, for decoding
// (enterDetail unescapes Windows paths' backslashes, for comparing with substrings).
func enterDetailJSON(b *testBundle, id, key string) string {
	for _, e := range b.events(id) {
		if e.Type == run.EventStepEnter && e.StepKey == key {
			return string(e.Detail)
		}
	}
	return ""
}

func TestAttemptRecordsTheFilesItReadAndWrote(t *testing.T) {
	t.Parallel()
	assetStores(t, func(t *testing.T, opts ...setupOpt) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "assets", "chair.usda"), "#usda 1.0\ndef \"chair\" {}\n")
		writeFile(t, filepath.Join(dir, "assets", "table.usda"), "#usda 1.0\ndef \"table\" {}\n")
		b := setup(t, append(opts, withConfig(func(c *engine.Config) {
			c.Env = json.RawMessage(`{"dcc":"usd","version":"25.11"}`)
		}))...)
		assembleTool(t, b, nil)
		info := b.run(assembleSpec(dir, "false"), nil)
		if info.Status != run.StatusCompleted {
			t.Fatalf("run: %s %+v", info.Status, info.Error)
		}
		files := attemptFiles(t, b, info.ID, "assemble")
		got := map[string]engine.FileInfo{}
		for _, f := range files {
			got[f.Role+" "+filepath.Base(f.Path)] = f
		}
		for _, want := range []string{"read chair.usda", "read table.usda", "write sh010.usda"} {
			f, ok := got[want]
			if !ok || f.State != "ok" || !strings.HasPrefix(f.Hash, "blake3:") || len(f.Hash) != len("blake3:")+64 || f.Size == 0 || f.ModTime.IsZero() {
				t.Fatalf("%s: %+v (files %+v)", want, f, files)
			}
		}
		if len(files) != 3 {
			t.Fatalf("files %+v", files)
		}
		env := b.steps(info.ID)["assemble"].AttemptHistory[0].Env
		mustContain(t, "attempt env", string(env), `"dcc":"usd"`, `"version":"25.11"`)
	})
}

func TestCacheSkipsAnUnchangedStepAndSaysWhyItRan(t *testing.T) {
	t.Parallel()
	assetStores(t, func(t *testing.T, opts ...setupOpt) {
		dir := t.TempDir()
		chair := filepath.Join(dir, "assets", "chair.usda")
		writeFile(t, chair, "#usda 1.0\ndef \"chair\" {}\n")
		writeFile(t, filepath.Join(dir, "assets", "table.usda"), "#usda 1.0\ndef \"table\" {}\n")
		b := setup(t, opts...)
		srv := assembleTool(t, b, nil)
		text := assembleSpec(dir, "true")

		first := b.run(text, nil)
		if first.Status != run.StatusCompleted || srv.calls.Load() != 1 {
			t.Fatalf("first run: %s, %d calls", first.Status, srv.calls.Load())
		}
		mustContain(t, "first run's miss", enterDetail(b, first.ID, "assemble"), `"hit":false`, "no earlier run")

		second := b.run(text, nil)
		if second.Status != run.StatusCompleted || srv.calls.Load() != 1 {
			t.Fatalf("unchanged inputs: %s, %d calls (want the cached output)", second.Status, srv.calls.Load())
		}
		st := b.steps(second.ID)["assemble"]
		if !st.Cached || st.Attempts != 0 || jsonOf(t, second.Outputs["assemble"]) != jsonOf(t, first.Outputs["assemble"]) {
			t.Fatalf("second run's step %+v output %v", st, second.Outputs["assemble"])
		}
		var exit run.Event
		for _, e := range b.events(second.ID) {
			if e.Type == run.EventStepExit {
				exit = e
			}
		}
		mustContain(t, "hit detail", string(exit.Detail), `"cached":true`, `"run_id":"`+first.ID+`"`, `"step_key":"assemble"`, `"attempt":1`)

		// An input's content changes: the step runs, and says which file.
		writeFile(t, chair, "#usda 1.0\ndef \"chair\" { float height = 2 }\n")
		third := b.run(text, nil)
		if third.Status != run.StatusCompleted || srv.calls.Load() != 2 {
			t.Fatalf("changed input: %s, %d calls", third.Status, srv.calls.Load())
		}
		mustContain(t, "input changed", enterDetail(b, third.ID, "assemble"), "input changed: "+chair)

		// The output is deleted: the step runs again.
		if err := os.Remove(filepath.Join(dir, "sh010.usda")); err != nil {
			t.Fatal(err)
		}
		fourth := b.run(text, nil)
		if fourth.Status != run.StatusCompleted || srv.calls.Load() != 3 {
			t.Fatalf("deleted output: %s, %d calls", fourth.Status, srv.calls.Load())
		}
		mustContain(t, "output missing", enterDetail(b, fourth.ID, "assemble"), "output missing: "+filepath.Join(dir, "sh010.usda"))

		// Another input value is another key.
		other := b.run(text, map[string]any{"shot": "sh020"})
		if other.Status != run.StatusCompleted || srv.calls.Load() != 4 {
			t.Fatalf("another shot: %s, %d calls", other.Status, srv.calls.Load())
		}
		// A new file matching the declared glob changes the key.
		writeFile(t, filepath.Join(dir, "assets", "lamp.usda"), "#usda 1.0\n")
		if info := b.run(text, nil); info.Status != run.StatusCompleted || srv.calls.Load() != 5 {
			t.Fatalf("a new input file: %s, %d calls", info.Status, srv.calls.Load())
		} else {
			mustContain(t, "declared inputs changed", enterDetail(b, info.ID, "assemble"), "declared inputs changed")
		}
	})
}

// An input that changes while the step runs is recorded unstable, and such an attempt leaves no
// cache entry: the next run calls the tool again.
func TestAnInputChangingDuringTheStepIsUnstableAndNeverCached(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	chair := filepath.Join(dir, "assets", "chair.usda")
	writeFile(t, chair, "#usda 1.0\n")
	writeFile(t, filepath.Join(dir, "assets", "table.usda"), "#usda 1.0\n")
	b := setup(t)
	n := 0
	srv := assembleTool(t, b, func(flowtype.PendingCall) {
		n++
		writeFile(t, chair, fmt.Sprintf("#usda 1.0\n# touched %d, a longer file\n", n))
	})
	text := assembleSpec(dir, "true")
	first := b.run(text, nil)
	if first.Status != run.StatusCompleted {
		t.Fatalf("run: %s", first.Status)
	}
	var unstable *engine.FileInfo
	for _, f := range attemptFiles(t, b, first.ID, "assemble") {
		if f.Path == chair {
			unstable = &f
		}
	}
	if unstable == nil || unstable.State != "unstable" || unstable.Hash != "" || !strings.Contains(unstable.Error, "changed while the step ran") {
		t.Fatalf("the changed input: %+v", unstable)
	}
	if info := b.run(text, nil); info.Status != run.StatusCompleted || srv.calls.Load() != 2 {
		t.Fatalf("after an unstable attempt: %s, %d calls (want the tool called again)", info.Status, srv.calls.Load())
	}
}

// Per foreach item: an item whose input changed runs again, the others are served from the cache.
func TestCacheIsPerForeachItem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, s := range []string{"a", "b", "c"} {
		writeFile(t, filepath.Join(dir, s+".txt"), "shot "+s)
	}
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "conv", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	srv := b.serve(flowtype.LaneWorker, func(c flowtype.PendingCall) flowtype.ToolResult {
		return output(map[string]any{"item": c.Args["path"]})
	})
	text := fmt.Sprintf(`
name: convert
steps:
  - id: each
    kind: foreach
    items: [a, b, c]
    steps:
      - {id: conv, tool: conv, args: {path: "%s/{{item}}.txt"}, reads: "%s/{{item}}.txt", cache: true}
`, filepath.ToSlash(dir), filepath.ToSlash(dir)) // in YAML "…" strings: no backslashes
	if info := b.run(text, nil); info.Status != run.StatusCompleted || srv.calls.Load() != 3 {
		t.Fatalf("first: %s, %d calls", info.Status, srv.calls.Load())
	}
	writeFile(t, filepath.Join(dir, "b.txt"), "shot b, fixed")
	info := b.run(text, nil)
	if info.Status != run.StatusCompleted || srv.calls.Load() != 4 {
		t.Fatalf("after b changed: %s, %d calls (want b alone called again)", info.Status, srv.calls.Load())
	}
	steps := b.steps(info.ID)
	if !steps["each[0].conv"].Cached || steps["each[1].conv"].Cached || !steps["each[2].conv"].Cached {
		t.Fatalf("cached flags a %v b %v c %v", steps["each[0].conv"].Cached, steps["each[1].conv"].Cached, steps["each[2].conv"].Cached)
	}
	// A new version: each item's miss compares with its own earlier entry (not another item's,
	// whose arguments differ) and names the version alone.
	bumped := b.run(strings.Replace(text, "cache: true", `cache: {version: "2"}`, 1), nil)
	for _, key := range []string{"each[0].conv", "each[2].conv"} {
		d := enterDetail(b, bumped.ID, key)
		if !strings.Contains(d, "(version changed since run") {
			t.Fatalf("%s: %s; want the version named alone", key, d)
		}
	}
}

// Declared files past max_files_per_step fail the step with limit_exceeded, naming the setting.
func TestFilesPastTheLimitFailTheStep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i := 0; i < 5; i++ {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("f%d.exr", i)), "x")
	}
	b := setup(t, withConfig(func(c *engine.Config) { c.MaxFilesPerStep = 3 }))
	srv := countingTool(t, b)
	info := b.run(fmt.Sprintf("name: many\nsteps:\n  - {id: export, tool: dcc__export, reads: %q}\n", dir+"/*.exr"), nil)
	st := b.steps(info.ID)["export"]
	if info.Status != run.StatusFailed || st.Error == nil || st.Error.Kind != "limit_exceeded" || !strings.Contains(st.Error.Message, "max_files_per_step") {
		t.Fatalf("run %s step %+v error %+v", info.Status, st, st.Error)
	}
	if srv.calls.Load() != 0 {
		t.Fatalf("the tool was called %d times", srv.calls.Load())
	}
}

// The environment is part of the key: a new DCC version is a miss that says so.
func TestCacheMissesWhenTheEnvironmentChanges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "assets", "chair.usda"), "#usda 1.0\n")
	writeFile(t, filepath.Join(dir, "assets", "table.usda"), "#usda 1.0\n")
	db := filepath.Join(dir, "flow.db")
	text := assembleSpec(dir, "true")
	for i, version := range []string{"2025.1", "2025.1", "2026.0"} {
		t.Run(fmt.Sprintf("%d-maya-%s", i, version), func(t *testing.T) { // one engine at a time on db
			b := setup(t, withConfig(func(c *engine.Config) {
				c.DB = db
				c.Env = json.RawMessage(`{"dcc":"maya","version":"` + version + `"}`)
			}))
			srv := assembleTool(t, b, nil)
			info := b.run(text, nil)
			called := srv.calls.Load() == 1
			if info.Status != run.StatusCompleted || called != (i != 1) {
				t.Fatalf("maya %s: %s, called %v", version, info.Status, called)
			}
			if i == 2 {
				mustContain(t, "environment changed", enterDetail(b, info.ID, "assemble"), "environment changed")
			}
		})
	}
}

// Lineage and staleness through the engine: the attempts of two steps, one reading what the
// other wrote.
func TestLineageAndStaleOfRecordedRuns(t *testing.T) {
	t.Parallel()
	assetStores(t, func(t *testing.T, opts ...setupOpt) {
		dir := t.TempDir()
		chair := filepath.Join(dir, "assets", "chair.usda")
		writeFile(t, chair, "#usda 1.0\ndef \"chair\" {}\n")
		writeFile(t, filepath.Join(dir, "assets", "table.usda"), "#usda 1.0\ndef \"table\" {}\n")
		b := setup(t, append(opts, withConfig(func(c *engine.Config) {
			c.Env = json.RawMessage(`{"dcc":"usd","version":"25.11"}`)
		}))...)
		assembleTool(t, b, nil)
		shot := filepath.Join(dir, "sh010.usda")
		render := filepath.Join(dir, "sh010.exr")
		if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "render", Lane: flowtype.LaneMain}); err != nil {
			t.Fatal(err)
		}
		b.serve(flowtype.LaneMain, func(c flowtype.PendingCall) flowtype.ToolResult {
			writeFile(t, render, "pixels of "+c.Args["scene"].(string))
			return flowtype.ToolResult{Output: map[string]any{"exr": render},
				Files: []flowtype.FileUse{{Path: c.Args["scene"].(string), Role: flowtype.FileRead}, {Path: render, Role: flowtype.FileWrite}}}
		})
		b.run(assembleSpec(dir, "false"), nil)
		rendered := b.run(fmt.Sprintf("name: render\nsteps:\n  - {id: beauty, tool: render, args: {scene: %q}}\n", shot), nil)
		if rendered.Status != run.StatusCompleted {
			t.Fatalf("render: %s", rendered.Status)
		}
		n, err := b.eng.Lineage(b.ctx, render, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n.Made == nil || n.Made.Tool != "render" || n.Made.RunID != rendered.ID || len(n.Made.Inputs) != 1 {
			t.Fatalf("lineage of the render: %+v", n.Made)
		}
		layout := n.Made.Inputs[0]
		if layout.Path != shot || layout.Made == nil || layout.Made.Tool != "usd__assemble" || len(layout.Made.Inputs) != 2 ||
			string(layout.Made.Env) != `{"dcc":"usd","version":"25.11"}` {
			t.Fatalf("lineage of the layout: %+v", layout.Made)
		}
		if _, err := b.eng.Lineage(b.ctx, filepath.Join(dir, "nothing"), 0); codeOf(err) != run.CodeNotFound {
			t.Fatalf("lineage of an unrecorded file: %v", err)
		}
		for what, err := range map[string]error{
			"a negative depth":   func() error { _, err := b.eng.Lineage(b.ctx, render, -1); return err }(),
			"an empty path":      func() error { _, err := b.eng.Lineage(b.ctx, "", 0); return err }(),
			"an empty stale dir": func() error { _, err := b.eng.Stale(b.ctx, []string{""}); return err }(),
			"a negative limit":   func() error { _, err := b.eng.CacheEntries(b.ctx, engine.CacheFilter{Limit: -1}); return err }(),
		} {
			if codeOf(err) != run.CodeInvalidRequest {
				t.Fatalf("%s: %v; want invalid_request", what, err)
			}
		}
		if st, err := b.eng.Stale(b.ctx, []string{dir}); err != nil || len(st) != 0 {
			t.Fatalf("stale before a change: %+v %v", st, err)
		}
		writeFile(t, chair, "#usda 1.0\ndef \"chair\" { float height = 2 }\n")
		st, err := b.eng.Stale(b.ctx, []string{dir})
		if err != nil || len(st) != 2 || st[0].Path != render || st[0].Reason != "made from stale "+shot ||
			st[1].Path != shot || st[1].Reason != "input changed: "+chair {
			t.Fatalf("stale after the chair changed: %+v %v", st, err)
		}
	})
}

// A new file matching a step's declared glob makes what the step wrote stale ("input added"),
// on every store: the glob is recorded with the attempt (not among its files) and expanded again.
func TestStaleSeesANewFileMatchingTheDeclaredGlob(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, opts ...setupOpt) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "assets", "chair.usda"), "#usda 1.0\ndef \"chair\" {}\n")
		writeFile(t, filepath.Join(dir, "assets", "table.usda"), "#usda 1.0\ndef \"table\" {}\n")
		b := setup(t, opts...)
		assembleTool(t, b, nil)
		shot := filepath.Join(dir, "sh010.usda")
		first := b.run(assembleSpec(dir, "true"), nil)
		if first.Status != run.StatusCompleted {
			t.Fatalf("first run: %s", first.Status)
		}
		for _, f := range attemptFiles(t, b, first.ID, "assemble") {
			if f.Role != "read" && f.Role != "write" {
				t.Fatalf("the attempt's files list %+v: want reads and writes only (the glob is not a file)", f)
			}
		}
		if st, err := b.eng.Stale(b.ctx, []string{dir}); err != nil || len(st) != 0 {
			t.Fatalf("stale before a layer was added: %+v %v", st, err)
		}
		lamp := filepath.Join(dir, "assets", "lamp.usda")
		writeFile(t, lamp, "#usda 1.0\ndef \"lamp\" {}\n")
		st, err := b.eng.Stale(b.ctx, []string{dir})
		if err != nil || len(st) != 1 || st[0].Path != shot || st[0].Reason != "input added: "+lamp || st[0].RunID != first.ID {
			t.Fatalf("stale after a layer was added: %+v %v; want %s, input added: %s", st, err, shot, lamp)
		}
		if all, err := b.eng.Stale(b.ctx, nil); err != nil || len(all) != 1 || all[0].Reason != "input added: "+lamp {
			t.Fatalf("stale of every output: %+v %v", all, err)
		}
		again := b.run(assembleSpec(dir, "true"), nil)
		if again.Status != run.StatusCompleted || b.steps(again.ID)["assemble"].Cached {
			t.Fatalf("the run after the layer was added: %s, cached %v; want it run", again.Status, b.steps(again.ID)["assemble"].Cached)
		}
		if st, err := b.eng.Stale(b.ctx, []string{dir}); err != nil || len(st) != 0 {
			t.Fatalf("stale after the rebuild: %+v %v", st, err)
		}
		// Unchanged since: the cache serves it (the glob's record is no file its entry checks).
		if third := b.run(assembleSpec(dir, "true"), nil); !b.steps(third.ID)["assemble"].Cached {
			t.Fatalf("the third run was not served from the cache: %s", enterDetail(b, third.ID, "assemble"))
		}
	}
	t.Run("memory", func(t *testing.T) { t.Parallel(); check(t) })
	persistentStores(t, func(t *testing.T, db string) {
		check(t, withConfig(func(c *engine.Config) { c.DB = db }))
	})
}
