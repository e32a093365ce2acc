package gotest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// A cache miss whose call then fails leaves no entry, but its step_enter keeps why the step ran
// and what its key was made of: what `dcc-flow cache explain` shows of it.
func TestACacheMissThatFailsKeepsWhyItRanAndItsKey(t *testing.T) {
	t.Parallel()
	assetStores(t, func(t *testing.T, opts ...setupOpt) {
		dir := t.TempDir()
		in := filepath.Join(dir, "in.usda")
		writeFile(t, in, "#usda 1.0\n")
		b := setup(t, opts...)
		if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "usd__broken", Lane: flowtype.LaneWorker}); err != nil {
			t.Fatal(err)
		}
		srv := b.serve(flowtype.LaneWorker, func(c flowtype.PendingCall) flowtype.ToolResult {
			return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "error", Message: "boom"}}
		})
		text := fmt.Sprintf("name: broken\nsteps:\n  - {id: build, tool: usd__broken, args: {shot: sh010}, reads: %q, cache: {version: \"3\"}}\n",
			filepath.ToSlash(in))
		for i, want := range []string{"no earlier run with this key", "no earlier run with this key"} {
			info := b.run(text, nil)
			if info.Status != run.StatusFailed || int(srv.calls.Load()) != i+1 {
				t.Fatalf("run %d: %s, %d calls; want failed, the tool called each time (a failure leaves no entry)", i+1, info.Status, srv.calls.Load())
			}
			var d struct {
				Cache struct {
					Hit    *bool  `json:"hit"`
					Key    string `json:"key"`
					Reason string `json:"reason"`
					Parts  struct {
						Tool    string         `json:"tool"`
						Version string         `json:"version"`
						Args    map[string]any `json:"args"`
						Reads   []string       `json:"reads"`
					} `json:"parts"`
				} `json:"cache"`
			}
			raw := enterDetailJSON(b, info.ID, "build")
			if err := json.Unmarshal([]byte(raw), &d); err != nil {
				t.Fatalf("run %d: step_enter detail %s: %v", i+1, raw, err)
			}
			c := d.Cache
			if c.Hit == nil || *c.Hit || len(c.Key) != 64 || c.Reason != want || c.Parts.Tool != "usd__broken" || c.Parts.Version != "3" ||
				c.Parts.Args["shot"] != "sh010" || len(c.Parts.Reads) != 1 || c.Parts.Reads[0] != in {
				t.Errorf("run %d: step_enter detail %s; want a miss (%s) with its key's parts", i+1, raw, want)
			}
		}
	})
}

// A new file matching a step's declared glob is a miss that names it ("input added: PATH"),
// and so is one gone ("input removed: PATH"): the expanded list of declared reads is part of
// the key, and the entry before of the same step instance shows what changed in it.
func TestANewFileMatchingTheDeclaredGlobIsAMissThatNamesIt(t *testing.T) {
	t.Parallel()
	assetStores(t, func(t *testing.T, opts ...setupOpt) {
		dir := t.TempDir()
		assets := filepath.Join(dir, "assets")
		for _, name := range []string{"chair", "table"} {
			writeFile(t, filepath.Join(assets, name+".usda"), "#usda 1.0\n")
		}
		b := setup(t, opts...)
		srv := assembleTool(t, b, nil)
		text := assembleSpec(dir, "true")
		if info := b.run(text, nil); info.Status != run.StatusCompleted || srv.calls.Load() != 1 {
			t.Fatalf("first run: %s, %d calls", info.Status, srv.calls.Load())
		}
		writeFile(t, filepath.Join(assets, "lamp.usda"), "#usda 1.0\n")
		added := b.run(text, nil)
		if added.Status != run.StatusCompleted || srv.calls.Load() != 2 {
			t.Fatalf("a new layer: %s, %d calls; want the step run again", added.Status, srv.calls.Load())
		}
		mustContain(t, "a new layer", enterDetail(b, added.ID, "assemble"), `"reason":"input added: `+filepath.Join(assets, "lamp.usda")+
			` (declared inputs changed since run `)
		for _, name := range []string{"lamp", "table"} {
			if err := os.Remove(filepath.Join(assets, name+".usda")); err != nil {
				t.Fatal(err)
			}
		}
		removed := b.run(text, nil)
		if srv.calls.Load() != 3 {
			t.Fatalf("two layers gone: %s, %d calls; want the step run again", removed.Status, srv.calls.Load())
		}
		mustContain(t, "two layers gone", enterDetail(b, removed.ID, "assemble"), `"reason":"input removed: `+filepath.Join(assets, "lamp.usda")+
			` and 1 more (declared inputs changed since run `+added.ID+`)`)
	})
}
